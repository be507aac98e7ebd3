"""The xarray face: ``open_dataset``, the ``engine="tsexplore"`` backend and the ``.tse`` accessor."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import xarray as xr
from xarray.backends import BackendEntrypoint
from xarray.core import indexing

from .engine.array import StreamingArray
from .engine.scheduler import get_engine, set_cache_bytes
from .errors import ConfigError
from .sources import SourceGroup, open_group

PREFETCH_POLICIES = ("auto", "off", "momentum", "neighbourhood")


def _build_dataset(group: SourceGroup, prefetch: Any = "auto") -> xr.Dataset:
    variables: dict[str, xr.Variable] = {}
    for name, (dims, values, attrs) in group.coords.items():
        variables[name] = xr.Variable(dims, values, attrs)
    data_vars = {}
    for name, source in group.variables.items():
        source.prefetch = "off" if prefetch in (False, None) else prefetch  # type: ignore[attr-defined]
        lazy = indexing.LazilyIndexedArray(StreamingArray(source))
        encoding = {
            "chunks": source.chunks,
            "preferred_chunks": dict(zip(source.dims, source.chunks)),
            "source": getattr(source, "path", None) or source.token,
        }
        if group.multiscale is not None:  # ds.tse.levels finds the other levels from here
            encoding["multiscales"] = group.multiscale.encoding(group.level)
        data_vars[name] = xr.Variable(source.dims, lazy, dict(source.attrs), encoding)
    ds = xr.Dataset(data_vars, coords=variables, attrs=dict(group.attrs))
    # CF decoding (times, _FillValue, scale_factor) exactly as xarray does it, still lazy
    return xr.decode_cf(ds)


def _check(missing: str, prefetch: Any, cache_bytes: Any) -> None:
    if missing not in ("raise", "fill"):
        raise ConfigError(f"missing must be 'raise' or 'fill', got {missing!r}")
    if prefetch not in PREFETCH_POLICIES and prefetch not in (True, False, None):
        raise ConfigError(f"prefetch must be one of {PREFETCH_POLICIES}, got {prefetch!r}")
    if cache_bytes is not None and (not isinstance(cache_bytes, (int, np.integer)) or cache_bytes < 0):
        raise ConfigError(f"cache_bytes must be a non-negative int of bytes, got {cache_bytes!r}")


def open_dataset(
    source: Any,
    cache_bytes: int | None = None,
    prefetch: Any = "auto",
    missing: str = "raise",
    chunks: Any = None,
    storage_options: dict[str, Any] | None = None,
    *,
    grid: Any = None,
    size: Any = None,
) -> xr.Dataset:
    """Open ``source`` as a lazy, engine-backed :class:`xarray.Dataset`.

    ``source``: a Zarr store (path or fsspec URL), a NetCDF/HDF5 file, a ``.npy`` file, a
    folder of images, a NumPy/dask array or an xarray object. Nothing but metadata (and
    index coordinates) is read here; values are read chunk by chunk when asked for.

    ``cache_bytes`` sets the process-wide cache budget; ``prefetch`` is ``"auto"`` (learn
    from the access pattern), ``"momentum"``, ``"neighbourhood"`` or ``"off"``;
    ``missing="fill"`` turns absent chunks into fill values (counted in the stats) instead of
    raising :class:`~tsexplore.errors.MissingChunkError`. ``chunks`` (``{}`` for the native
    grid, or a dict of sizes) gives dask arrays whose tasks read through the engine.
    ``grid`` sets the virtual chunk grid of sources that have none (``.npy``, NetCDF3, NumPy).
    ``size`` (an int or ``(height, width)``) resizes every image of an image folder.
    """
    _check(missing, prefetch, cache_bytes)
    if cache_bytes is not None:
        set_cache_bytes(int(cache_bytes))
    group = open_group(
        source, storage_options=storage_options, missing=missing, grid=grid, size=size
    )
    for src in group.variables.values():
        src.missing = missing  # type: ignore[attr-defined]
    get_engine()
    ds = _build_dataset(group, prefetch)
    if chunks is not None:
        ds = _to_dask(ds, group, chunks)
    return ds


def _to_dask(ds: xr.Dataset, group: SourceGroup, chunks: Any) -> xr.Dataset:
    out = ds.copy()
    for name, source in group.variables.items():
        if name not in out.data_vars or out[name].dtype != source.dtype:
            # CF decoding changed the values (scale/offset): let xarray chunk the lazy array
            out[name] = out[name].chunk(chunks if chunks else source.chunks)
            continue
        if isinstance(chunks, dict):
            per_dim = {d: chunks.get(d) for d in source.dims if d in chunks}
        elif chunks in ({}, "native"):
            per_dim = {}
        else:
            raise ConfigError(f"chunks must be a dict (e.g. {{}} or {{'time': 32}}), got {chunks!r}")
        arr = StreamingArray(source).to_dask(per_dim or None)
        out[name] = xr.Variable(source.dims, arr, out[name].attrs, out[name].encoding)
    return out


class TsExploreBackendEntrypoint(BackendEntrypoint):
    """``xr.open_dataset(path, engine="tsexplore")``: the same as ``tse.open_dataset(path)``."""

    description = "Stream Zarr, NetCDF/HDF5 and .npy through the tsexplore engine"
    url = "https://github.com/tsexplore/tsexplore"
    open_dataset_parameters = ("filename_or_obj", "drop_variables", "missing", "prefetch", "storage_options")

    def open_dataset(  # type: ignore[override]
        self,
        filename_or_obj: Any,
        *,
        drop_variables: Any = None,
        missing: str = "raise",
        prefetch: Any = "auto",
        storage_options: dict[str, Any] | None = None,
    ) -> xr.Dataset:
        _check(missing, prefetch, None)
        group = open_group(filename_or_obj, storage_options=storage_options, missing=missing)
        for src in group.variables.values():
            src.missing = missing  # type: ignore[attr-defined]
        if drop_variables:
            drop = {drop_variables} if isinstance(drop_variables, str) else set(drop_variables)
            group.variables = {k: v for k, v in group.variables.items() if k not in drop}
        return _build_dataset(group, prefetch)

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        if not isinstance(filename_or_obj, (str, os.PathLike)):
            return False
        return os.fspath(filename_or_obj).rstrip("/").endswith((".zarr", ".npy"))


def sources_of(obj: xr.Dataset | xr.DataArray) -> list[Any]:
    """The engine sources behind the variables of ``obj`` (unwrapping xarray's lazy layers)."""
    found = []
    variables = obj.variables.values() if isinstance(obj, xr.Dataset) else [obj.variable]
    for var in variables:
        data: Any = var._data
        for _ in range(16):
            if isinstance(data, StreamingArray):
                found.append(data.source)
                break
            inner = getattr(data, "array", None)
            if inner is None:
                break
            data = inner
    return found


class _Accessor:
    def __init__(self, obj: Any) -> None:
        self._obj = obj

    def stats(self) -> Any:
        """The engine's statistics (one engine serves the whole process)."""
        from .engine import snapshot

        return snapshot()

    @property
    def sources(self) -> list[Any]:
        return sources_of(self._obj)

    @property
    def levels(self) -> Any:
        """The multiscale pyramid this object is a level of (``tsexplore.pyramid.Levels``:
        OME-NGFF, ndpyramid/DataTree, or ``tse.pyramid``), or None."""
        from .pyramid import levels_of

        return levels_of(self._obj)

    def explore(self, **kwargs: Any) -> Any:
        """An Explorer widget on this object (needs the ``lab`` extra)."""
        from . import explore

        return explore(self._obj, **kwargs)


class _ReduceMethods:
    """``da.tse.mean("time")`` and friends: streaming reductions through the engine."""

    _obj: Any

    def reduce(self, op: str, dim: Any = None, **kwargs: Any) -> Any:
        from .compute import reduce as _reduce

        return _reduce(self._obj, op, dim=dim, **kwargs)

    def sum(self, dim: Any = None, **kwargs: Any) -> Any:
        return self.reduce("sum", dim, **kwargs)

    def mean(self, dim: Any = None, **kwargs: Any) -> Any:
        return self.reduce("mean", dim, **kwargs)

    def var(self, dim: Any = None, **kwargs: Any) -> Any:
        return self.reduce("var", dim, **kwargs)

    def std(self, dim: Any = None, **kwargs: Any) -> Any:
        return self.reduce("std", dim, **kwargs)

    def min(self, dim: Any = None, **kwargs: Any) -> Any:
        return self.reduce("min", dim, **kwargs)

    def max(self, dim: Any = None, **kwargs: Any) -> Any:
        return self.reduce("max", dim, **kwargs)

    def count(self, dim: Any = None, **kwargs: Any) -> Any:
        return self.reduce("count", dim, **kwargs)

    def histogram(self, bins: Any = 64, range: Any = None, dim: Any = None, **kwargs: Any) -> Any:  # noqa: A002
        return self.reduce("histogram", dim, bins=bins, range=range, **kwargs)

    def batches(self, sample: Any, **kwargs: Any) -> Any:
        from .loader import batches as _batches

        return _batches(self._obj, sample, **kwargs)


@xr.register_dataset_accessor("tse")
class DatasetAccessor(_Accessor):
    """``ds.tse``: statistics, sources and the Explorer."""


@xr.register_dataarray_accessor("tse")
class DataArrayAccessor(_Accessor, _ReduceMethods):
    """``da.tse``: statistics, sources, the Explorer and streaming reductions."""
