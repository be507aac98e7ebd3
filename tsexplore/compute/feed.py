"""Where a reduction's chunks come from: the engine source behind a DataArray, or a wrapper.

The DataArray goes through the one resolver (:func:`tsexplore.resolve.resolve`):

- The whole of an engine source (``tse.open_dataset`` without slicing or value-changing
  decoding, or the dask array of ``open_dataset(chunks={})``) streams that source's native
  chunks through the engine: ``Feed(source, through_engine=True)``.
- A selection of an engine source (``isel``/``sel``) is a
  :class:`~tsexplore.resolve.SelectionSource`, read on the reduction's own
  ``tsexplore-reduce-read`` threads (``through_engine=False``): each of those reads waits for
  engine reads of the underlying source, and doing that on the engine's own read threads
  could starve them.
- Anything else is wrapped in an :class:`~tsexplore.sources.ArraySource`; data that is not
  engine-backed (NumPy, plain dask, other backends) streams through the engine, engine-backed
  data (decoded, transposed, dask graphs over it) on our own threads as above.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import xarray as xr

from .. import config
from ..engine import get_engine
from ..engine.lookahead import look_ahead
from ..engine.planning import plan_selection
from ..resolve import SelectionSource, engine_backed, fallback_source, try_resolve
from ..sources.base import ChunkIndex, ChunkSource


@dataclass
class Feed:
    """A source and how to read it (through the engine's pool, or on our own threads)."""

    source: ChunkSource
    through_engine: bool = True
    #: the source is a wrapper made for this reduction (a selection or an ArraySource)
    wrapped: bool = False

    @property
    def direct(self) -> bool:
        """Whether the reduction streams the engine source behind the DataArray itself."""
        return self.through_engine and not self.wrapped


def feed_for(da: xr.DataArray) -> Feed:
    """The :class:`Feed` that reads ``da``'s values chunk by chunk."""
    found = try_resolve(da)
    if found is not None:
        if found.is_whole:
            return Feed(found.source, True)
        return Feed(SelectionSource(found), through_engine=False, wrapped=True)
    wrapper = fallback_source(da, str(da.name or "data"))
    return Feed(wrapper, through_engine=not engine_backed(da), wrapped=True)


def read_locally(
    source: ChunkSource, order: Iterable[ChunkIndex], *, threads: int = 2, ahead: int = 4
) -> Iterator[tuple[ChunkIndex, np.ndarray]]:
    """Yield ``(index, chunk)`` in ``order``, reading ``ahead`` chunks on our own threads;
    each chunk waits while a view is busy (``Engine.activity``), as an engine stream's do."""
    read = getattr(source, "read_chunk_sync", None)
    if read is None:  # pragma: no cover - every wrapper we build is synchronous
        raise TypeError(f"{source!r} cannot be read synchronously")
    pool = cf.ThreadPoolExecutor(threads, thread_name_prefix="tsexplore-reduce-read")
    timeout = config.get().wait_timeout
    engine = get_engine()
    activity = engine.activity
    # a selection of an engine source: the prefetcher's guesses stay within its chunks
    resolved = getattr(source, "resolved", None)
    bounds = contextlib.nullcontext() if resolved is None else engine.prefetcher.bounded(
        resolved.source, plan_selection(resolved.source_key(), resolved.source.shape,
                                        resolved.source.chunks).chunk_ranges())

    def wait(index: ChunkIndex, fut: cf.Future) -> np.ndarray:
        chunk = fut.result(timeout=timeout)[0]
        activity.wait_quiet()  # visible work wins, as in Engine.stream
        return chunk  # type: ignore[no-any-return]

    try:
        with bounds:
            yield from look_ahead(
                (tuple(index) for index in order),
                lambda index: pool.submit(read, index),
                wait,
                ahead=ahead,
                abandon=lambda fut: fut.cancel(),
            )
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
