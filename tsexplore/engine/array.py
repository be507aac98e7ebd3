"""StreamingArray: the lazy array that xarray sees, assembled from engine chunks."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import contextvars
import functools
import itertools
import math
import sys
import time
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
from xarray.backends.common import BackendArray
from xarray.core import indexing

from .. import config
from ..errors import TsExploreError
from ..sources import buffers
from ..sources.base import ChunkSource
from .ahead import canon
from .blocking import wait_all
from .loop import on_read_thread
from .parts import is_part, plan_requests, shift
from .planning import SelectionPlan, finish, plan_selection, take_piece
from .scheduler import Engine, get_engine
from .types import WHOLE, ChunkRequest, Priority


class SelectionTooLargeError(TsExploreError, MemoryError):
    """A selection would not fit in memory."""


@functools.cache
def _half_ram() -> int:
    """The most bytes one selection may take: half the machine's memory (asked once)."""
    return config.total_ram() // 2


def read_selection(
    source: ChunkSource,
    key: tuple[Any, ...],
    priority: Priority = Priority.VISIBLE,
    *,
    channel: str | None = None,
    generation: int | None = None,
    timeout: float | None = None,
    observe: bool | None = None,
    copy: bool = True,
    cache: bool = True,
    engine: Engine | None = None,
) -> np.ndarray:
    """Read an orthogonal selection of ``source`` through the engine (cache, prefetch, stats).

    ``engine``: the engine to read through (default: the process-wide one).

    ``observe``: show the read to the prefetcher (default: VISIBLE reads only).
    ``copy=False``: a selection inside one chunk comes back as a read-only view of the
    cached chunk instead of a copy. ``cache=False``: a one-pass read; chunks read for it
    (or read ahead for it by the prefetcher) are not kept in the cache.

    A reader's views (observed, copied, kept) that move by a steady step with pauses between
    them get the next view made ahead of them (:mod:`.ahead`) on the engine's
    ``tsexplore-ahead`` thread, and handed over when asked for.
    """
    asked = time.monotonic()
    plan = plan_selection(key, source.shape, source.chunks)
    dtype = source.dtype
    nbytes = math.prod(plan.block_shape) * dtype.itemsize
    if nbytes > _half_ram():
        raise SelectionTooLargeError(
            f"this selection of {source!r} would need {nbytes / 2**30:.1f} GiB in memory; "
            "select a smaller region, or use tse.reduce / open_dataset(chunks={}) to stream it"
        )
    engine = get_engine() if engine is None else engine
    engine.check_blocking_allowed()
    timeout = engine.context.settings.wait_timeout if timeout is None else timeout
    if on_read_thread():  # a source reading engine data: no queueing behind ourselves
        return assemble(plan, [engine.read_inline(source, i) for i in plan.indices], dtype, timeout)
    observe = priority is Priority.VISIBLE if observe is None else observe
    # a reader's views, copied and kept: the next one may be made ahead (see .ahead)
    view = canon(key, source.shape) if observe and copy and cache and plan.basic else None
    made = engine.ahead.take(source.token, view, timeout) if view is not None else None
    if made is not None:
        out, seconds = made
        engine.prefetcher.observe_soon(source, plan, False, key)
    else:
        # thin regions of blosc chunks: only their blocks, unless this view goes on with a
        # scrub of local chunks (the views after it take the rest of each chunk: whole chunks,
        # as the prefetcher reads them; a remote store's next views are read ahead as parts)
        parts = engine.context.settings.partial_decode and not (
            view is not None and not source.is_async and engine.ahead.scrubs(source.token, view, source.chunks))
        # a view that is one whole chunk the reader's steady step passes: taken over (from
        # the cache, or from the read it waited for) instead of copied, when nothing else
        # holds it
        take = view is not None and plan.nchunks == 1 and engine.ahead.passes(source.token, view, source.chunks)
        # a part whose decode makes its whole blosc block asks for the block, kept for the
        # block's other rows, unless the reader moves one way by a steady step (they are
        # behind it, or made ahead of it) or reads once
        whole_blocks = cache and not (view is not None and engine.ahead.goes_on(source.token, view))
        out = _read(source, plan, key, priority, channel, generation, timeout, observe, copy, cache, parts, engine,
                    take=take, made=whole_blocks)
        seconds = time.monotonic() - asked
    engine.count_useful(math.prod(plan.out_shape) * dtype.itemsize)
    if view is not None:
        engine.ahead.answered(
            source.token, view, key, source.shape, nbytes, asked, seconds,
            functools.partial(_view_ahead, source, channel=channel, generation=generation,
                              timeout=timeout, engine=engine),
        )
    return out


