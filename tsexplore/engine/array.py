"""StreamingArray: the lazy array that xarray sees, assembled from engine chunks."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from xarray.backends.common import BackendArray
from xarray.core import indexing

from .. import config
from ..errors import TsExploreError
from ..sources.base import ChunkSource
from .planning import SelectionPlan, finish, plan_selection, take_piece
from .scheduler import Priority, get_engine, wait_all


class SelectionTooLargeError(TsExploreError, MemoryError):
    """A selection would not fit in memory."""


def read_selection(
    source: ChunkSource,
    key: tuple[Any, ...],
    priority: Priority = Priority.VISIBLE,
    *,
    channel: str | None = None,
    generation: int | None = None,
    timeout: float | None = None,
    observe: bool = True,
) -> np.ndarray:
    """Read an orthogonal selection of ``source`` through the engine (cache, prefetch, stats)."""
    plan = plan_selection(key, source.shape, source.chunks)
    nbytes = math.prod(plan.block_shape) * source.dtype.itemsize
    if nbytes > config.total_ram() // 2:
        raise SelectionTooLargeError(
            f"this selection of {source!r} would need {nbytes / 2**30:.1f} GiB in memory; "
            "select a smaller region, or use tse.reduce / open_dataset(chunks={}) to stream it"
        )
    engine = get_engine()
    engine._check_caller()
    indices = list(plan.chunk_indices())
    futures = engine.request(source, indices, priority, channel=channel, generation=generation)
    if observe and priority is Priority.VISIBLE:
        engine.prefetcher.observe(source, plan)
    return assemble(plan, futures, source.dtype, timeout)


def assemble(plan: SelectionPlan, futures: list, dtype: np.dtype, timeout: float | None) -> np.ndarray:
    """Copy each chunk's piece into the output as its read completes."""
    import itertools

    out = np.empty(plan.block_shape, dtype=dtype)
    if futures:
        combos = itertools.product(*(d.pieces for d in plan.dims))
        for pieces, fut in zip(combos, futures):
            chunk = wait_all([fut], timeout)[0]
            local = tuple(p[1] for p in pieces)
            target = tuple(p[2] for p in pieces)
            out[target] = take_piece(chunk, local)
    return finish(out, plan)


class StreamingArray(BackendArray):
    """An engine-backed lazy array; xarray indexes it orthogonally ("outer" indexing)."""

    def __init__(self, source: ChunkSource) -> None:
        self.source = source
        self.shape = tuple(source.shape)
        self.dtype = np.dtype(source.dtype)

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(
            key, self.shape, indexing.IndexingSupport.OUTER, self._raw_getitem
        )

    def _raw_getitem(self, key: tuple[Any, ...]) -> np.ndarray:
        return read_selection(self.source, tuple(key))

    def to_dask(self, chunks: Any = None, name: str | None = None):  # type: ignore[no-untyped-def]
        """A dask array whose tasks read through the engine (PLANNED priority)."""
        import dask.array as da

        native = self.source.chunks
        if chunks is None or chunks == {}:
            chunks = native
        elif isinstance(chunks, dict):
            chunks = tuple(chunks.get(d, c) or c for d, c in zip(self.source.dims, native))
        adapter = _DaskAdapter(self.source)
        return da.from_array(
            adapter,
            chunks=chunks,
            name=name or f"tsexplore-{self.source.token}-{hash(str(chunks)) & 0xFFFFFFFF:x}",
            lock=False,
            asarray=False,
            fancy=False,
            inline_array=True,
            meta=np.empty((0,) * len(self.shape), dtype=self.dtype),
        )

    def __repr__(self) -> str:
        return f"StreamingArray({self.source!r})"


class _DaskAdapter:
    """What dask's tasks call: basic slicing read through the engine, picklable."""

    def __init__(self, source: ChunkSource) -> None:
        self.source = source
        self.shape = tuple(source.shape)
        self.dtype = np.dtype(source.dtype)
        self.ndim = len(self.shape)

    def __getitem__(self, key: tuple[Any, ...]) -> np.ndarray:
        return read_selection(self.source, key, Priority.PLANNED, observe=False)

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (_DaskAdapter, (self.source,))
