"""xarray's backend classes unchanged (xarray's own engines): what ``baseline.py`` runs to
learn which tests pass with xarray's engines on this machine. Not collected by default."""

from __future__ import annotations

from _classes import CLASSES, ROUTED, default_zarr_format  # noqa: F401 - the fixture, for the zarr classes

for _name, _cls in {**CLASSES, **ROUTED}.items():
    globals()[_name] = _cls