def _read(
    source: ChunkSource,
    plan: SelectionPlan,
    key: tuple[Any, ...],
    priority: Priority,
    channel: str | None,
    generation: int | None,
    timeout: float,
    observe: bool,
    copy: bool,
    cache: bool,
    parts: bool,
    engine: Engine,
    guess: bool = False,
    take: bool = False,
    made: bool = False,
) -> np.ndarray:
    """Read ``plan`` through the engine (:func:`read_selection`'s read); ``observe``: show it
    to the prefetcher; ``parts``: thin regions of blosc chunks as their blocks; ``made``: a part
    whose decode makes whole blocks asks for them (:func:`.parts.plan_requests`). ``guess``: a
    view made ahead of its reader (:mod:`.ahead`), which reads no whole chunk of its own (one
    kept could evict a chunk the reader comes back to): lacking one cached or being read, it
    raises ``LookupError`` and the reader reads the view; the parts it needs it reads
    (one-pass: not kept). ``take``: a view of one whole chunk is the chunk itself, taken over
    from the cache or the read it waits for (:func:`_taken`), where it can be."""
    requests = plan_requests(plan, source, parts, made)
    if guess and not engine.holds([r for r in requests if r.part is WHOLE]):
        raise LookupError("the view's whole chunks are not all cached or being read")
    items = engine.submit(source, requests, priority, channel=channel, generation=generation, keep=cache)
    if observe and any(isinstance(item, cf.Future) for item in items):
        engine.prefetcher.observe(source, plan, not cache, key)  # plan ahead while this read waits
        observe = False
    if take and copy and len(items) == 1 and requests[0].part is WHOLE:
        if isinstance(items[0], cf.Future):  # the chunk, and the future let go of here
            items[0] = wait_all([items[0]], timeout)[0]
        out = _taken(engine, requests[0], items, plan)
        if out is not None:
            if observe:
                engine.prefetcher.observe_soon(source, plan, not cache, key)
            return out
    if not copy and len(items) == 1:
        item = items[0]
        chunk = wait_all([item], timeout)[0] if isinstance(item, cf.Future) else item
        local = plan.placements[0][1]
        if is_part(chunk, requests[0]):
            local = shift(local, requests[0].box)  # type: ignore[arg-type]
        out = finish(take_piece(chunk, local), plan)
    else:
        out = assemble(plan, items, source.dtype, timeout, requests)
    if observe:  # every chunk was cached: answer now, plan ahead on the engine's thread
        engine.prefetcher.observe_soon(source, plan, not cache, key)
    return out


def _taken(engine: Engine, request: ChunkRequest, items: list, plan: SelectionPlan) -> np.ndarray | None:
    """The view ``plan`` -- the whole cached chunk ``items[0]`` of ``request`` -- as the chunk
    itself, which the cache gives up to the reader (whose steady step passes it: the
    prefetcher would let it go next): no copy. Only when nothing else holds the chunk
    (another reader copying a piece of it, a dask task's read-only view, a read's future),
    as its references say once the cache and ``items`` let it go; else None, and
    ``items[0]`` is the chunk again for the caller to copy (out of the cache: the reader
    passes it). A chunk a read delivered is taken over the same way: its read let go of
    the future, and once the reader lets go too nothing holds it unless someone else waits
    on that read. The reader may write to what it gets, as to any copy."""
    chunk = items[0]
    if (not isinstance(chunk, np.ndarray) or chunk.shape != plan.block_shape or not plan.basic
            or plan.reordered):
        return None
    for sel, n in zip(plan.placements[0][1], chunk.shape):
        if not isinstance(sel, slice) or (sel.start, sel.stop, sel.step or 1) != (0, n, 1):
            return None
    if not engine.cache.give_up(request, chunk):
        return None
    items[0] = None
    # NumPy points every view of ``chunk`` at the array that holds its memory (its base, for
    # a chunk viewing a recycled buffer; else ``chunk`` itself): references left are
    # ``chunk`` here and getrefcount's argument, and for its base ``chunk``'s and ``owner``
    # here too; any more is another holder (a view of it)
    owner = chunk.base if isinstance(chunk.base, np.ndarray) else None
    if (sys.getrefcount(chunk) > 2 or (owner is not None and (
            isinstance(owner.base, np.ndarray) or sys.getrefcount(owner) > 3))):
        items[0] = chunk
        return None
    try:
        chunk.flags.writeable = True
    except ValueError:  # its memory is read-only (a decoder's bytes object): a copy is the reader's
        items[0] = chunk
        return None
    engine.stats.count("taken_over")
    return finish(chunk, plan)


