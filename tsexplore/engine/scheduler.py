"""The engine: one I/O loop thread, a decode pool, the cache, the stats and the prefetcher.

Requests carry a :class:`Priority`. Reads of the same chunk are de-duplicated: a second
request for a chunk in flight *joins* the first read. A request may name a ``channel`` (a
view, a loader) and a ``generation``; when a channel moves to a newer generation, queued
reads that only older generations of that channel wanted are cancelled before they start.
Reads already running finish and fill the cache (a thread cannot be interrupted safely).

Concurrency adapts to the measured latency of reads: blocking sources use the thread pool
(``io_threads`` at once), asynchronous (network) sources keep more reads in flight when each
read takes longer, up to 64.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures as cf
import heapq
import itertools
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

from .. import config
from ..errors import (
    ChunkReadError,
    EngineClosedError,
    ReadTimeoutError,
    RequestCancelledError,
    TsExploreError,
)
from ..sources.base import ChunkIndex, ChunkSource
from .absent import AbsentChunks, read_or_fill, read_or_fill_sync
from .cache import ChunkCache
from .stats import Stats, StatsSnapshot


class Priority(IntEnum):
    """Lower value runs first."""

    VISIBLE = 0
    PLANNED = 1
    SPECULATIVE = 2


ChunkKey = tuple[str, ChunkIndex]
#: chunks taken by one-pass readers that the prefetcher remembers not to read again
CONSUMED_MEMORY = 4096
#: read-ahead hints remembered (not repeated) per process
ADVISED_MEMORY = 8192


@dataclass(eq=False)
class _Read:
    key: ChunkKey
    source: ChunkSource
    index: ChunkIndex
    priority: Priority
    future: cf.Future = field(default_factory=cf.Future)
    owners: set[tuple[str, int]] = field(default_factory=set)
    anonymous: int = 0  # requests without a channel: someone waits, never cancelled
    state: str = "queued"  # queued | running | done | cancelled
    task: asyncio.Task | None = None
    speculative_slot: bool = False  # holds one of the prefetch slots while running
    keep: bool = True  # put the chunk in the cache (False: a one-pass stream reads it)
    prefetch_only: bool = False  # only the prefetcher wants it kept so far


class Engine:
    """Everything that moves chunks. One per process; see :func:`get_engine`."""

    def __init__(self, cache_bytes: int | None = None) -> None:
        settings = config.get()
        if settings.switch_interval > 0 and sys.getswitchinterval() > settings.switch_interval:
            # decode threads hold the GIL only briefly between C calls; with the default 5 ms
            # interval each of those hand-offs waits behind a busy main thread
            sys.setswitchinterval(settings.switch_interval)
        self.cache = ChunkCache(settings.cache_bytes if cache_bytes is None else cache_bytes)
        self.stats = Stats()
        self.absent = AbsentChunks()  # chunks read as fill values because the store lacks them
        self._lock = threading.Lock()
        self._reads: dict[ChunkKey, _Read] = {}
        self._heap: list[tuple[int, int, _Read]] = []
        self._seq = itertools.count()
        self._generations: dict[str, int] = {}
        self._running = {"sync": 0, "async": 0}
        self._spec_running = {"sync": 0, "async": 0}
        self._prefetch_behind_until = 0.0
        self._latency = {"sync": 0.005, "async": 0.005}
        self._prefetched: set[ChunkKey] = set()
        self._consumed: collections.OrderedDict[ChunkKey, None] = collections.OrderedDict()
        self._advised: collections.OrderedDict[ChunkKey, None] = collections.OrderedDict()
        self._closed = False
        self._io_threads = settings.io_threads
        self._pool = cf.ThreadPoolExecutor(
            self._io_threads, thread_name_prefix="tsexplore-read", initializer=_lower_priority
        )
        self._loop = asyncio.new_event_loop()
        self._loop.set_default_executor(self._pool)
        self._thread = threading.Thread(target=self._run_loop, name="tsexplore-io", daemon=True)
        self._thread.start()
        from ..sources import zarr_source
        from .prefetch import Prefetcher

        self.prefetcher = Prefetcher(self)
        zarr_source.retry_hook[:] = [lambda: self.stats.count("retries")]

    # -- loop ---------------------------------------------------------------------------------
    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @property
    def closed(self) -> bool:
        return self._closed

    def run_coroutine(self, coro, timeout: float | None = None):  # type: ignore[no-untyped-def]
        """Run ``coro`` on the I/O loop and wait for it (with a timeout) from another thread."""
        self._check_caller()
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        timeout = config.get().wait_timeout if timeout is None else timeout
        try:
            return fut.result(timeout)
        except cf.TimeoutError:
            fut.cancel()
            raise ReadTimeoutError(f"operation did not finish within {timeout} s") from None

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the engine's I/O thread (work the caller need not wait for).

        An exception there is reported by asyncio's handler (the ``asyncio`` logger).
        """
        if self._closed:
            return
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop closed meanwhile: nothing left to plan for
            pass

    def _check_caller(self) -> None:
        if self._closed:
            raise EngineClosedError("the tsexplore engine is closed; call tse.open_dataset again")
        if threading.current_thread() is self._thread:
            raise EngineClosedError(
                "a blocking tsexplore read was called from the engine's own I/O loop; "
                "await source.read_chunk() there instead"
            )

    # -- requests -----------------------------------------------------------------------------
    def key(self, source: ChunkSource, index: ChunkIndex) -> ChunkKey:
        return (source.token, tuple(int(i) for i in index))

    def request(
        self,
        source: ChunkSource,
        indices: Iterable[ChunkIndex],
        priority: Priority = Priority.VISIBLE,
        *,
        channel: str | None = None,
        generation: int | None = None,
        cache: bool = True,
    ) -> list[cf.Future]:
        """Ask for chunks; returns one future per index, resolved with the decoded chunk.

        Cached chunks come back as finished futures (a *hit*). With ``channel`` and
        ``generation``, a newer generation of the same channel cancels queued reads that only
        older generations wanted (their futures raise :class:`RequestCancelledError`).
        ``cache=False``: a one-pass read (see :meth:`request_mixed`).
        """
        out = []
        items = self.request_mixed(
            source, indices, priority, channel=channel, generation=generation, cache=cache
        )
        for item in items:
            if isinstance(item, cf.Future):
                out.append(item)
            else:
                fut: cf.Future = cf.Future()
                fut.set_result(item)
                out.append(fut)
        return out

    def request_mixed(
        self,
        source: ChunkSource,
        indices: Iterable[ChunkIndex],
        priority: Priority = Priority.VISIBLE,
        *,
        channel: str | None = None,
        generation: int | None = None,
        cache: bool = True,
    ) -> list[np.ndarray | cf.Future]:
        """Like :meth:`request`, but cached chunks come back as arrays (the fast path).

        ``cache=False`` marks new reads as one-pass: the chunk goes to the caller but is not
        kept (unless another request wants it kept), so a scan does not fill the cache with
        chunks nobody reads again -- and reuses freed memory instead of faulting in new pages.
        """
        if self._closed:
            raise EngineClosedError("the tsexplore engine is closed; call tse.open_dataset again")
        waiting = priority is not Priority.SPECULATIVE
        owner = None
        token = source.token
        keys = [(token, tuple(index)) for index in indices]
        with self._lock:
            if channel is not None:
                gen = self._generations.get(channel, -1) if generation is None else generation
                if gen > self._generations.get(channel, -1):
                    self._generations[channel] = gen
                    self._cancel_older_locked(channel, gen)
                owner = (channel, gen)
        found = self.cache.get_many(keys)
        out: list[np.ndarray | cf.Future] = []
        hits = misses = joined = prefetch = used = 0
        new_reads = False
        missing = [k for k, v in zip(keys, found) if v is None]
        reads: dict[ChunkKey, _Read] = {}
        if missing:
            with self._lock:
                for key in missing:
                    read = self._reads.get(key)
                    if read is not None and read.state in ("queued", "running"):
                        if waiting:  # (the prefetcher asking again changes nothing)
                            if cache:
                                read.keep, read.prefetch_only = True, False
                            elif read.prefetch_only:
                                read.keep = False  # read ahead for this one-pass reader only
                            if read.priority is Priority.SPECULATIVE:
                                self._prefetch_behind_until = time.monotonic() + 2.0
                            joined += 1
                            if key in self._prefetched:
                                self._prefetched.discard(key)
                                used += 1
                        if priority < read.priority:
                            read.priority = priority
                            if read.state == "queued":
                                heapq.heappush(self._heap, (int(priority), next(self._seq), read))
                    else:
                        read = _Read(key, source, key[1], priority)
                        read.keep = cache
                        read.prefetch_only = priority is Priority.SPECULATIVE
                        self._reads[key] = read
                        heapq.heappush(self._heap, (int(priority), next(self._seq), read))
                        new_reads = True
                        if waiting and priority is Priority.VISIBLE:
                            misses += 1
                        else:
                            prefetch += 1
                            if priority is Priority.SPECULATIVE:
                                self._prefetched.add(key)
                    if owner is not None:
                        read.owners.add(owner)
                    elif waiting:
                        read.anonymous += 1
                    reads[key] = read
        consumed = []
        for key, value in zip(keys, found):
            if value is not None:
                out.append(value)
                if waiting:
                    hits += 1
                    if self._prefetched and key in self._prefetched:
                        self._prefetched.discard(key)
                        used += 1
                        if not cache:
                            consumed.append(key)
            else:
                out.append(reads[key].future)
        if consumed:  # read ahead for a one-pass reader: it has it now, the cache lets it go
            self.cache.discard([k for k in consumed if not self.cache.is_pinned(k)])
        if waiting and not cache:  # a one-pass reader will not ask again: do not read ahead
            self._note_consumed(keys)
        for name, n in (
            ("hits", hits), ("misses", misses), ("joined", joined),
            ("prefetch_reads", prefetch), ("prefetch_used", used),
        ):
            if n:
                self.stats.count(name, n)
        if new_reads or joined:
            self._loop.call_soon_threadsafe(self._dispatch)
        return out

    def advise(self, source: ChunkSource, indices: Iterable[ChunkIndex]) -> None:
        """Pass a read-ahead hint to ``source`` for chunks not cached and not hinted lately."""
        if self._closed:
            return
        token = source.token
        fresh = []
        with self._lock:
            for index in indices:
                key = (token, tuple(index))
                if key in self._advised:
                    continue
                self._advised[key] = None
                fresh.append(key)
            while len(self._advised) > ADVISED_MEMORY:
                self._advised.popitem(last=False)
        todo = [k[1] for k in fresh if k not in self.cache]
        if not todo:
            return
        if threading.current_thread() is self._thread:
            # on the I/O loop (the prefetcher after a cached read): the hint's system calls
            # must not hold up dispatching, so a read thread passes it on
            try:
                self._pool.submit(_advise_quietly, source, todo)
            except RuntimeError:  # the pool shut down meanwhile: no hint needed
                pass
        else:
            _advise_quietly(source, todo)

    def _note_consumed(self, keys: Iterable[ChunkKey]) -> None:
        """Remember chunks a one-pass reader took, so the prefetcher does not read them again."""
        with self._lock:
            for key in keys:
                self._consumed[key] = None
                self._consumed.move_to_end(key)
            while len(self._consumed) > CONSUMED_MEMORY:
                self._consumed.popitem(last=False)

    def recently_consumed(self, key: ChunkKey) -> bool:
        """Whether a one-pass reader took ``key`` lately (it will not want it again)."""
        return key in self._consumed

    def _cancel_older_locked(self, channel: str, generation: int) -> None:
        cancelled = 0
        for read in list(self._reads.values()):
            if read.state != "queued" or not read.owners:
                continue
            stale = {o for o in read.owners if o[0] == channel and o[1] < generation}
            if not stale:
                continue
            read.owners -= stale
            if not read.owners and read.anonymous == 0 and read.priority != Priority.PLANNED:
                read.state = "cancelled"
                del self._reads[read.key]
                self._prefetched.discard(read.key)
                if not read.future.done():
                    read.future.set_exception(
                        RequestCancelledError(f"chunk {read.index} superseded by a newer view")
                    )
                cancelled += 1
        if cancelled:
            self.stats.count("cancelled", cancelled)

    def cancel_speculative(self, source: ChunkSource | None = None) -> int:
        """Drop queued prefetch reads (of one source, or all)."""
        n = 0
        with self._lock:
            for read in list(self._reads.values()):
                if read.state != "queued" or read.priority != Priority.SPECULATIVE:
                    continue
                if read.owners or read.anonymous:
                    continue
                if source is not None and read.key[0] != source.token:
                    continue
                read.state = "cancelled"
                del self._reads[read.key]
                self._prefetched.discard(read.key)
                if not read.future.done():
                    read.future.set_exception(RequestCancelledError("prefetch cancelled"))
                n += 1
        if n:
            self.stats.count("cancelled", n)
        return n

    # -- dispatch (runs on the loop) ----------------------------------------------------------
    def concurrency(self, kind: str) -> int:
        if kind == "sync":
            return self._io_threads
        # keep about 20 ms of work in flight per 2.5 ms of latency, within [4, 64]
        return int(min(64, max(4, math.ceil(self._latency["async"] / 0.00125))))

    def speculative_cap(self, kind: str) -> int:
        """Prefetch reads allowed at once: leave CPU for what the user waits on."""
        if time.monotonic() < self._prefetch_behind_until:
            # the reader is catching up with the prefetch: read ahead at full speed
            return self.concurrency(kind)
        spare = max(1, (os.cpu_count() or 2) - 1)
        if kind == "async":
            # a remote read waits on the network, then decodes: two at a time overlap the
            # latency while about one core decodes
            return max(2, spare)
        return min(self._io_threads, spare)

    def _dispatch(self) -> None:
        kinds = ("sync", "async")
        with self._lock:
            deferred = []
            while self._heap:
                full = {k for k in kinds if self._running[k] >= self.concurrency(k)}
                if len(full) == len(kinds):
                    break
                prio, seq, read = heapq.heappop(self._heap)
                if read.state != "queued" or prio != int(read.priority):
                    continue
                kind = "async" if read.source.is_async else "sync"
                speculative = read.priority is Priority.SPECULATIVE
                if kind in full or (speculative and self._spec_running[kind] >= self.speculative_cap(kind)):
                    deferred.append((prio, seq, read))
                    if speculative and all(
                        k in full or self._spec_running[k] >= self.speculative_cap(k) for k in kinds
                    ):
                        break  # the heap is ordered: only prefetch reads remain
                    continue
                read.state = "running"
                self._running[kind] += 1
                if speculative:
                    read.speculative_slot = True
                    self._spec_running[kind] += 1
                read.task = self._loop.create_task(self._run_read(read, kind))
            for item in deferred:
                heapq.heappush(self._heap, item)

    async def _run_read(self, read: _Read, kind: str) -> None:
        source = read.source
        t0 = time.perf_counter()
        self.stats.count("reads")
        try:
            array, encoded = await read_or_fill(source, read.index, self._note_absent)
            expected = source.chunk_shape(read.index)
            if array.shape != expected:
                raise ChunkReadError(
                    f"{source!r} returned shape {array.shape} for chunk {read.index}, "
                    f"expected {expected}",
                    source=source.token,
                    index=read.index,
                )
            if array.dtype != source.dtype:
                array = array.astype(source.dtype)
        except asyncio.CancelledError:
            self._finish(read, kind, exc=EngineClosedError("engine closed during the read"))
            raise
        except BaseException as exc:  # noqa: BLE001 - every failure goes to the waiter
            self.stats.count("errors")
            if not isinstance(exc, TsExploreError):
                exc = ChunkReadError(
                    f"reading chunk {read.index} of {source!r} failed: {exc!r}",
                    source=source.token,
                    index=read.index,
                )
            self._finish(read, kind, exc=exc)
            return
        elapsed = time.perf_counter() - t0
        lat = self._latency[kind]
        self._latency[kind] = 0.8 * lat + 0.2 * elapsed
        self.stats.record_read(encoded, array.nbytes, elapsed)
        kept = self.cache.put(read.key, array) if read.keep else False
        if not kept:
            self._prefetched.discard(read.key)
        self._finish(read, kind, result=array)

    def _finish(self, read: _Read, kind: str, result=None, exc=None) -> None:  # type: ignore[no-untyped-def]
        with self._lock:
            self._running[kind] -= 1
            if read.speculative_slot:
                self._spec_running[kind] -= 1
                read.speculative_slot = False
            if self._reads.get(read.key) is read:
                del self._reads[read.key]
            read.state = "done"
        if not read.future.done():
            if exc is not None:
                read.future.set_exception(exc)
            else:
                read.future.set_result(result)
        self._dispatch()

    # -- nested reads ------------------------------------------------------------------------
    def in_worker_thread(self) -> bool:
        """True on one of the engine's read threads (a source reading another engine array)."""
        return threading.current_thread().name.startswith("tsexplore-read")

    def read_inline(self, source: ChunkSource, index: ChunkIndex) -> np.ndarray:
        """Read one chunk in the calling thread (cache first), bypassing the scheduler.

        Used when a read thread itself needs engine data (an ArraySource over an engine-backed
        variable): queueing behind itself on the same pool could deadlock.
        """
        key = (source.token, tuple(index))
        value = self.cache.get(key)
        if value is not None:
            self.stats.count("hits")
            return value
        self.stats.count("misses")
        self.stats.count("reads")
        t0 = time.perf_counter()
        array, encoded = read_or_fill_sync(source, tuple(index), self._note_absent)
        self.stats.record_read(encoded, array.nbytes, time.perf_counter() - t0)
        self.cache.put(key, array)
        return array

    def _note_absent(self, source: ChunkSource, index: ChunkIndex) -> None:
        """An absent chunk was read as the fill value: count it, remember it for the map."""
        self.stats.count("missing_filled")
        self.absent.add(source.token, tuple(index))

    # -- blocking helpers ---------------------------------------------------------------------
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
        """Request chunks and wait for all of them (raising the first error)."""
        self._check_caller()
        if self.in_worker_thread():
            return [self.read_inline(source, i) for i in indices]
        futures = self.request(source, indices, priority, channel=channel, generation=generation)
        return wait_all(futures, timeout)

    def stream(
        self,
        source: ChunkSource,
        order: Iterable[ChunkIndex],
        *,
        ahead: int | None = None,
        timeout: float | None = None,
        cache: bool = True,
    ) -> Iterator[tuple[ChunkIndex, np.ndarray]]:
        """Yield ``(index, chunk)`` in ``order``, keeping up to ``ahead`` PLANNED reads in flight.

        ``ahead`` defaults to what keeps the I/O pipe full without letting in-flight chunks
        exceed a quarter of the cache budget. This is how reductions and loaders announce
        their plan to the engine. ``cache=False``: a one-pass scan; chunks read for it are not
        kept in the cache (chunks already cached are still used).
        """
        self._check_caller()
        if self.in_worker_thread():
            for index in order:
                yield tuple(index), self.read_inline(source, tuple(index))
            return
        if ahead is None:
            per = max(1, source.chunk_nbytes())
            limit = max(2, self.cache.budget // 4 // per)
            want = max(2 * self._io_threads, self.concurrency("async") if source.is_async else 0)
            ahead = int(max(2, min(want, limit)))
        pending: list[tuple[ChunkIndex, cf.Future]] = []
        lookahead: collections.deque[ChunkIndex] = collections.deque()
        it = iter(order)
        exhausted = False
        try:
            while True:
                # the next ``ahead`` indices after the reads in flight: hinted to the source
                hinted = []
                while not exhausted and len(pending) + len(lookahead) < 2 * ahead:
                    try:
                        index = tuple(next(it))
                    except StopIteration:
                        exhausted = True
                        break
                    lookahead.append(index)
                    hinted.append(index)
                if hinted:
                    self.advise(source, hinted)
                while lookahead and len(pending) < ahead:
                    index = lookahead.popleft()
                    (fut,) = self.request(source, [index], Priority.PLANNED, cache=cache)
                    pending.append((index, fut))
                if not pending:
                    return
                index, fut = pending.pop(0)
                yield index, wait_all([fut], timeout)[0]
        finally:
            # reads still in flight finish and fill the cache; futures are shared, so they
            # are not cancelled here (another request may have joined them)
            pending.clear()

    # -- introspection ------------------------------------------------------------------------
    def queued(self) -> dict[str, int]:
        counts = {p.name.lower(): 0 for p in Priority}
        with self._lock:
            for read in self._reads.values():
                if read.state == "queued":
                    counts[read.priority.name.lower()] += 1
        return counts

    def in_flight_keys(self) -> set[ChunkKey]:
        with self._lock:
            return {k for k, r in self._reads.items() if r.state in ("queued", "running")}

    def snapshot(self) -> StatsSnapshot:
        cache = self.cache
        with self._lock:
            in_flight = sum(self._running.values())
        concurrency = self._io_threads + (self.concurrency("async") if self._running["async"] else 0)
        self.stats.count("evictions", cache.evictions - getattr(self, "_ev_seen", 0))
        self._ev_seen = cache.evictions
        return self.stats.snapshot(
            queued=self.queued(),
            in_flight=in_flight,
            concurrency=concurrency,
            cache_bytes=cache.bytes_now,
            cache_budget=cache.budget,
            cache_high_water=cache.high_water,
            cache_chunks=len(cache),
            pinned_bytes=cache.pinned_bytes,
        )

    # -- shutdown -----------------------------------------------------------------------------
    def close(self, timeout: float = 2.0) -> None:
        """Cancel pending work, stop the loop and the threads (within ``timeout`` seconds)."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            reads = list(self._reads.values())
            self._reads.clear()
            self._heap.clear()
        for read in reads:
            if not read.future.done():
                read.future.set_exception(EngineClosedError("the tsexplore engine was closed"))

        async def _shutdown() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            from ..sources import close_async_resources

            await close_async_resources()

        deadline = time.monotonic() + timeout
        if self._loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(_shutdown(), self._loop).result(timeout / 2)
            except (cf.TimeoutError, RuntimeError):
                pass
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(max(0.0, deadline - time.monotonic()))
        self._pool.shutdown(wait=False, cancel_futures=True)
        for t in list(getattr(self._pool, "_threads", ())):
            t.join(max(0.0, deadline - time.monotonic()))
        if not self._thread.is_alive():
            self._loop.close()
        self.cache.clear()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "running"
        return f"<Engine {state} {self.cache!r}>"


def _advise_quietly(source: ChunkSource, indices: list[ChunkIndex]) -> None:
    try:
        source.advise(indices)
    except Exception:  # noqa: BLE001 - a hint must never fail a read
        pass


def _lower_priority() -> None:
    """Run read/decode threads at a lower OS priority than the thread that waits for data.

    Decoding is throughput work; the reader (a notebook, a training loop) is latency work.
    On Linux the nice value is per thread; elsewhere this does nothing.
    """
    nice = int(os.environ.get("TSEXPLORE_READ_NICE", "5"))
    if nice and hasattr(os, "setpriority") and sys.platform.startswith("linux"):
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
        except OSError:  # pragma: no cover - not permitted: keep the default priority
            pass


def wait_all(futures: Sequence[cf.Future], timeout: float | None = None) -> list[np.ndarray]:
    """Wait for every future (bounded by ``timeout``) and return their results in order."""
    if len(futures) == 1 and futures[0].done():
        return [futures[0].result()]
    timeout = config.get().wait_timeout if timeout is None else timeout
    done, not_done = cf.wait(futures, timeout, return_when=cf.FIRST_EXCEPTION)
    for fut in futures:
        if fut in done and not fut.cancelled() and fut.exception() is not None:
            raise fut.exception()  # type: ignore[misc]
    if not_done:
        raise ReadTimeoutError(
            f"{len(not_done)} of {len(futures)} chunk reads did not finish within {timeout} s; "
            "raise tse.config.set(wait_timeout=...) or check the store"
        )
    return [f.result() for f in futures]


_engine: Engine | None = None
_engine_lock = threading.Lock()
_engine_pid: int | None = None


def get_engine() -> Engine:
    """The process-wide engine, started on first use (and again after ``close()``/fork)."""
    import os

    global _engine, _engine_pid
    with _engine_lock:
        if _engine is None or _engine.closed or _engine_pid != os.getpid():
            _engine = Engine()
            _engine_pid = os.getpid()
        return _engine


def current_engine() -> Engine | None:
    """The running engine of this process, or None (never starts one)."""
    import os

    engine = _engine
    if engine is None or engine.closed or _engine_pid != os.getpid():
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
    import os

    global _engine
    with _engine_lock:
        engine, _engine = _engine, None
    if engine is not None and _engine_pid == os.getpid():
        engine.close()


def set_cache_bytes(nbytes: int) -> None:
    """Change the process-wide cache budget (and the default for future engines)."""
    config.set(cache_bytes=int(nbytes))
    if _engine is not None and not _engine.closed:
        _engine.cache.resize(int(nbytes))

