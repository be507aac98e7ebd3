"""xarray's own backend machinery over engine sources: a data store and a dask chunk manager.

:class:`EngineStore` is an ``AbstractDataStore`` whose ``load()`` returns the *stored*
(undecoded) variables -- engine-backed :class:`~tsexplore.engine.array.StreamingArray`\\ s for
data, in-memory arrays for what was read eagerly -- with the attributes and encoding xarray's
own backend gives them. xarray's ``StoreBackendEntrypoint`` then decodes them with
``conventions.decode_cf_variables`` and xarray's ``open_dataset`` protects, indexes and chunks
them, so every decoder option and every ``chunks=`` behaves as with xarray's own engines.

:class:`EngineDaskManager` is xarray's dask chunk manager with one change in ``from_array``:
a variable whose values are the raw stored ones becomes the engine's own dask array
(:meth:`StreamingArray.to_dask`: PLANNED reads, not kept in the cache, found again by
``tse.reduce``); a decoded one is chunked by dask over xarray's decoding layers, with the
engine reads inside its tasks made the way a dask graph reads (:class:`DecodedTaskArray`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import numpy as np
import xarray as xr
from xarray.backends.common import AbstractDataStore
from xarray.coding.strings import StackedBytesArray
from xarray.core import indexing
from xarray.namedarray.daskmanager import DaskManager

from .engine.array import DecodedTaskArray, StreamingArray, dask_name
from .sources import SourceGroup
from .sources.base import ChunkSource


def numpy_slice(key: slice, size: int) -> slice:
    """``key`` as the slice NumPy's ``range(*key.indices(size))`` means, in the form xarray's
    lazy indexing composes correctly: no negative start, a stop of ``None`` for "before 0",
    and ``slice(0, 0, 1)`` when it selects nothing.

    xarray's ``LazilyIndexedArray`` turns ``slice(-4, None, -1)`` on a length-3 axis into
    ``slice(-1, None, -1)`` and reads the whole axis reversed where NumPy selects nothing;
    some empty negative-step slices make it raise ``IndexError`` instead.
    """
    picked = range(*key.indices(size))
    if not picked:
        return slice(0, 0, 1)
    stop = picked.stop if picked.stop >= 0 else None
    return slice(picked.start, stop, picked.step)


def _numpy_key(key: Any, shape: tuple[int, ...]) -> Any:
    """Every slice of ``key`` as :func:`numpy_slice`; a key shorter than the array gets
    full slices for the trailing axes (xarray's character-array layer hands a vectorized
    key without its character axis to the array below, which then fails)."""
    parts = tuple(key.tuple) + (slice(None),) * (len(shape) - len(key.tuple))
    fixed = tuple(numpy_slice(k, n) if isinstance(k, slice) else k for k, n in zip(parts, shape))
    return type(key)(fixed)


class NumpyLazyArray(indexing.LazilyIndexedArray):
    """xarray's ``LazilyIndexedArray`` with NumPy's meaning for every slice (see
    :func:`numpy_slice`); everything else is xarray's own lazy indexing."""

    def _updated_key(self, new_key: Any) -> Any:
        return super()._updated_key(_numpy_key(new_key, self.shape))

    def _vindex_get(self, indexer: Any) -> Any:
        return super()._vindex_get(_numpy_key(indexer, self.shape))


class NumpyStackedBytesArray(StackedBytesArray):
    """xarray's character-array layer (``S1`` + a char dim read as strings), transposable:
    xarray's own has no ``transpose``, so a vectorized ``isel`` of a character array fails
    in xarray's lazy reader where NumPy's indexing of the loaded array works."""

    def transpose(self, order: Any) -> NumpyStackedBytesArray:
        return type(self)(self.array.transpose((*tuple(order), len(tuple(order)))))


def numpy_layers(variable: xr.Variable) -> xr.Variable:
    """Swap xarray's character-array layer of a decoded variable for
    :class:`NumpyStackedBytesArray` (in place; returns ``variable``)."""
    parent: Any = None
    data: Any = variable._data
    for _ in range(32):
        if type(data) is StackedBytesArray:
            fixed = NumpyStackedBytesArray(data.array)
            if parent is None:
                variable._data = fixed  # type: ignore[assignment]
            else:
                parent.array = fixed
            break
        inner = getattr(data, "array", None)
        if inner is None:
            break
        parent, data = data, inner
    return variable


def _eager_variable(entry: tuple[Any, ...]) -> xr.Variable:
    """``(dims, values, attrs[, encoding[, dtype]])`` as a lazily indexed stored variable,
    like xarray's backends hand over (so ``chunks=`` chunks it as xarray would)."""
    dims, values, attrs = entry[:3]
    encoding = dict(entry[3]) if len(entry) > 3 else {}
    values = np.asarray(values)
    if len(entry) > 4 and entry[4] is not None and np.dtype(entry[4]) != values.dtype:
        values = np.asarray(values, dtype=entry[4])
    data = NumpyLazyArray(indexing.NumpyIndexingAdapter(values))
    return xr.Variable(dims, data, dict(attrs), encoding)