def _view_ahead(
    source: ChunkSource, key: tuple[Any, ...], channel: str | None, generation: int | None,
    timeout: float, engine: Engine,
) -> np.ndarray:
    """The view ``key`` made ahead of its reader: a guess read at PLANNED priority, copied,
    kept, not shown to the prefetcher (the reader's taking it is)."""
    plan = plan_selection(key, source.shape, source.chunks)
    return _read(source, plan, key, Priority.PLANNED, channel, generation, timeout, observe=False, copy=True,
                 cache=True, parts=engine.context.settings.partial_decode, engine=engine, guess=True)


def assemble(
    plan: SelectionPlan,
    items: list,
    dtype: np.dtype,
    timeout: float,
    requests: list[ChunkRequest] | None = None,
) -> np.ndarray:
    """Copy each chunk's piece into the output (cached arrays first, then reads as they end).

    ``requests``: what was asked for each chunk (a part's item holds the box's values, or
    the whole chunk)."""
    out = output_buffer(plan.block_shape, dtype)
    if not items:
        return finish(out, plan)
    basic = plan.basic
    asked = requests or itertools.repeat(None)
    pending = []
    for (target, local), item, request in zip(plan.placements, items, asked):
        if isinstance(item, cf.Future):
            pending.append((target, local, item, request))
            continue
        _place(out, item, target, local, basic, request)
    for target, local, fut, request in pending:
        _place(out, wait_all([fut], timeout)[0], target, local, basic, request)
    return finish(out, plan)


