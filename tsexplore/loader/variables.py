"""Find the engine source behind each variable a loader reads, and read block regions of it.

An engine-backed DataArray (``tse.open_dataset``) is read straight from its source, also
when it was sliced with integers or step-1 slices (``da.isel(time=slice(0, 100))`` is the
stored array seen through an offset). Anything else (CF-decoded values, NumPy, dask, other
backends) is wrapped in an :class:`~tsexplore.sources.ArraySource` so that it goes through
the same cache and scheduler.
"""

from __future__ import annotations

import concurrent.futures as cf
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..engine.array import StreamingArray, assemble
from ..engine.planning import SelectionPlan, finish, plan_selection, take_piece
from ..engine import Engine, Priority, wait_all
from ..sources import ArraySource, ChunkSource

_PASS_THROUGH = ("MemoryCachedArray", "CopyOnWriteArray")


@dataclass
class LoaderVariable:
    """One variable a loader reads: its source and how its cells map onto the source's."""

    name: str
    source: ChunkSource
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    #: per source axis: an int (a fixed index, the axis is dropped) or the offset of a slice
    template: tuple[tuple[str, int], ...]
    #: positions of ``dims`` among the loader's (primary variable's) dims
    axes: tuple[int, ...] = ()
    #: an object read lazily in the consumer's thread (an xarray Variable over a lazy
    #: backend, or a dask array), when it cannot be read chunk by chunk by the engine
    lazy: Any = None

    @property
    def chunks(self) -> tuple[int, ...]:
        """Stored chunk length along each of ``dims``."""
        return tuple(self.source.chunks[i] for i, (kind, _) in enumerate(self.template) if kind == "slice")

    @property
    def origin(self) -> tuple[int, ...]:
        """Stored cell of this variable's cell 0 along each of ``dims``."""
        return tuple(off for kind, off in self.template if kind == "slice")

    def source_key(self, region: tuple[slice, ...]) -> tuple[Any, ...]:
        """The source selection for ``region`` (given in the loader's dims)."""
        mine = iter(region[a] for a in self.axes)
        key: list[Any] = []
        for kind, value in self.template:
            if kind == "int":
                key.append(value)
            else:
                sl = next(mine)
                key.append(slice(value + sl.start, value + sl.stop))
        return tuple(key)

    def advise(self, engine: Engine, region: tuple[slice, ...]) -> None:
        """Hint that the chunks of ``region`` will be read soon (see ``ChunkSource.advise``)."""
        if self.lazy is None:
            plan = plan_selection(self.source_key(region), self.source.shape, self.source.chunks)
            engine.advise(self.source, plan.chunk_indices())

    def request(
        self, engine: Engine, region: tuple[slice, ...], cache: bool = True
    ) -> PendingRegion | DeferredRegion:
        """Ask the engine for the chunks of ``region`` (PLANNED: the loader's known future).

        ``cache=False``: chunks read for this region are not kept in the cache (one pass).
        """
        if self.lazy is not None:
            return DeferredRegion(self.lazy, self.source_key(region), self.dtype)
        plan = plan_selection(self.source_key(region), self.source.shape, self.source.chunks)
        futures = engine.request(
            self.source, list(plan.chunk_indices()), Priority.PLANNED, cache=cache
        )
        hits = sum(f.done() for f in futures)  # cached chunks come back as finished futures
        return PendingRegion(plan, futures, self.dtype, hits)


@dataclass
class PendingRegion:
    """Chunk reads of one region in flight; :meth:`result` waits and returns the region."""

    plan: SelectionPlan
    futures: list[cf.Future]
    dtype: np.dtype
    hits: int

    def result(self, timeout: float | None = None) -> np.ndarray:
        if len(self.futures) == 1:  # the region lies in one chunk: a view, no copy
            chunk = wait_all(self.futures, timeout)[0]
            local = tuple(d.pieces[0][1] for d in self.plan.dims)
            return finish(take_piece(chunk, local), self.plan)
        return assemble(self.plan, self.futures, self.dtype, timeout)


@dataclass
class DeferredRegion:
    """A region of a lazy object, computed when asked for, in the caller's thread.

    Such objects may themselves read through the engine (CF-decoded or fancy-indexed
    engine variables, dask graphs over it); computing them on an engine thread could wait
    for that same thread pool.
    """

    obj: Any
    key: tuple[Any, ...]
    dtype: np.dtype
    futures: tuple[()] = ()
    hits: int = 0

    def result(self, timeout: float | None = None) -> np.ndarray:
        region = self.obj[self.key]
        region = getattr(region, "values", region)
        if hasattr(region, "compute"):
            region = region.compute()
        return np.asarray(region, dtype=self.dtype)


def _full(sl: slice, n: int) -> bool:
    return sl.indices(n)[2] == 1


def _direct(var: Any) -> tuple[ChunkSource, tuple[tuple[str, int], ...]] | None:
    """The source and template of an engine-backed variable, or None."""
    from xarray.core import indexing

    data: Any = var._data
    key: tuple[Any, ...] | None = None
    if hasattr(data, "dask"):  # open_dataset(chunks={}): dask tasks that read the engine
        from ..engine.array import dask_source

        found = dask_source(data)
        if found is None or tuple(found.shape) != tuple(var.shape):
            return None
        return found, tuple(("slice", 0) for _ in found.shape)
    for _ in range(16):
        if isinstance(data, StreamingArray):
            break
        if isinstance(data, indexing.LazilyIndexedArray):
            if key is not None or not isinstance(data.key, indexing.BasicIndexer):
                return None
            key = tuple(data.key.tuple)
            data = data.array
            continue
        if type(data).__name__ in _PASS_THROUGH:
            data = data.array
            continue
        return None
    else:
        return None
    source: ChunkSource = data.source
    if key is None:
        key = (slice(None),) * source.ndim
    template: list[tuple[str, int]] = []
    for k, n in zip(key, source.shape):
        if isinstance(k, (int, np.integer)):
            template.append(("int", int(k) + (n if k < 0 else 0)))
        elif isinstance(k, slice) and _full(k, n):
            template.append(("slice", k.indices(n)[0]))
        else:
            return None
    if np.dtype(source.dtype) != np.dtype(var.dtype):
        return None  # CF decoding changed the values
    return source, tuple(template)


def resolve_variable(name: str, var: Any) -> LoaderVariable:
    """A :class:`LoaderVariable` for an ``xarray.Variable`` (engine-backed or not)."""
    dims = tuple(str(d) for d in var.dims)
    shape = tuple(int(s) for s in var.shape)
    found = _direct(var)
    if found is not None:
        source, template = found
        if sum(kind == "slice" for kind, _ in template) == len(shape):
            return LoaderVariable(name, source, dims, shape, np.dtype(var.dtype), template)
    chunks = None
    preferred = var.encoding.get("preferred_chunks")
    if isinstance(preferred, dict) and set(preferred) == set(dims):
        chunks = tuple(int(preferred[d]) for d in dims)
    lazy = None
    if _is_lazy_backend(var):
        lazy = var
    elif hasattr(var.data, "dask"):
        lazy = var.data
    source = ArraySource(lazy if lazy is not None else var.data, dims, chunks, dict(var.attrs), name)
    template = tuple(("slice", 0) for _ in dims)
    return LoaderVariable(name, source, dims, shape, np.dtype(var.dtype), template, lazy=lazy)


def _is_lazy_backend(var: Any) -> bool:
    from xarray.core import indexing

    return isinstance(var._data, indexing.ExplicitlyIndexed) and not var._in_memory
