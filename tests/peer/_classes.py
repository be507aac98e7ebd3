"""xarray's own backend round-trip classes, and the fixtures and markers they need.

xarray ships its backend tests in the wheel (``xarray/tests/test_backends.py``). Its classes
write a dataset with xarray's writer (``save``, ``create_store``) and read it back with
``open``; :mod:`test_peer_backends` changes only ``open``. ``own_classes.py`` collects the
classes unchanged (xarray's engines), which is how :data:`XARRAY_OWN` is made.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

xtb = pytest.importorskip("xarray.tests.test_backends")
pytest.importorskip("netCDF4")
pytest.importorskip("h5netcdf")
pytest.importorskip("scipy")
pytest.importorskip("zarr")

from xarray.tests.test_backends import default_zarr_format  # noqa: E402,F401 - a fixture

#: the four classes of the contract, as xarray defines them
CLASSES = {
    "TestZarrDirectoryStore": xtb.TestZarrDirectoryStore,
    "TestScipyFilePath": xtb.TestScipyFilePath,
    "TestH5NetCDFData": xtb.TestH5NetCDFData,
    "TestNetCDF4Data": xtb.TestNetCDF4Data,
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
