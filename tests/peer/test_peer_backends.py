"""xarray's own backend round-trip tests, read back through ``engine="tsexplore"``.

Each class is xarray's (``xarray/tests/test_backends.py`` and ``test_backends_datatree.py``,
from the installed wheel). Writing stays xarray's; reading goes to tsexplore:

- the four classes of :data:`_classes.CLASSES` change ``open`` -- what every
  ``roundtrip`` reads the written file or store with -- to
  ``xr.open_dataset(path, engine="tsexplore", **kwargs)``;
- every class (those four and the classes of :data:`_classes.ROUTED`: NetCDF via
  netCDF4/h5netcdf/dask, NETCDF4_CLASSIC and NetCDF3 formats, bytes and ``memoryview``, file
  objects, already-open data stores, Zarr store objects, DataTree IO) also calls
  ``open_dataset``, ``load_dataset``, ``open_zarr``, ``open_datatree`` and ``open_groups``
  itself, with xarray's engines by name (or none, guessed): there xarray's engine lookup
  answers every reading engine (``netcdf4``,
  ``h5netcdf``, ``scipy``, ``zarr``, ``store``) with tsexplore's, so each of those calls
  reaches ``TsExploreBackendEntrypoint`` with the same object and the same keyword
  arguments (``phony_dims``, ``open_kwargs``, ``consolidated``...) that xarray's engine
  would have had, and the engine's name as ``via=`` (tsexplore then reads the metadata
  through that engine's store, as a user switching from it would ask; an engine xarray
  guessed is not named: tsexplore guesses). An unknown engine name still fails as xarray
  fails.

A test that passes with xarray's engine must pass here; one that does not pass with
xarray's own engine on this machine (``xarray_own.json``, written by running the unchanged
classes: ``python tests/peer/baseline.py``) is skipped with xarray's own outcome as the
reason, and one that xarray skips or marks xfail is left so. The counts per class go to
``test-artifacts/peer-counts.json``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import xarray as xr
from _classes import CLASSES, ROUTED, default_zarr_format  # noqa: F401 - the fixture, for the zarr classes
from xarray.backends import plugins

from tsexplore.xarray import TsExploreBackendEntrypoint

#: xarray's reading engines whose reads go to tsexplore in the routed classes
READING_ENGINES = ("netcdf4", "h5netcdf", "scipy", "zarr", "store")


@contextlib.contextmanager
def _open_tsexplore(self: Any, path: Any, **kwargs: Any) -> Iterator[xr.Dataset]:
    kwargs.pop("mode", None)  # xarray's zarr tests open with mode="r"; tsexplore only reads
    kwargs.update(getattr(self, "version_kwargs", {}))
    with xr.open_dataset(path, engine="tsexplore", **kwargs) as ds:
        yield ds


#: what xarray's engine lookup is given when ``engine=None`` (guessed): tsexplore, no hint
GUESSED = "tsexplore"


class Via(TsExploreBackendEntrypoint):
    """tsexplore's entrypoint told which xarray engine the test named (``via=``): the file's
    metadata is read by that engine's store, so attributes, encodings, warnings and errors
    are that engine's own. A name the test did not give is not passed."""

    def __init__(self, via: str | None = None) -> None:
        self.via = via

    def open_dataset(self, filename_or_obj: Any, **kwargs: Any) -> xr.Dataset:  # type: ignore[override]
        return super().open_dataset(filename_or_obj, **self._hint(kwargs))

    def open_groups_as_dict(self, filename_or_obj: Any, **kwargs: Any) -> dict[str, xr.Dataset]:  # type: ignore[override]
        return super().open_groups_as_dict(filename_or_obj, **self._hint(kwargs))

    def _hint(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if self.via is not None and self.via != "store":
            kwargs.setdefault("via", self.via)
        return kwargs


def _routing(monkeypatch: pytest.MonkeyPatch) -> None:
    """xarray's engine lookup answering tsexplore's entrypoint for every reading engine (by
    name or by class; guessed ones without a hint), and xarray's answer for anything else."""
    real_get, real_guess = plugins.get_backend, plugins.guess_engine
    classes = {plugins.BACKEND_ENTRYPOINTS[name][1]: name for name in READING_ENGINES
               if name in plugins.BACKEND_ENTRYPOINTS}

    def guess_engine(obj: Any, must_support_groups: bool = False) -> Any:
        engine = real_guess(obj, must_support_groups=must_support_groups)
        return GUESSED if engine in READING_ENGINES else engine

    def get_backend(engine: Any) -> Any:
        if engine == GUESSED:
            return Via()
        if isinstance(engine, str) and engine in READING_ENGINES:
            return Via(engine)
        if isinstance(engine, type) and engine in classes:
            return Via(classes[engine])
        return real_get(engine)

    monkeypatch.setattr(plugins, "guess_engine", guess_engine)
    monkeypatch.setattr(plugins, "get_backend", get_backend)


class Routed:
    """Every read of the test goes to tsexplore (see the module docstring)."""

    @pytest.fixture(autouse=True)
    def _reads_through_tsexplore(self, monkeypatch: pytest.MonkeyPatch) -> None:
        _routing(monkeypatch)


class TestZarrDirectoryStore(Routed, CLASSES["TestZarrDirectoryStore"]):  # type: ignore[misc,valid-type]
    open = _open_tsexplore


class TestScipyFilePath(Routed, CLASSES["TestScipyFilePath"]):  # type: ignore[misc,valid-type]
    open = _open_tsexplore


class TestH5NetCDFData(Routed, CLASSES["TestH5NetCDFData"]):  # type: ignore[misc,valid-type]
    open = _open_tsexplore


class TestNetCDF4Data(Routed, CLASSES["TestNetCDF4Data"]):  # type: ignore[misc,valid-type]
    open = _open_tsexplore


def _own_tests_only(cls: type, parent: type) -> dict[str, None]:
    """``cls``'s inherited tests that ``parent`` runs already, set to None (pytest collects
    no test by that name): a subclass that adds a few tests runs only those."""
    return {name: None for name in dir(parent) if name.startswith("test_") and name not in vars(cls)}


for _name, _cls in ROUTED.items():
    _body: dict[str, Any] = {"__module__": __name__, "__doc__": _cls.__doc__}
    if _name == "TestZarrWriteEmpty":  # TestZarrDirectoryStore's tests run there
        _body.update(_own_tests_only(_cls, CLASSES["TestZarrDirectoryStore"]))
    globals()[_name] = type(_name, (Routed, _cls), _body)
