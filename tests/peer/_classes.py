"""xarray's own backend round-trip classes, and the fixtures and markers they need.

xarray ships its backend tests in the wheel (``xarray/tests/test_backends.py`` and
``test_backends_datatree.py``). Its classes write a dataset with xarray's writer (``save``,
``create_store``, ``to_netcdf``, ``to_zarr``) and read it back with ``open``,
``open_dataset``, ``load_dataset``, ``open_zarr``, ``open_datatree`` or ``open_groups``;
:mod:`test_peer_backends` sends every read to ``engine="tsexplore"`` and changes nothing
else. ``own_classes.py`` collects the classes unchanged (xarray's engines), which is how
:data:`XARRAY_OWN` is made.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

xtb = pytest.importorskip("xarray.tests.test_backends")
xtd = pytest.importorskip("xarray.tests.test_backends_datatree")
pytest.importorskip("netCDF4")
pytest.importorskip("h5netcdf")
pytest.importorskip("scipy")
pytest.importorskip("zarr")

from xarray.tests.test_backends import default_zarr_format  # noqa: E402,F401 - a fixture

#: the four classes of the contract whose ``open`` is swapped, as xarray defines them
CLASSES = {
    "TestZarrDirectoryStore": xtb.TestZarrDirectoryStore,
    "TestScipyFilePath": xtb.TestScipyFilePath,
    "TestH5NetCDFData": xtb.TestH5NetCDFData,
    "TestNetCDF4Data": xtb.TestNetCDF4Data,
}

#: xarray's other NetCDF, in-memory, file-object, Zarr store-object and DataTree IO classes:
#: every read they make goes to tsexplore (their ``open`` and xarray's engine lookup)
ROUTED = {
    # NetCDF files through netCDF4 / h5netcdf, dask, NetCDF3 and NETCDF4_CLASSIC formats
    "TestNetCDF4ViaDaskData": xtb.TestNetCDF4ViaDaskData,
    "TestH5NetCDFViaDaskData": xtb.TestH5NetCDFViaDaskData,
    "TestNetCDF3ViaNetCDF4Data": xtb.TestNetCDF3ViaNetCDF4Data,
    "TestNetCDF4ClassicViaNetCDF4Data": xtb.TestNetCDF4ClassicViaNetCDF4Data,
    "TestNetCDF4ClassicViaH5NetCDFData": xtb.TestNetCDF4ClassicViaH5NetCDFData,
    "TestGenericNetCDFData": xtb.TestGenericNetCDFData,
    # already-open xarray data stores
    "TestNetCDF4AlreadyOpen": xtb.TestNetCDF4AlreadyOpen,
    "TestH5NetCDFAlreadyOpen": xtb.TestH5NetCDFAlreadyOpen,
    # bytes and memoryview of a NetCDF file
    "TestGenericNetCDF4InMemory": xtb.TestGenericNetCDF4InMemory,
    "TestNetCDF4InMemory": xtb.TestNetCDF4InMemory,
    "TestScipyInMemoryData": xtb.TestScipyInMemoryData,
    "TestH5NetCDFInMemoryData": xtb.TestH5NetCDFInMemoryData,
    # file objects
    "TestScipyFileObject": xtb.TestScipyFileObject,
    "TestH5NetCDFFileObject": xtb.TestH5NetCDFFileObject,
    # Zarr store objects
    "TestZarrDictStore": xtb.TestZarrDictStore,
    "TestZarrNoConsolidatedMetadataSupport": xtb.TestZarrNoConsolidatedMetadataSupport,
    "TestZarrWriteEmpty": xtb.TestZarrWriteEmpty,
    # DataTree IO
    "TestNetCDF4DataTree": xtd.TestNetCDF4DataTree,
    "TestGenericNetCDFIO": xtd.TestGenericNetCDFIO,
    "TestNetCDF4DatatreeIO": xtd.TestNetCDF4DatatreeIO,
    "TestH5NetCDFDatatreeIO": xtd.TestH5NetCDFDatatreeIO,
    "TestZarrDatatreeIO": xtd.TestZarrDatatreeIO,
}

HERE = Path(__file__).resolve().parent
#: what xarray's own engines do with each test here (``python tests/peer/baseline.py`` writes it)
XARRAY_OWN = HERE / "xarray_own.json"


def own_outcomes() -> dict[str, dict[str, str]]:
    """``{"Class::test[params]": {"outcome": ..., "why": ...}}`` for the tests that do not
    pass with xarray's own engine here (failed or errored; skips skip in both suites)."""
    if not XARRAY_OWN.exists():
        return {}
    return json.loads(XARRAY_OWN.read_text())["not_passing"]