class EngineStore(AbstractDataStore):
    """The variables of a :class:`~tsexplore.sources.SourceGroup` as xarray's backends
    store them (undecoded), for ``StoreBackendEntrypoint().open_dataset``."""

    def __init__(self, group: SourceGroup, drop_variables: str | Iterable[str] | None = None) -> None:
        self.group = group
        if isinstance(drop_variables, str):
            drop_variables = [drop_variables]
        self.drop = set(drop_variables or ())

    def get_variables(self) -> dict[str, xr.Variable]:
        out: dict[str, xr.Variable] = {}
        for name, entry in self.group.coords.items():
            if name not in self.drop:
                out[name] = _eager_variable(entry)
        for name, source in self.group.variables.items():
            if name not in self.drop:
                data = NumpyLazyArray(StreamingArray(source))
                encoding = dict(source.encoding)
                if self.group.multiscale is not None:  # ds.tse.levels finds the other levels
                    encoding["multiscales"] = self.group.multiscale.encoding(self.group.level)
                out[name] = xr.Variable(source.dims, data, dict(source.attrs), encoding)
        return out

    def get_attrs(self) -> dict[str, Any]:
        return dict(self.group.attrs)

    def get_encoding(self) -> dict[str, Any]:
        return dict(self.group.encoding)

    def close(self) -> None:
        for source in self.group.variables.values():
            source.close()


def _is_nan_mask(data: Any) -> bool:
    """xarray's mask layer that changes nothing: a float array whose only fill value is NaN,
    masked as NaN (every float variable ``to_zarr`` / ``to_netcdf`` write has one)."""
    try:
        from xarray.coding.common import _ElementwiseFunctionArray
        from xarray.coding.variables import _apply_mask
    except ImportError:  # pragma: no cover - xarray moved them: treat the layer as decoding
        return False
    func: Any = getattr(data, "func", None)
    if not isinstance(data, _ElementwiseFunctionArray) or getattr(func, "func", None) is not _apply_mask:
        return False
    fills = list(func.keywords.get("encoded_fill_values") or ())
    decoded = func.keywords.get("decoded_fill_value")
    inner = np.dtype(data.array.dtype)

    def nan(value: Any) -> bool:
        return isinstance(value, (float, np.floating)) and bool(np.isnan(value))

    return inner.kind == "f" and np.dtype(data.dtype) == inner and bool(fills) and all(map(nan, fills)) and nan(decoded)


def _unwrap(data: Any) -> tuple[StreamingArray | None, bool]:
    """The engine array under xarray's layers, and whether the values are its raw ones."""
    passthrough = (
        indexing.ImplicitToExplicitIndexingAdapter,
        indexing.CopyOnWriteArray,
        indexing.MemoryCachedArray,
    )
    raw = True
    for _ in range(32):
        if isinstance(data, StreamingArray):
            return data, raw
        if isinstance(data, indexing.LazilyIndexedArray):
            full = isinstance(data.key, indexing.BasicIndexer) and all(
                isinstance(k, slice) and k.indices(n) == (0, n, 1)
                for k, n in zip(data.key.tuple, data.array.shape)
            )
            raw = raw and full
        elif not isinstance(data, passthrough) and not _is_nan_mask(data):
            raw = False  # a decoding layer (mask, scale, characters, times...)
        data = getattr(data, "array", None)
        if data is None:
            return None, False
    return None, False


class EngineDaskManager(DaskManager):
    """xarray's dask chunk manager, with tasks that read through the tsexplore engine."""

    def from_array(self, data: Any, chunks: Any, **kwargs: Any) -> Any:
        found, raw = _unwrap(data)
        if found is None:
            return super().from_array(data, chunks, **kwargs)
        source: ChunkSource = found.source
        same = tuple(data.shape) == tuple(source.shape) and np.dtype(data.dtype) == source.dtype
        # xarray's name carries the decoder options: two opens that decode differently
        # must never share dask keys
        name = dask_name(source, kwargs.get("name"), chunks)
        if raw and same:
            return found.to_dask(chunks, name=name)
        import dask.array as da

        return da.from_array(
            DecodedTaskArray(data),
            chunks,
            name=name,
            lock=kwargs.get("lock", False) or False,
            inline_array=kwargs.get("inline_array", False),
            asarray=False,
            meta=np.empty((0,) * len(data.shape), dtype=data.dtype),
        )


@functools.cache
def engine_dask() -> EngineDaskManager:
    """The one :class:`EngineDaskManager` (made on first use: making it imports dask.array,
    seconds that opening a dataset without ``chunks=`` never needs)."""
    return EngineDaskManager()
