"""Where a reduction's chunks come from: the engine source behind a DataArray, or a wrapper.

- A DataArray that wraps a whole engine source (``tse.open_dataset`` without slicing or
  value-changing decoding, or the dask array of ``open_dataset(chunks={})``) streams that
  source's native chunks: ``Feed(source, through_engine=True)``.
- Data that is not engine-backed (NumPy, plain dask, other backends) is wrapped in an
  :class:`~tsexplore.sources.ArraySource`, which also streams through the engine.
- Engine-backed data that was sliced or decoded is wrapped too, but its chunks are read on
  the reduction's own ``tsexplore-reduce-read`` threads (``through_engine=False``): each of
  those reads waits for engine reads of the underlying source, and doing that on the engine's
  own read threads could starve them.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr
from xarray.core import indexing

from .. import config
from ..engine.array import StreamingArray, dask_source
from ..sources.base import ChunkIndex, ChunkSource
from ..sources.memory import ArraySource


@dataclass
class Feed:
    """A source and how to read it (through the engine's pool, or on our own threads)."""

    source: ChunkSource
    through_engine: bool = True

    @property
    def direct(self) -> bool:
        return self.through_engine and not isinstance(self.source, ArraySource)


def _full_key(key: Any, shape: tuple[int, ...]) -> bool:
    if not isinstance(key, indexing.BasicIndexer):
        return False
    for k, n in zip(key.tuple, shape):
        if not isinstance(k, slice) or k.indices(n) != (0, n, 1):
            return False
    return True


def _direct_source(var: xr.Variable) -> ChunkSource | None:
    """The source when ``var`` shows exactly that source's values, else None."""
    data: Any = var._data
    passthrough = (indexing.CopyOnWriteArray, indexing.MemoryCachedArray)
    for _ in range(16):
        if isinstance(data, StreamingArray):
            src = data.source
            if tuple(src.shape) == tuple(var.shape) and np.dtype(src.dtype) == var.dtype:
                return src
            return None
        if isinstance(data, indexing.LazilyIndexedArray):
            if not _full_key(data.key, data.array.shape):
                return None
            data = data.array
            continue
        if isinstance(data, passthrough):
            data = data.array
            continue
        if _is_dask(data):
            found = dask_source(data)
            if found is not None and tuple(found.shape) == tuple(var.shape):
                return found
        return None
    return None


def _is_dask(data: Any) -> bool:
    return hasattr(data, "dask") and hasattr(data, "chunks") and hasattr(data, "name")


def _engine_backed(da: xr.DataArray) -> bool:
    from ..xarray import sources_of

    if sources_of(da):
        return True
    data: Any = da.variable._data
    if _is_dask(data):
        return any(str(name).startswith("tsexplore-") for name in data.dask.layers)
    return False


def feed_for(da: xr.DataArray) -> Feed:
    """The :class:`Feed` that reads ``da``'s values chunk by chunk."""
    src = _direct_source(da.variable)
    if src is not None:
        return Feed(src, True)
    dims = tuple(str(d) for d in da.dims)
    preferred = da.encoding.get("preferred_chunks") or {}
    chunks: Any = None
    if preferred and all(d in preferred for d in dims):
        chunks = tuple(min(int(preferred[d]), max(1, n)) for d, n in zip(dims, da.shape))
    data: Any = da.variable._data
    array: Any = data
    if _engine_backed(da):
        # read through xarray's lazy layers (each read waits on engine reads)
        if not _is_dask(data):
            array = da.variable
        return Feed(ArraySource(array, dims, chunks, name=str(da.name or "data")), False)
    if not _is_dask(data) and not isinstance(data, np.ndarray):
        array = da.variable  # another lazy backend: let xarray index it
    return Feed(ArraySource(array, dims, chunks, name=str(da.name or "data")), True)


def read_locally(
    source: ChunkSource, order: Iterable[ChunkIndex], *, threads: int = 2, ahead: int = 4
) -> Iterator[tuple[ChunkIndex, np.ndarray]]:
    """Yield ``(index, chunk)`` in ``order``, reading ``ahead`` chunks on our own threads."""
    read = getattr(source, "read_chunk_sync", None)
    if read is None:  # pragma: no cover - every wrapper we build is synchronous
        raise TypeError(f"{source!r} cannot be read synchronously")
    pool = cf.ThreadPoolExecutor(threads, thread_name_prefix="tsexplore-reduce-read")
    pending: list[tuple[ChunkIndex, cf.Future]] = []
    it = iter(order)
    try:
        for index in itertools.islice(it, ahead):
            pending.append((tuple(index), pool.submit(read, tuple(index))))
        while pending:
            index, fut = pending.pop(0)
            nxt = next(it, None)
            if nxt is not None:
                pending.append((tuple(nxt), pool.submit(read, tuple(nxt))))
            yield index, fut.result(timeout=config.get().wait_timeout)[0]
    finally:
        for _, fut in pending:
            fut.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
