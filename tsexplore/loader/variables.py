"""Find the engine source behind each variable a loader reads, and read block regions of it.

An engine-backed DataArray (``tse.open_dataset``) is read straight from its source through
the one resolver (:func:`tsexplore.resolve.resolve`), whatever ``isel``/``sel`` selection it
carries: a region of the loader's cells is composed with that selection into a key on the
source. Anything else (CF-decoded values, NumPy, dask, other backends) is wrapped in an
:class:`~tsexplore.sources.ArraySource` so that it goes through the same cache and scheduler.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from xarray.core import indexing

from .. import config
from ..engine import Engine, Priority, wait_all
from ..engine.array import assemble
from ..engine.planning import SelectionPlan, finish, plan_selection, take_piece
from ..resolve import Resolved, fallback_source, try_resolve
from ..sources import ChunkSource


@dataclass
class LoaderVariable:
    """One variable a loader reads: the selection of a source that holds its cells."""

    name: str
    resolved: Resolved
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    #: positions of ``dims`` among the loader's (primary variable's) dims
    axes: tuple[int, ...] = ()
    #: an object read lazily in the consumer's thread (an xarray Variable over a lazy
    #: backend, or a dask array), when it cannot be read chunk by chunk by the engine
    lazy: Any = None

    @property
    def source(self) -> ChunkSource:
        return self.resolved.source

    @property
    def chunks(self) -> tuple[int, ...]:
        """Stored chunk length along each of ``dims`` (as seen through the selection)."""
        return self.resolved.grid()[0]

    @property
    def origin(self) -> tuple[int, ...]:
        """Where this variable's cell 0 sits in the stored chunk grid along each of ``dims``."""
        return self.resolved.grid()[1]

    def source_key(self, region: tuple[slice, ...]) -> tuple[Any, ...]:
        """The source selection for ``region`` (given in the loader's dims)."""
        return self.resolved.key(tuple(region[a] for a in self.axes))

    def advise(self, engine: Engine, region: tuple[slice, ...]) -> None:
        """Hint that the chunks of ``region`` will be read soon (see ``ChunkSource.advise``)."""
        if self.lazy is None:
            plan = plan_selection(self.source_key(region), self.source.shape, self.source.chunks)
            engine.hints.advise(self.source, plan.chunk_indices())

    def request(
        self, engine: Engine, region: tuple[slice, ...], cache: bool = True
    ) -> PendingRegion | DeferredRegion:
        """Ask the engine for the chunks of ``region`` (PLANNED: the loader's known future).

        ``cache=False``: chunks read for this region are not kept in the cache (one pass).
        """
        if self.lazy is not None:
            return DeferredRegion(self.lazy, self.source_key(region), self.dtype)
        plan = plan_selection(self.source_key(region), self.source.shape, self.source.chunks)
        items = engine.submit(
            self.source, [engine.key(self.source, i) for i in plan.indices], Priority.PLANNED, keep=cache
        )
        engine.count_useful(math.prod(plan.block_shape) * self.dtype.itemsize)
        hits = sum(not isinstance(i, cf.Future) for i in items)  # cached: arrays, no wait
        return PendingRegion(plan, items, self.dtype, hits)


@dataclass
class PendingRegion:
    """Chunk reads of one region in flight; :meth:`result` waits and returns the region.

    ``futures`` holds one item per chunk: the cached chunk itself, or the future of its read.
    """

    plan: SelectionPlan
    futures: list[np.ndarray | cf.Future]
    dtype: np.dtype
    hits: int

    def result(self, timeout: float | None = None) -> np.ndarray:
        timeout = config.get().wait_timeout if timeout is None else timeout
        if len(self.futures) == 1:  # the region lies in one chunk: a view, no copy
            item = self.futures[0]
            chunk = wait_all([item], timeout)[0] if isinstance(item, cf.Future) else item
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


def resolve_variable(name: str, var: Any) -> LoaderVariable:
    """A :class:`LoaderVariable` for an ``xarray.Variable`` (engine-backed or not)."""
    dims = tuple(str(d) for d in var.dims)
    shape = tuple(int(s) for s in var.shape)
    found = try_resolve(var)
    if found is not None:
        return LoaderVariable(name, found, dims, shape, np.dtype(var.dtype))
    source = fallback_source(var, name)
    # lazy data (another backend, CF-decoded or transposed engine data, dask graphs) is
    # computed in the consumer's thread, never on the engine's read threads it may wait on
    data = var._data
    lazy = None
    if hasattr(data, "dask"):
        lazy = data
    elif isinstance(data, indexing.ExplicitlyIndexed) and not var._in_memory:
        lazy = var
    return LoaderVariable(name, Resolved.whole(source), dims, shape, np.dtype(var.dtype), lazy=lazy)
