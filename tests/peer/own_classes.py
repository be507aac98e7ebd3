"""xarray's four backend classes unchanged (xarray's own engines): what ``baseline.py`` runs
to learn which tests pass with xarray's engines on this machine. Not collected by default."""

from __future__ import annotations

from _classes import CLASSES, default_zarr_format  # noqa: F401 - the fixture, for the zarr class

TestZarrDirectoryStore = CLASSES["TestZarrDirectoryStore"]
TestScipyFilePath = CLASSES["TestScipyFilePath"]
TestH5NetCDFData = CLASSES["TestH5NetCDFData"]
TestNetCDF4Data = CLASSES["TestNetCDF4Data"]
