"""The engine: the cache, the read table, the read pipeline, the I/O loop and the prefetcher.

Requests carry a :class:`Priority`. Reads of the same chunk are de-duplicated: a second
request for a chunk in flight *joins* the first read. A request may name a ``channel`` (a
view, a loader) and a ``generation``; when a channel moves to a newer generation (a request
with it, or :meth:`Engine.cancel`), queued reads that only older generations of that channel
wanted are cancelled before they start. Reads already running finish and fill the cache (a
thread cannot be interrupted safely).

Concurrency adapts to the measured latency of reads: blocking sources use the read threads
(``io_threads`` at once), asynchronous (network) sources keep more reads in flight when each
read takes longer, up to 128, and no more than about twice what the link carries (the
measured bandwidth-delay product, :mod:`.link`). The parts live in their own modules: :mod:`.loop`
(the event-loop bridge), :mod:`.reads` (the read table), :mod:`.pipeline` (the one read path:
fetch, check, record); :meth:`Engine.fetch` and :meth:`Engine.stream` wait for reads from an
ordinary thread (:func:`~.blocking.wait_all`, always with a timeout); the process-wide engine
(:func:`get_engine`) is at the end of this module.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures as cf
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from .. import config
from ..errors import EngineClosedError, RequestCancelledError
from ..sources import buffers, close_async_resources
from ..sources.base import ChunkIndex, ChunkSource, share
from .absent import AbsentChunks
from .activity import VisibleActivity
from .blocking import wait_all
from .cache import ChunkCache
from .hints import ReadAheadMemory
from .lookahead import look_ahead
from .loop import IOLoop, apply_switch_interval, on_read_thread
from .pipeline import ReadPipeline
from .prefetch import Prefetcher
from .reads import CATCH_UP_SECONDS, KINDS, Read, ReadTable, Tally
from .stats import Stats, StatsSnapshot
from .types import Part, Priority, ReadKey


class Engine:
    """Everything that moves chunks. One per process; see :func:`get_engine`."""

    def __init__(self, cache_bytes: int | None = None) -> None:
        """``cache_bytes``: this engine's own budget; by default it follows the process's
        ``tse.config`` ``cache_bytes`` (resized live when that changes)."""
        settings = config.get()
        apply_switch_interval()
        self.cache = ChunkCache(settings.cache_bytes if cache_bytes is None else cache_bytes)
        self._unwatch: Callable[[], None] = lambda: None
        self._room_before: Callable[[], int] | None = None
        if cache_bytes is None:  # the process's engine: the recycled buffers share its budget
            self.cache.outside = buffers.trim
            self._room_before = buffers.limit_by(self._pool_room)
            self._unwatch = config.watch(self._settings_changed)
            self._settings_changed(config.get())  # a change made while this one started
        self.stats = Stats()
        self._table = ReadTable()
        #: views busy making a frame; background streams pause for it (see .activity)
        self.activity = VisibleActivity(self._table.visible_active)
        self._table.on_visible_end = self.activity.notify
        #: chunks read as fill values because the store lacks them (the chunk map shows them)
        self.absent = AbsentChunks()
        self._ev_seen = 0
        self._closed = False
        self._io_threads = settings.io_threads
        self._io = IOLoop(self._io_threads)
        self._pipeline = ReadPipeline(
            self.stats, self.absent, self.cache, self._table, self._io.run_coroutine,
            following=lambda source: self.prefetcher.following(source), helper=self._io.submit,
        )
        #: read-ahead hints, what one-pass readers took, what became of the guesses
        self.hints = ReadAheadMemory(self._table, self.cache, self._io)
        self.prefetcher = Prefetcher(self)

    def _pool_room(self) -> int:
        """What the cache leaves of the budget: the most the recycled buffers may hold (read
        without the cache's lock: a finalizer asks it)."""
        return self.cache.budget - self.cache.bytes_now

    def _settings_changed(self, settings: config.Settings) -> None:
        if settings.cache_bytes != self.cache.budget:
            self.cache.resize(settings.cache_bytes)

    # -- the loop ----------------------------------------------------------------------------
    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._io.loop

    @property
    def closed(self) -> bool:
        return self._closed

    def run_coroutine(self, coro: Any, timeout: float | None = None) -> Any:
        """Run ``coro`` on the I/O loop and wait for it (with a timeout) from another thread."""
        self._check_open()
        return self._io.run_coroutine(coro, timeout)

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the engine's I/O thread (work the caller need not wait for)."""
        self._io.call_soon(fn, *args)

    def _check_open(self) -> None:
        if self._closed:
            raise EngineClosedError("the tsexplore engine is closed; call tse.open_dataset again")

    def check_blocking_allowed(self) -> None:
        """Raise unless a blocking read may run here: the engine is open, not its I/O thread."""
        self._check_open()
        self._io.check_blocking_allowed()

    # -- requests ----------------------------------------------------------------------------
    def key(self, source: ChunkSource, index: ChunkIndex) -> ReadKey:
        """The request (and cache key) of the whole chunk ``index`` of ``source``."""
        return ReadKey(source.token, tuple(int(i) for i in index))

    def request(
        self, source: ChunkSource, indices: Iterable[ChunkIndex], priority: Priority = Priority.VISIBLE,
        **options: Any,
    ) -> list[cf.Future]:
        """Ask for chunks; returns one future per index, resolved with the decoded chunk.

        Cached chunks come back as finished futures (a *hit*). ``options`` are those of
        :meth:`request_mixed` (``channel``, ``generation``, ``cache``, ``boxes``, ``skip_taken``).
        """
        return [
            item if isinstance(item, cf.Future) else _done(item)
            for item in self.request_mixed(source, indices, priority, **options)
        ]

    def request_mixed(
        self,
        source: ChunkSource,
        indices: Iterable[ChunkIndex],
        priority: Priority = Priority.VISIBLE,
        *,
        channel: str | None = None,
        generation: int | None = None,
        cache: bool = True,
        boxes: list[Part] | None = None,
        skip_taken: bool = False,
    ) -> list[np.ndarray | cf.Future]:
        """Ask for chunks: per index its cached array (a *hit*), or a future resolved with
        the decoded chunk (see :meth:`request`).

        With ``channel`` and ``generation``, a newer generation of the same channel cancels
        queued reads that only older generations wanted (their futures raise
        :class:`RequestCancelledError`). ``cache=False`` marks new reads as one-pass: the chunk goes to the caller but is not
        kept (unless another request wants it kept), so a scan does not fill the cache with
        chunks nobody reads again -- and reuses freed memory instead of faulting in new pages.
        ``skip_taken`` (SPECULATIVE guesses for a one-pass reader): chunks one-pass readers
        have asked for are not read again (their futures raise
        :class:`~tsexplore.errors.RequestCancelledError`).

        ``boxes`` (one per index, from :func:`~.parts.part_boxes`): a box asks for only that
        part of the chunk (its values come back box-shaped, or as the whole chunk when that is
        cached: see :func:`~.parts.is_part`). Parts a reader asks for are one-pass; parts the
        prefetcher asks for are kept until a reader takes them.
        """
        self._check_open()
        token = source.token
        keys = [ReadKey(token, tuple(index)) for index in indices]
        owner = None
        if channel is not None:
            owner, cancelled = self._table.owner(channel, generation)
            if cancelled:
                self._cancelled(cancelled)
        found = self.cache.get_many(keys)
        if boxes is not None:
            self._part_keys(keys, found, boxes)
        waiting = priority is not Priority.SPECULATIVE
        if waiting and not cache:  # before its cached chunks leave the cache (see _answer)
            self._table.note_taken(keys)
        tally = Tally()
        missing = [k for k, v in zip(keys, found) if v is None]
        reads: dict[ReadKey, Any] = {}
        if missing:
            whole = [k for k in missing if k.part is None]
            parts = [k for k in missing if k.part is not None]
            get, table = self.cache.get, self._table
            if whole:
                reads.update(table.admit(source, whole, priority, owner, cache, tally, get, skip_taken))
            if parts and waiting and not source.is_async:  # local parts: read now, here
                reads.update(self._read_now(source, parts))
                if priority is Priority.VISIBLE:
                    tally.misses += len(parts)
            elif parts:  # kept only when read ahead
                keep = not waiting
                reads.update(table.admit(source, parts, priority, owner, keep, tally, get, skip_taken))
            for i, key in enumerate(keys):  # cached after all: a read ended since the look-up
                value = reads.get(key)
                if found[i] is None and value is not None and not isinstance(value, (Read, cf.Future)):
                    found[i] = value
        out = self._answer(keys, found, reads, priority, cache, tally)
        self.stats.add(tally.items())
        if tally.new or tally.joined:
            self._io.call_soon(self._dispatch)
        return out

    def _read_now(self, source: ChunkSource, keys: list[ReadKey]) -> dict[ReadKey, cf.Future]:
        """Read parts of local chunks that a reader waits for, now: the calling thread and the
        idle read threads take groups of them in turn until none is left
        (:func:`~tsexplore.sources.base.share`); per key a done future.

        A part is a few blosc blocks: queueing it in the read table, dispatching it on the
        loop and handing it over to the reader cost about as much as decoding it (measured,
        every frame of the benchmark cube read by parts, warm page cache: 58 frames/s through
        the table, 100-108 read here; 0.9 ms of a read thread's CPU per part through the
        table against 0.5 here). The reader decodes while it would otherwise wait. Parts a
        reader asks for are not kept, and no local part is read ahead (a steady pattern's
        chunks are read whole: see :func:`~.parts.part_boxes`), so nothing is lost by reading
        them outside the table. The reader's own share is read without ``wait_timeout`` (as
        xarray's and zarr's backends read local files, and as :meth:`read_inline` does): only
        the groups the read threads take are waited for with it.
        """
        helpers = min(self._io_threads, os.cpu_count() or 1) - 1
        step = max(1, -(-len(keys) // (2 * (helpers + 1))))  # two groups per worker: balance
        groups = [keys[i : i + step] for i in range(0, len(keys), step)]
        done = share(groups, lambda group: self._pipeline.read_here(source, group),
                     config.get().wait_timeout, self._io.submit)
        futures: dict[ReadKey, cf.Future] = {}
        for group, values in zip(groups, done):
            for key, value in zip(group, values):
                future = futures[key] = cf.Future()
                if isinstance(value, BaseException):
                    future.set_exception(value)
                else:
                    future.set_result(value)
        return futures

    def _part_keys(self, keys: list[ReadKey], found: list[Any], boxes: list[Part]) -> None:
        """Where a part is asked for and its whole chunk is not cached, ask for the part
        (``keys`` and ``found`` are changed in place)."""
        at = [i for i, (v, b) in enumerate(zip(found, boxes)) if v is None and b is not None]
        if not at:
            return
        part_keys = [keys[i]._replace(part=boxes[i]) for i in at]
        for i, key, value in zip(at, part_keys, self.cache.get_many(part_keys)):
            keys[i] = key
            found[i] = value

    def _answer(
        self,
        keys: list[ReadKey],
        found: list[np.ndarray | None],
        reads: dict[ReadKey, Read],
        priority: Priority,
        cache: bool,
        tally: Tally,
    ) -> list[np.ndarray | cf.Future]:
        """Cached arrays and read futures in request order; hits and read-ahead used counted."""
        waiting = priority is not Priority.SPECULATIVE
        prefetched = self._table.prefetched
        out: list[np.ndarray | cf.Future] = []
        consumed = []
        for key, value in zip(keys, found):
            if value is None:
                read = reads.get(key)  # none: a guess of a chunk a one-pass reader took
                if isinstance(read, cf.Future):  # read now (see _read_now)
                    out.append(read)
                    continue
                out.append(read.future if read is not None else _done(
                    exc=RequestCancelledError(f"chunk {key.index} was taken by a one-pass reader")))
                continue
            out.append(value)
            if waiting:
                tally.hits += 1
                if prefetched and key in prefetched and self._table.take_prefetched(key):
                    tally.prefetch_used += 1
                    if not cache or key.part is not None:
                        consumed.append(key)
        if tally.prefetch_used:  # the reader is on the prefetch's heels: let it run at full speed
            self._table.catching_up_until = time.monotonic() + CATCH_UP_SECONDS
        if consumed:  # read ahead for a one-pass reader: it has it now, the cache lets it go
            self.cache.discard([k for k in consumed if not self.cache.is_pinned(k)])
        return out

    def count_useful(self, nbytes: int) -> None:
        """``nbytes`` were handed to a reader (the ``decoded_ratio``'s denominator)."""
        self.stats.count("bytes_useful", nbytes)

    def cancel(self, channel: str, generation: int | None = None) -> int:
        """Cancel queued reads that only generations of ``channel`` older than ``generation``
        want (default: every generation so far); returns how many were cancelled.

        Their futures raise :class:`~tsexplore.errors.RequestCancelledError`; PLANNED reads
        and reads already running are left to finish.
        """
        n = self._table.cancel(channel, generation)
        if n:
            self._cancelled(n)
        return n

    def _cancelled(self, n: int) -> None:
        """``n`` queued reads were cancelled: reads held behind VISIBLE ones may start now."""
        self.stats.count("cancelled", n)
        self.activity.notify()
        self._io.call_soon(self._dispatch)

    # -- dispatch (runs on the loop) ---------------------------------------------------------
    def concurrency(self, kind: str) -> int:
        """Reads of ``kind`` ("sync" or "async") allowed in flight at once."""
        if kind == "sync":
            return self._io_threads
        # enough to hide the latency, no more than the link carries (see engine/link.py),
        # and a read thread's worth more: a read decoding does not use the link
        return self._pipeline.link.concurrency(self._pipeline.latency["async"]) + self._io_threads

    def speculative_cap(self, kind: str) -> int:
        """Prefetch reads allowed at once: leave CPU for what the user waits on."""
        if time.monotonic() < self._table.catching_up_until:
            # the reader is catching up with the prefetch: read ahead at full speed
            return self.concurrency(kind)
        spare = max(1, (os.cpu_count() or 2) - 1)
        if kind == "async":
            # a remote read mostly waits on the network: half the link's reads may be
            # guesses (enough to stay ahead of a player at 100 ms), the rest stay free
            return max(2, spare, self.concurrency(kind) // 2)
        return min(self._io_threads, spare)

    def slab_latency(self, source: ChunkSource, nchunks: int) -> float:
        """Expected seconds to read ``nchunks`` chunks of ``source`` at today's concurrency."""
        kind = "async" if source.is_async else "sync"
        return self._pipeline.slab_latency(source, nchunks, self.concurrency(kind))

    def _dispatch(self) -> None:
        limit = {k: self.concurrency(k) for k in KINDS}
        spec = {k: self.speculative_cap(k) for k in KINDS}
        create_task = self._io.loop.create_task
        for batch in self._table.take_runnable(limit, spec, config.get().visible_first):
            if len(batch) > 1:  # inner chunks of one shard: one ranged read, checked one by one
                self.stats.count("batched", len(batch))
                pending = batch[0].source.read_chunks_counted([r.index for r in batch])
                create_task(self._run_reads(batch, pending))
            else:
                create_task(self._run_reads(batch))

    async def _run_reads(self, reads: list[Read], pending: list[Any] | None = None) -> None:
        """Run reads on the loop, one task for them all: one read, or a shard's batch, whose
        members' awaitables (``pending``) share one read of the shard (the first awaited
        starts it; the others are done when it ends). Each is settled as it ends, and the
        table dispatched once after (measured: a task and a dispatch per inner chunk kept
        the loop's thread as busy as the decoders on a scrub of 1x256x256 inner chunks)."""
        done = 0
        try:
            for read, awaitable in zip(reads, pending or [None] * len(reads)):
                value: Any
                try:
                    value = await self._pipeline.read(read.source, read.key, awaitable)
                except asyncio.CancelledError:
                    raise
                except BaseException as exc:  # noqa: BLE001 - every failure goes to the waiter
                    value = exc
                self._settle(read, value)
                done += 1
        except asyncio.CancelledError:
            for read in reads[done:]:
                self._settle(read, EngineClosedError("engine closed during the read"))
            self._dispatch()
            raise
        self._dispatch()

    def _settle(self, read: Read, value: Any) -> None:
        """The cache step: keep the value when the read is kept; hand it (or the exception)
        to the waiters. Stored bytes (None) went to the encoded tier."""
        if isinstance(value, BaseException):
            self._table.settle(read, exc=value)
            return
        if value is None or not (read.keep and self.cache.put(read.key, value)):
            self._table.prefetched.discard(read.key)
        self._table.settle(read, result=value)

    # -- nested reads ------------------------------------------------------------------------
    def read_inline(self, source: ChunkSource, index: ChunkIndex) -> np.ndarray:
        """Read one chunk in the calling thread (cache first), bypassing the scheduler.

        Used when a read thread itself needs engine data (an ArraySource over an engine-backed
        variable): queueing behind itself on the same pool could deadlock. The read takes the
        same pipeline as every other (see :mod:`.pipeline`).
        """
        key = self.key(source, index)
        value = self.cache.get(key)
        if value is not None:
            self.stats.count("hits")
            return value
        self.stats.count("misses")
        value = self._pipeline.read_here(source, [key])[0]
        if isinstance(value, BaseException):
            raise value
        self.cache.put(key, value)
        return value  # type: ignore[no-any-return]

    # -- blocking reads: from an ordinary thread, always with a timeout ----------------------
    def fetch(
        self,
        source: ChunkSource,
        indices: Sequence[ChunkIndex],
        priority: Priority = Priority.VISIBLE,
        *,
        timeout: float | None = None,
        channel: str | None = None,
        generation: int | None = None,
    ) -> list[np.ndarray]:
        """Request chunks and wait for all of them (raising the first error). On one of the
        engine's own read threads (a source that reads engine data) they are read inline."""
        self.check_blocking_allowed()
        if on_read_thread():
            return [self.read_inline(source, i) for i in indices]
        futures = self.request(source, indices, priority, channel=channel, generation=generation)
        chunks = wait_all(futures, timeout)
        self.count_useful(sum(getattr(c, "nbytes", 0) for c in chunks))
        return chunks

    def stream_ahead(self, source: ChunkSource) -> int:
        """Reads a stream keeps issued: enough to keep the I/O pipe full (remote: twice the
        engine's concurrency), without letting them exceed a quarter of the cache budget."""
        per = max(1, source.chunk_nbytes())
        limit = max(2, self.cache.budget // 4 // per)
        # remote: twice the reads in flight, so a slow head of the line leaves the link busy
        want = max(2 * self._io_threads, 2 * self.concurrency("async") if source.is_async else 0)
        return int(max(2, min(want, limit)))

    def stream(
        self,
        source: ChunkSource,
        order: Iterable[ChunkIndex],
        *,
        ahead: int | None = None,
        timeout: float | None = None,
        cache: bool = True,
        background: bool = True,
    ) -> Iterator[tuple[ChunkIndex, np.ndarray]]:
        """Yield ``(index, chunk)`` in ``order``, keeping up to ``ahead`` PLANNED reads in flight.

        ``ahead`` defaults to :meth:`stream_ahead`. This is how reductions and loaders
        announce their plan to the engine; the chunks after the reads in flight are hinted to
        the source. ``cache=False``: a one-pass scan; chunks read for it are not kept in the
        cache (chunks already cached are still used). Read inline on a read thread.
        ``background`` (default): visible work wins -- each chunk is handed over only once no
        view is busy (at most ``tse.config`` ``background_wait`` seconds later; see
        :mod:`.activity`), as the stream's reads start only when no VISIBLE read is queued or
        running.
        """
        self.check_blocking_allowed()
        indices = (tuple(int(i) for i in index) for index in order)
        if on_read_thread():
            for index in indices:
                yield index, self.read_inline(source, index)
            return

        def issue(index: ChunkIndex) -> cf.Future:
            return self.request(source, [index], Priority.PLANNED, cache=cache)[0]

        def wait(index: ChunkIndex, fut: cf.Future) -> np.ndarray:
            chunk = wait_all([fut], timeout)[0]
            self.count_useful(getattr(chunk, "nbytes", 0))
            if background:  # the consumer's work on it waits while a view is busy
                self.activity.wait_quiet()
            return chunk

        # reads still in flight when the consumer stops finish and fill the cache; their
        # futures are shared (another request may have joined them), so none is cancelled
        # a remote source's depth follows the engine's concurrency as it learns the link
        depth: Any = ahead or self.stream_ahead(source)
        if not ahead and source.is_async:
            depth = lambda: self.stream_ahead(source)  # noqa: E731
        many = None
        if source.coalesces:  # inner chunks of one shard: queue them together, to batch
            def many(batch: list[ChunkIndex]) -> list[cf.Future]:
                return self.request(source, batch, Priority.PLANNED, cache=cache)

        yield from look_ahead(
            indices, issue, wait, ahead=depth,
            hint=lambda batch: self.hints.advise(source, batch), issue_many=many,
        )

    # -- introspection -----------------------------------------------------------------------
    def queued(self) -> dict[str, int]:
        return self._table.queued()

    def in_flight_keys(self) -> set[ReadKey]:
        return self._table.in_flight_keys()

    def cached_indices(self, token: str) -> set[ChunkIndex]:
        """Chunks of source ``token`` the cache holds something of: the decoded chunk, a
        decoded part, its stored frame or its blosc head (reading it again reads less)."""
        keys = self.cache.keys() + self.cache.encoded_keys()
        return {k.index for k in keys if isinstance(k, ReadKey) and k.token == token}

    def snapshot(self) -> StatsSnapshot:
        cache = self.cache
        running = self._table.running
        concurrency = self._io_threads + (self.concurrency("async") if running["async"] else 0)
        evictions = cache.evictions
        self.stats.count("evictions", evictions - self._ev_seen)
        self._ev_seen = evictions
        return self.stats.snapshot(
            queued=self.queued(),
            in_flight=self._table.running_total(),
            concurrency=concurrency,
            cache_bytes=cache.bytes_now,
            cache_budget=cache.budget,
            cache_high_water=cache.high_water,
            cache_chunks=len(cache),
            cache_encoded_bytes=cache.encoded_bytes,
            cache_encoded_entries=cache.encoded_entries,
            pinned_bytes=cache.pinned_bytes,
        )

    # -- shutdown ----------------------------------------------------------------------------
    def close(self, timeout: float = 2.0) -> None:
        """Cancel pending work, stop the loop and the threads (within ``timeout`` seconds)."""
        if self._closed:
            return
        self._closed = True
        self._unwatch()
        if buffers.counted_by(self._pool_room):
            buffers.limit_by(self._room_before)
        for read in self._table.clear():
            try:  # a read thread may finish it between a done() check and this
                read.future.set_exception(EngineClosedError("the tsexplore engine was closed"))
            except cf.InvalidStateError:
                pass

        self._io.close(close_async_resources, timeout)
        self.cache.clear()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "running"
        return f"<Engine {state} {self.cache!r}>"


def _done(value: Any = None, exc: BaseException | None = None) -> cf.Future:
    """A finished future holding ``value`` (or raising ``exc``)."""
    fut: cf.Future = cf.Future()
    if exc is None:
        fut.set_result(value)
    else:
        fut.set_exception(exc)
    return fut


# -- the process-wide engine: started on first use, forgotten in a forked child, closed at exit


_engine: Engine | None = None
_engine_lock = threading.Lock()


def get_engine() -> Engine:
    """The process-wide engine, started on first use (and again after ``close()``/fork)."""
    global _engine
    engine = _engine
    if engine is not None and not engine._closed:  # the common case: no lock
        return engine
    with _engine_lock:
        if _engine is None or _engine.closed:
            _engine = Engine()
        return _engine


def current_engine() -> Engine | None:
    """The running engine of this process, or None (never starts one)."""
    engine = _engine
    if engine is None or engine.closed:
        return None
    return engine


def snapshot() -> StatsSnapshot:
    """Statistics of the running engine; zeros when none runs (does not start one)."""
    engine = current_engine()
    if engine is None:
        return StatsSnapshot(time=time.time(), cache_budget=config.get().cache_bytes,
                             queued={p.name.lower(): 0 for p in Priority})
    return engine.snapshot()


def close_engine() -> None:
    """Close the process-wide engine if one is running."""
    global _engine
    with _engine_lock:
        engine, _engine = _engine, None
    if engine is not None:
        engine.close()


def set_cache_bytes(nbytes: int) -> None:
    """Change the process-wide cache budget: ``tse.config.set(cache_bytes=nbytes)``."""
    config.set(cache_bytes=int(nbytes))


def _forget_after_fork() -> None:
    """In a forked child the parent's loop and read threads do not exist: start afresh.

    The inherited engine is dropped without closing it (closing would wait on threads that
    are not there); the child's first read starts its own.
    """
    global _engine, _engine_lock
    if _engine is not None:
        _engine._unwatch()
    _engine = None
    _engine_lock = threading.Lock()  # the parent may have held it while forking


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(close_engine)
