"""The engine: the cache, the read table, the pipeline's drivers, the I/O loop, the prefetcher.

Every read is a :class:`~.types.ChunkRequest` admitted to the read table (:mod:`.reads`) with
a :class:`Priority`: de-duplicated (a second request for a read in flight *joins* it),
cancellable while queued by a newer generation of its channel (a view, a loader), counted,
and -- when it ends -- kept in the cache unless every request for it was one-pass. Reads run
through one pipeline (:mod:`.execute`). The table dispatches them from whichever thread
admitted or ended a read, each lane with its own concurrency
(:mod:`~tsexplore.sources.link`): a blocking source's batch goes straight to a read thread,
which drives it, settles it and goes on with the next one that may start (no hop through
the I/O loop per chunk); a remote store's batch is a task on the I/O loop. Parts of local
chunks a reader waits for are driven by the reader's own thread (it claims them from the
table and decodes them with the read threads free meanwhile); nested reads run on a read
thread.

:meth:`Engine.fetch` and :meth:`Engine.stream` wait for reads from an ordinary thread
(:func:`~.blocking.wait_all`, always with a timeout); the process-wide engine
(:func:`get_engine`) is at the end of this module.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures as cf
import os
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from .. import config
from ..errors import EngineClosedError, RequestCancelledError
from ..sources import buffers, close_async_resources
from ..sources.base import ChunkSource
from .absent import AbsentChunks
from .activity import VisibleActivity
from .ahead import ViewsAhead
from .blocking import wait_all
from .cache import ChunkCache
from .context import EngineContext
from .execute import Job, Services, execute, run_here, run_on_loop
from .hints import ReadAheadMemory
from .lookahead import look_ahead
from .loop import IOLoop, on_read_thread
from .prefetch import Prefetcher
from .reads import CATCH_UP_LEAD, Admitted, Read, ReadTable, Tally
from .stats import Stats, StatsSnapshot
from .types import WHOLE, AuxKey, ChunkIndex, ChunkRequest, Priority

#: the recycled buffers may hold at most this share of the budget, and this much at most;
#: a full cache of recycled chunks leaves them POOL_LEAST of it (this share of a smaller budget)
POOL_SHARE, POOL_MOST, POOL_LEAST = 8, 512 << 20, 64 << 20


def pool_reserve(budget: int, nbytes: int) -> int:
    """Bytes of a full cache's budget left to the recycled buffers as it makes room for an
    entry of ``nbytes``: what it evicts and the frames readers drop are held there for the
    next decode instead of unmapped. Nothing for entries too small to be recycled (a cache
    of small chunks keeps its whole budget)."""
    return 0 if nbytes < buffers.MIN_POOLED else min(POOL_LEAST, budget // POOL_SHARE)


class Engine:
    """Everything that moves chunks. One per process; see :func:`get_engine`."""

    def __init__(self, cache_bytes: int | None = None) -> None:
        """``cache_bytes``: this engine's own budget; by default it follows the process's
        ``tse.config`` ``cache_bytes`` (resized live when that changes)."""
        settings = config.get()
        self.stats = Stats()
        self.context = EngineContext(settings, self.stats.count, self._nested)
        self._own_budget = cache_bytes is not None
        self.cache = ChunkCache(settings.cache_bytes if cache_bytes is None else cache_bytes)
        self._room_before: Callable[[], int] | None = None
        if cache_bytes is None:  # the process's engine: the recycled buffers share its budget
            self.cache.outside = buffers.trim
            self.cache.reserve = pool_reserve
            self._room_before = buffers.limit_by(self._pool_room)
        self._table = ReadTable()
        #: views busy making a frame; background streams pause for it (see .activity)
        self.activity = VisibleActivity(self._table.visible_active, settings=lambda: self.context.settings)
        self._table.on_visible_end = self.activity.notify
        #: chunks read as fill values because the store lacks them (the chunk map shows them)
        self.absent = AbsentChunks()
        self._ev_seen = 0
        self._closed = False
        self._io = IOLoop(settings)
        self.services = Services(
            self.cache, self.stats, self.absent, self.context, used=self._table.take_prefetched,
            following=lambda source: self.prefetcher.following(source),
        )
        #: read-ahead hints, what one-pass readers took, what became of the guesses
        self.hints = ReadAheadMemory(self._table, self.cache, self._io)
        self.prefetcher = Prefetcher(self)
        #: the reader's next view, made ahead while it pauses (see .ahead)
        self.ahead = ViewsAhead(self.stats.count)
        self._unwatch = config.watch(self._settings_changed)
        self._settings_changed(config.get())  # a change made while this one started

    def _pool_room(self) -> int:
        """What the cache leaves of the budget for the recycled buffers (read without the
        cache's lock: a finalizer asks it)."""
        budget = self.cache.budget
        share = min(POOL_MOST, max(POOL_LEAST, budget // POOL_SHARE))
        return min(share, budget - self.cache.bytes_now)

    def _settings_changed(self, settings: config.Settings) -> None:
        self.context.update(settings)
        if not self._own_budget and settings.cache_bytes != self.cache.budget:
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
        return self._io.run_coroutine(coro, self._timeout(timeout))

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the engine's I/O thread (work the caller need not wait for)."""
        self._io.call_soon(fn, *args)

    def _check_open(self) -> None:
        if self._closed:
            raise EngineClosedError("the tsexplore engine is closed; call tse.open_dataset again")

    def _timeout(self, timeout: float | None) -> float:
        return self.context.settings.wait_timeout if timeout is None else timeout

    def check_blocking_allowed(self) -> None:
        """Raise unless a blocking read may run here: the engine is open, not its I/O thread."""
        self._check_open()
        self._io.check_blocking_allowed()

    # -- requests ----------------------------------------------------------------------------
    def key(self, source: ChunkSource, index: ChunkIndex) -> ChunkRequest:
        """The request (and cache key) of the whole chunk ``index`` of ``source``."""
        return ChunkRequest(source.token, tuple(int(i) for i in index))

    def request(
        self, source: ChunkSource, indices: Iterable[ChunkIndex], priority: Priority = Priority.VISIBLE,
        **options: Any,
    ) -> list[cf.Future]:
        """Ask for whole chunks; one future per index, resolved with the decoded chunk.
        Cached chunks come back as finished futures (a *hit*). ``options``: :meth:`submit`'s."""
        token = source.token
        requests = [ChunkRequest(token, tuple(index)) for index in indices]
        return [item if isinstance(item, cf.Future) else _done(item)
                for item in self.submit(source, requests, priority, **options)]

    def submit(
        self,
        source: ChunkSource,
        requests: Sequence[ChunkRequest],
        priority: Priority = Priority.VISIBLE,
        *,
        channel: str | None = None,
        generation: int | None = None,
        keep: bool = True,
        skip_taken: bool = False,
    ) -> list[np.ndarray | cf.Future]:
        """Ask for reads: per request its cached value (a *hit*), or a future resolved with it.

        A :class:`~.types.Blocks` request is answered by the whole chunk when that is cached
        (check with :func:`~.parts.is_part`). With ``channel`` and ``generation``, a newer
        generation of the same channel cancels queued reads that only older generations
        wanted (their futures raise :class:`RequestCancelledError`). ``keep=False`` marks new
        reads as one-pass: the value goes to the caller but is not kept (unless another
        request wants it kept), so a scan does not fill the cache with chunks nobody reads
        again. ``skip_taken`` (SPECULATIVE guesses for a one-pass reader): chunks one-pass
        readers have had are not read again (their futures raise RequestCancelledError).
        Parts a reader asks for are one-pass, except the whole blocks its source keeps for
        their other rows (``source.blocks.keeps``); parts the prefetcher asks for are kept until a
        reader takes them. Parts of local chunks a reader waits for are read in its thread.
        """
        self._check_open()
        keys = list(requests)
        owner = None
        if channel is not None:
            owner, cancelled = self._table.owner(channel, generation)
            if cancelled:
                self._cancelled(cancelled)
        found = self._look_up(keys, source)
        waiting = priority is not Priority.SPECULATIVE
        if waiting and not keep:  # before its cached chunks leave the cache (see _answer)
            self._table.note_taken([k for k in keys if k.part is WHOLE])
        tally = Tally()
        missing = [k for k, v in zip(keys, found) if v is None]
        reads: dict[ChunkRequest, Any] = {}
        if missing:
            lane = self.context.lane(source)
            get, table = self.cache.get, self._table
            parts = [k for k in missing if k.part is not WHOLE]
            whole = [k for k in missing if k.part is WHOLE]
            if whole:
                reads.update(table.admit(source, lane, whole, priority, owner, keep, tally, get, skip_taken))
            if parts:  # the prefetcher's parts are kept; a reader's are one-pass, but the blocks it keeps
                keeps = getattr(source.blocks, "keeps", None) if waiting and keep else None
                kept: list[ChunkRequest] = []
                passing: list[ChunkRequest] = []
                for k in parts:
                    (kept if not waiting or (keeps is not None and keeps(k.box)) else passing).append(k)
                for group, keep_them in ((kept, True), (passing, False)):
                    if group:
                        reads.update(table.admit(source, lane, group, priority, owner, keep_them, tally, get,
                                                 skip_taken))
            for i, key in enumerate(keys):  # cached after all: a read ended since the look-up
                value = reads.get(key)
                if found[i] is None and value is not None and not isinstance(value, Admitted):
                    found[i] = value
            # local parts of a few blocks: read now, here (a stream's front, megabytes of disk
            # and decoding, goes to the read threads, which read and decode several at once)
            if parts and waiting and not source.is_async and getattr(source.blocks, "inline", True):
                self._read_here([reads[k].read for k in parts if isinstance(reads.get(k), Admitted)])
        out = self._answer(keys, found, reads, priority, keep, tally)
        self.stats.add(tally.items())
        if tally.new or tally.joined:
            self._dispatch()
        return out

    def _look_up(self, keys: list[ChunkRequest], source: ChunkSource | None = None) -> list[Any]:
        """Cached values of ``keys``; a part is answered by its whole chunk when that is
        cached (``keys`` keeps the part), or by what ``source``'s parts say the cache holds
        of it (a zstd chunk's decoded front that covers it)."""
        wholes = [k if k.part is WHOLE else k.whole for k in keys]
        found = self.cache.get_many(wholes)
        at = [i for i, (k, v) in enumerate(zip(keys, found)) if v is None and k.part is not WHOLE]
        if at:
            for i, value in zip(at, self.cache.get_many([keys[i] for i in at])):
                found[i] = value
            held = getattr(source.blocks, "held", None) if source is not None else None
            if held is not None:  # a part the cache holds decoded within more (a stream's front)
                for i in at:
                    if found[i] is None:
                        found[i] = held(keys[i], self.cache.get)
        return found

    def paced(self, source: ChunkSource) -> bool:
        """Whether the reader of ``source`` paces its views (see :mod:`.ahead`)."""
        return self.ahead.paced(source.token)

    def holds(self, keys: Sequence[ChunkRequest]) -> bool:
        """Whether every request is cached (a part: or its whole chunk) or being read."""
        reading = self._table.reading
        return all(value is not None or reading(key) or reading(key.whole)
                   for key, value in zip(keys, self._look_up(list(keys))))

    def _read_here(self, reads: list[Read]) -> None:
        """Run the reads this reader queued (parts of local chunks) in its own thread, with
        the read threads free meanwhile: a part is a few blosc blocks, and queueing it for a
        read thread costs about as much as decoding it. Reads another request queued first
        may run elsewhere already: the reader waits for those."""
        mine = self._table.claim(reads)
        if mine:
            self._drive(mine, None, again=True)

    def _answer(
        self,
        keys: list[ChunkRequest],
        found: list[Any],
        reads: dict[ChunkRequest, Any],
        priority: Priority,
        keep: bool,
        tally: Tally,
    ) -> list[np.ndarray | cf.Future]:
        """Cached values and read futures in request order; hits and read-ahead used counted."""
        waiting = priority is not Priority.SPECULATIVE
        prefetched = self._table.prefetched
        out: list[np.ndarray | cf.Future] = []
        consumed = []
        heels = behind = False
        for key, value in zip(keys, found):
            if value is None:
                admitted = reads.get(key)  # none: a guess of a chunk a one-pass reader took
                out.append(admitted.future if admitted is not None else _done(
                    exc=RequestCancelledError(f"chunk {key.index} was taken by a one-pass reader")))
                continue
            out.append(value)
            if waiting:
                tally.hits += 1
                if not prefetched:
                    continue
                ended = self._table.take_prefetched_at(key) if key in prefetched else None
                if ended is None and key.part is not WHOLE:  # its chunk was read ahead
                    ended = self._table.take_prefetched_at(key.whole)
                elif ended is not None and (not keep or key.part is not WHOLE):
                    consumed.append(key)
                if ended is not None:
                    tally.prefetch_used += 1
                    if time.monotonic() - ended < CATCH_UP_LEAD:
                        heels = True
                    else:
                        behind = True
        if heels:  # the reader is on the prefetch's heels: let it run at full speed
            self._table.catch_up()
        elif behind:  # it takes what was read ahead long before: the prefetch is ahead again
            self._table.catching_up_until = 0.0
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
        self._dispatch()

    # -- dispatch (from any thread) ----------------------------------------------------------
    def concurrency(self, lane: Hashable) -> int:
        """Reads of ``lane`` (``"sync"``, or a store's link model) allowed in flight at once."""
        if lane == "sync":
            return self._io.threads
        # enough to hide the latency, no more than the link carries (see sources/link.py),
        # and a read thread's worth more: a read decoding does not use the link
        return lane.concurrency() + self._io.threads  # type: ignore[attr-defined, no-any-return]

    def speculative_cap(self, lane: Hashable) -> int:
        """Prefetch reads allowed at once: leave CPU for what the user waits on."""
        if time.monotonic() < self._table.catching_up_until:
            # the reader is catching up with the prefetch: read ahead at full speed
            return self.concurrency(lane)
        spare = max(1, (os.cpu_count() or 2) - 1)
        if lane != "sync":
            # a remote read mostly waits on the network: half the link's reads may be
            # guesses (enough to stay ahead of a player at 100 ms), the rest stay free
            return max(2, spare, self.concurrency(lane) // 2)
        return min(self._io.threads, spare)

    def catch_up(self) -> None:
        """The reader is at the chunks being read ahead (see :meth:`ReadTable.catch_up`)."""
        self._table.catch_up()

    def slab_latency(self, source: ChunkSource, nchunks: int) -> float:
        """Expected seconds to read ``nchunks`` chunks of ``source`` at today's concurrency."""
        per = self.context.link(source).read_latency
        return per * -(-nchunks // max(1, self.concurrency(self.context.lane(source))))

    def _dispatch(self) -> None:
        """Start every read that may start now (from any thread): a blocking source's batch on
        a read thread (:meth:`_run_blocking`), any other as a task on the I/O loop."""
        for batch in self._runnable():
            self._start(batch)

    def _runnable(self) -> list[list[Read]]:
        """The batches that may start now, taken from the table (marked running)."""
        batches = self._table.take_runnable(self.concurrency, self.speculative_cap,
                                            self.context.settings.visible_first)
        for batch in batches:
            if len(batch) > 1:
                self.stats.count("batched", len(batch))
        return batches

    def _start(self, batch: list[Read]) -> None:
        if _blocking(batch):
            self._io.submit(self._run_blocking, batch)
        elif self._io.on_loop_thread():
            self._io.loop.create_task(self._run(batch))
        else:
            self._io.call_soon(self._start, batch)

    def _run_blocking(self, batch: list[Read] | None) -> None:
        """On a read thread: drive a blocking source's batch, settle it, and go on with the
        next batch that may start here (the others start where they run), till none may."""
        while batch is not None and not self._closed:
            # a batch nobody waits for shares its decoding with no more threads than cores
            # (the other read threads run batches of their own); one a reader waits for,
            # with every read thread free
            visible = any(r.priority is Priority.VISIBLE for r in batch)
            self._drive(batch, None if visible else self._io.cpus)
            batch = None
            for more in self._runnable():
                if batch is None and _blocking(more):
                    batch = more
                else:
                    self._start(more)

    def _drive(self, reads: list[Read], threads: int | None, again: bool = False) -> None:
        """A blocking source's reads fetched and decoded in this thread, the read threads free
        meanwhile sharing the decoding (``threads`` in all at most, default all); each read
        settled. A failure of the whole batch (a wait timed out) goes to every waiter, and
        with ``again`` is raised here too."""
        try:
            jobs = run_here(execute(reads[0].source, [r.key for r in reads], self.services), self._io,
                            self.context, threads)
        except BaseException as exc:  # noqa: BLE001 - (a wait timed out): every waiter gets it
            for read in reads:
                self._table.settle(read, exc=exc)
            if again:
                raise
            return
        for read, job in zip(reads, jobs):
            self._settle(read, job)

    async def _run(self, reads: list[Read]) -> None:
        """Run a batch of reads of a source that awaits (a remote store's) through the
        pipeline on the loop, settle each, and dispatch the table once after."""
        source = reads[0].source
        try:
            jobs = await run_on_loop(execute(source, [r.key for r in reads], self.services), self._io, self.context)
        except asyncio.CancelledError:
            for read in reads:
                self._table.settle(read, exc=EngineClosedError("engine closed during the read"))
            raise
        except BaseException as exc:  # noqa: BLE001 - (a wait timed out): the waiters get it
            for read in reads:
                self._table.settle(read, exc=exc)
        else:
            for read, job in zip(reads, jobs):
                self._settle(read, job)
        self._dispatch()

    def _settle(self, read: Read, job: Job) -> None:
        """The cache step: keep the value when the read is kept; hand it (or the error) to
        the waiters. Stored bytes went to the encoded tier (their value is None)."""
        if job.error is not None:
            self._table.settle(read, exc=job.error)
            return
        value = job.value
        if value is None or not (read.keep and self.cache.put(read.key, value)):
            self._table.unprefetched(read.key)
        else:
            self._table.prefetch_ended(read.key)
        self._table.settle(read, result=value)

    # -- nested reads ------------------------------------------------------------------------
    def read_inline(self, source: ChunkSource, index: ChunkIndex) -> np.ndarray:
        """Read one chunk in the calling thread (cache first), past the read table: a read
        thread that itself needs engine data (a source over an engine-backed variable) must
        not queue behind itself. The read takes the same pipeline as every other."""
        key = self.key(source, index)
        value = self.cache.get(key)
        if value is not None:
            self.stats.count("hits")
            return value  # type: ignore[no-any-return]
        self.stats.count("misses")
        (job,) = run_here(execute(source, [key], self.services), self._io, self.context)
        if job.error is not None:
            raise job.error
        self.cache.put(key, job.value)
        return job.value  # type: ignore[no-any-return]

    async def _nested(self, source: ChunkSource, index: ChunkIndex) -> tuple[np.ndarray, int]:
        """A read of ``source`` inside another read, on the loop (``ReadContext.read``): the
        stages, neither the table nor the cache (the outer read keeps its value)."""
        gen = execute(source, [ChunkRequest(source.token, tuple(index))], self.services, nested=True)
        if source.is_async or source.awaits:
            (job,) = await run_on_loop(gen, self._io, self.context)
        else:
            (job,) = await self._io.to_thread(run_here, gen, self._io, self.context)
        if job.error is not None:
            raise job.error
        return job.value, job.moved

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
        chunks = wait_all(futures, self._timeout(timeout))
        self.count_useful(sum(getattr(c, "nbytes", 0) for c in chunks))
        return chunks

    def stream_ahead(self, source: ChunkSource) -> int:
        """Reads a stream keeps issued: enough to keep the I/O pipe full (remote: twice the
        engine's concurrency), without letting them exceed a quarter of the cache budget."""
        per = max(1, source.chunk_nbytes())
        limit = max(2, self.cache.budget // 4 // per)
        threads = self._io.threads
        want = max(2 * threads, 2 * self.concurrency(self.context.lane(source)) if source.is_async else 0)
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
        wait_for = self._timeout(timeout)

        def issue(index: ChunkIndex) -> cf.Future:
            return self.request(source, [index], Priority.PLANNED, keep=cache)[0]

        def wait(index: ChunkIndex, fut: cf.Future) -> np.ndarray:
            chunk = wait_all([fut], wait_for)[0]
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
        if source.max_batch > 1:  # inner chunks of one shard: queue them together, to batch
            def many(batch: list[ChunkIndex]) -> list[cf.Future]:
                return self.request(source, batch, Priority.PLANNED, keep=cache)

        yield from look_ahead(
            indices, issue, wait, ahead=depth,
            hint=lambda batch: self.hints.advise(source, batch), issue_many=many,
        )

    # -- introspection -----------------------------------------------------------------------
    def queued(self) -> dict[str, int]:
        return self._table.queued()

    def in_flight_keys(self) -> set[ChunkRequest]:
        return self._table.in_flight_keys()

    def cached_indices(self, token: str) -> set[ChunkIndex]:
        """Chunks of source ``token`` the cache holds something of: the decoded chunk, a
        decoded part, its stored frame, its blosc head or its zstd stream's decoded front
        (reading it again reads less)."""
        out = set()
        for key in self.cache.keys():
            if isinstance(key, ChunkRequest) and key.array == token:
                out.add(key.index)
            elif isinstance(key, AuxKey) and key.array == token and key.kind in ("head", "front"):
                out.add(key.at)
        return out

    def snapshot(self) -> StatsSnapshot:
        cache = self.cache
        running = self._table.running
        concurrency = self._io.threads + sum(self.concurrency(lane) - self._io.threads
                                             for lane, n in list(running.items()) if n and lane != "sync")
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
        self.ahead.close(timeout / 2)

        self._io.close(close_async_resources, timeout)
        self.cache.clear()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "running"
        return f"<Engine {state} {self.cache!r}>"


def _blocking(batch: list[Read]) -> bool:
    """Whether a batch's source reads by blocking calls (a read thread drives it whole)."""
    source = batch[0].source
    return not (source.is_async or source.awaits)


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
