"""xarray's own backend round-trip tests, read back through ``engine="tsexplore"``.

Each class is xarray's (``xarray/tests/test_backends.py``, from the installed wheel) with
one change: ``open`` -- what every ``roundtrip`` reads the written file or store with -- is
``xr.open_dataset(path, engine="tsexplore", **kwargs)``. Writing stays xarray's. A test that
passes with xarray's engine must pass here; one that does not pass with xarray's own engine
on this machine (``xarray_own.json``, written by running the unchanged classes:
``python tests/peer/baseline.py``) is skipped with xarray's own outcome as the reason, and
one that xarray skips or marks xfail is left so. The counts per class go to
``test-artifacts/peer-counts.json``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import xarray as xr
from _classes import CLASSES, default_zarr_format  # noqa: F401 - the fixture, for the zarr class


@contextlib.contextmanager
def _open_tsexplore(self: Any, path: Any, **kwargs: Any) -> Iterator[xr.Dataset]:
    kwargs.pop("mode", None)  # xarray's zarr tests open with mode="r"; tsexplore only reads
    kwargs.update(getattr(self, "version_kwargs", {}))
    with xr.open_dataset(path, engine="tsexplore", **kwargs) as ds:
        yield ds


class TestZarrDirectoryStore(CLASSES["TestZarrDirectoryStore"]):  # type: ignore[misc,valid-type]
    open = _open_tsexplore


class TestScipyFilePath(CLASSES["TestScipyFilePath"]):  # type: ignore[misc,valid-type]
    open = _open_tsexplore


class TestH5NetCDFData(CLASSES["TestH5NetCDFData"]):  # type: ignore[misc,valid-type]
    open = _open_tsexplore


class TestNetCDF4Data(CLASSES["TestNetCDF4Data"]):  # type: ignore[misc,valid-type]
    open = _open_tsexplore