def output_buffer(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised array for a selection, from the recycled buffers (see
    :mod:`~tsexplore.sources.buffers`): a frame the reader dropped gives its pages to the next,
    so assembling one does not first-touch fresh memory. It is skewed against the page
    boundaries the chunks it is copied from start at (:data:`~tsexplore.sources.buffers.SKEW`)."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if dtype.hasobject or nbytes < buffers.MIN_POOLED:  # small: the pool would not recycle it
        return np.empty(shape, dtype=dtype)
    return buffers.empty(nbytes, skew=True).view(dtype).reshape(shape)


def _place(
    out: np.ndarray, chunk: np.ndarray, target: tuple, local: tuple, basic: bool,
    request: ChunkRequest | None,
) -> None:
    if request is not None and is_part(chunk, request):
        local = shift(local, request.box)  # type: ignore[arg-type]
    out[target] = chunk[local] if basic else take_piece(chunk, local)


#: set while a dask task of ``open_dataset(chunks=...)`` reads a decoded variable: the
#: engine reads under it are PLANNED, one-pass (not kept) and shown to the prefetcher
_task_reads: contextvars.ContextVar[bool] = contextvars.ContextVar("tsexplore_task_reads", default=False)


@contextlib.contextmanager
def task_reads() -> Iterator[None]:
    """Engine reads made inside are those of a dask task (see :class:`DecodedTaskArray`)."""
    token = _task_reads.set(True)
    try:
        yield
    finally:
        _task_reads.reset(token)


def _empty_slices_forward(key: indexing.ExplicitIndexer, shape: tuple[int, ...]) -> Any:
    """Rewrite slices that select nothing as ``slice(0, 0)``.

    xarray's ``decompose_indexer`` raises IndexError on an empty negative-step slice (e.g.
    ``slice(None, 0, -1)`` on a length-1 axis), for every backend.
    """
    parts = key.tuple
    empty = [
        isinstance(k, slice) and (k.step or 1) < 0 and len(range(*k.indices(n))) == 0
        for k, n in zip(parts, shape)
    ]
    if not any(empty):
        return key
    return type(key)(tuple(slice(0, 0, 1) if e else k for k, e in zip(parts, empty)))


class StreamingArray(BackendArray):
    """An engine-backed lazy array; xarray indexes it orthogonally ("outer" indexing).

    Its ``dtype`` is the one xarray's own backend reports for the stored variable
    (``source.store_dtype``, e.g. big-endian), so xarray's coders treat it exactly as they
    treat xarray's own backend arrays; the values come out as ``source.dtype``.
    """

    def __init__(self, source: ChunkSource) -> None:
        self.source = source
        self.shape = tuple(source.shape)
        self.dtype = source.store_dtype

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        key = _empty_slices_forward(key, self.shape)
        return indexing.explicit_indexing_adapter(
            key, self.shape, indexing.IndexingSupport.OUTER, self._raw_getitem
        )

    def _raw_getitem(self, key: tuple[Any, ...]) -> np.ndarray:
        if _task_reads.get():
            return read_selection(self.source, tuple(key), Priority.PLANNED, observe=True, cache=False)
        return read_selection(self.source, tuple(key))

    def to_dask(self, chunks: Any = None, name: str | None = None):  # type: ignore[no-untyped-def]
        """A dask array whose tasks read through the engine (PLANNED priority).

        ``chunks``: None or ``{}`` (the native grid), a dict of lengths by dim name, or any
        chunk spec :func:`dask.array.from_array` takes (a tuple per axis).
        """
        import dask.array as da

        native = self.source.chunks
        if chunks is None or chunks == {}:
            chunks = native
        elif isinstance(chunks, dict):
            chunks = tuple(chunks.get(d, c) or c for d, c in zip(self.source.dims, native))
        adapter = _DaskAdapter(self.source)
        if name is None:
            name = dask_name(self.source, chunks)
        _dask_sources[name] = self.source
        return da.from_array(
            adapter,
            chunks=chunks,
            name=name,
            lock=False,
            asarray=False,
            fancy=False,
            inline_array=True,
            meta=np.empty((0,) * len(self.shape), dtype=self.source.dtype),
        )

    def __repr__(self) -> str:
        return f"StreamingArray({self.source!r})"


def dask_name(source: ChunkSource, *extra: Any) -> str:
    """A dask name for an array read from ``source``: deterministic across processes,
    and ``key_split()`` shows ``tsexplore-<variable>``."""
    from dask.base import tokenize

    label = "".join(c if c.isalnum() else "_" for c in str(getattr(source, "name", "data")))
    return f"tsexplore-{label}-{tokenize(source.token, *extra)}"


class DecodedTaskArray:
    """What dask tasks index for a decoded engine variable (``_FillValue`` masked, scaled,
    characters joined...): xarray's own lazy decoding layers over the engine's array, read
    as a dask graph reads (PLANNED, one pass, shown to the prefetcher)."""

    def __init__(self, array: Any) -> None:
        self.array = array
        self.shape = tuple(array.shape)
        self.dtype = np.dtype(array.dtype)
        self.ndim = len(self.shape)

    def __getitem__(self, key: Any) -> np.ndarray:
        with task_reads():
            return np.asarray(self.array[key])


#: dask array name -> the source its tasks read (how tse.reduce finds the source again)
_dask_sources: weakref.WeakValueDictionary[str, ChunkSource] = weakref.WeakValueDictionary()


def dask_source(array: Any) -> ChunkSource | None:
    """The source behind a dask array made by :meth:`StreamingArray.to_dask` (else None).

    Only the untouched array qualifies: any dask operation on it gives a new name.
    """
    return _dask_sources.get(getattr(array, "name", None) or "")


class _DaskAdapter:
    """What dask's tasks call: basic slicing read through the engine, picklable."""

    def __init__(self, source: ChunkSource) -> None:
        self.source = source
        self.shape = tuple(source.shape)
        self.dtype = np.dtype(source.dtype)
        self.ndim = len(self.shape)

    def __getitem__(self, key: tuple[Any, ...]) -> np.ndarray:
        # tasks see read-only views of chunks (no copy); their order teaches the prefetcher
        # which chunks the next tasks will want; a dask graph reads each chunk once, so what
        # it reads is not kept (chunks already cached are used)
        return read_selection(
            self.source, key, Priority.PLANNED, observe=True, copy=False, cache=False
        )

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (_DaskAdapter, (self.source,))
