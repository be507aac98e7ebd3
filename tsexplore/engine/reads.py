"""The read table: every read queued or running, de-duplicated, in priority order.

One :class:`Read` per request in flight (a whole chunk, a part of one, its stored bytes). A request for a chunk already queued or running
*joins* that read (it may raise its priority); otherwise a new read is queued on a heap
ordered by (priority, arrival). Each read remembers who waits for it: ``(channel,
generation)`` owners and anonymous waiters. When a channel moves to a newer generation, queued
reads that only its older generations wanted are cancelled (PLANNED reads never are).
Everything here runs under one lock and does no I/O.

Reads take slots in *lanes*: the read threads (``"sync"``), or an asynchronous store's link,
each with its own limit. Batches: a source whose reads are cheaper together (inner chunks of
one shard, byte ranges of one object) gives each whole read a ``batch_key``. When a read is
taken to run, the queued reads with the same key and the same priority ride along with it
(up to ``source.max_batch``) as its *companions*: they hold no slot of their own (the batch is
one read in flight), keep their own futures and owners, and are settled one by one. A reader
may *claim* reads it queued to run them itself (:meth:`ReadTable.claim`): they leave the heap
and hold no slot. De-duplication, generations and cancellation see all of them as ordinary
reads until they run.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import heapq
import itertools
import math
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..errors import RequestCancelledError
from ..sources.base import ChunkSource
from .types import WHOLE, ChunkIndex, ChunkRequest, Owner, Priority

#: seconds the prefetch runs at full speed after a reader caught up with it
CATCH_UP_SECONDS = 2.0
#: a reader that takes a prefetched chunk read less than this long ago is on the prefetch's
#: heels (a scrub); one that takes chunks read long before (a 30 fps play) is not, and the
#: prefetch keeps a core free for it
CATCH_UP_LEAD = 0.15
#: chunks taken by one-pass readers that the table remembers (guesses of them are refused)
TAKEN_MEMORY = 4096

#: the future of a settled read (its own went to its waiters): finished, it takes no result
_ENDED: cf.Future = cf.Future()
_ENDED.set_result(None)


@dataclass(eq=False)
class Read:
    """One read, queued or running, and who waits for it."""

    key: ChunkRequest
    source: ChunkSource
    index: ChunkIndex
    priority: Priority
    lane: Hashable = "sync"  # where it takes its slot (see the module docstring)
    future: cf.Future = field(default_factory=cf.Future)
    owners: set[Owner] = field(default_factory=set)
    anonymous: int = 0  # requests without a channel: someone waits, never cancelled
    state: str = "queued"  # queued | running | done | cancelled
    speculative_slot: bool = False  # holds one of the prefetch slots while running
    keep: bool = True  # put the chunk in the cache (False: a one-pass stream reads it)
    kept_at: float = 0.0  # when a reader last asked for it to be kept (``time.monotonic``)
    prefetch_only: bool = False  # only the prefetcher wants it kept so far
    group: Hashable | None = None  # reads with the same group may run as one batch
    companion: bool = False  # rides in another read's batch, or claimed (holds no slot)
    visible: bool = False  # counted in ReadTable.visible (VISIBLE now; priorities only rise)


class Admitted(NamedTuple):
    """A request's read and the future it waits on, taken under the table's lock (a read
    lets go of its future when it is settled)."""

    read: Read
    future: cf.Future


@dataclass(slots=True)
class Tally:
    """What one request did, for the statistics."""

    hits: int = 0
    misses: int = 0
    joined: int = 0
    prefetch_reads: int = 0
    speculative_reads: int = 0
    prefetch_used: int = 0
    new: int = 0

    def items(self) -> list[tuple[str, int]]:
        """The counters that moved, by their statistics names."""
        pairs = (
            ("hits", self.hits), ("misses", self.misses), ("joined", self.joined),
            ("prefetch_reads", self.prefetch_reads), ("prefetch_used", self.prefetch_used),
            ("speculative_reads", self.speculative_reads),
        )
        return [(name, n) for name, n in pairs if n]


class ReadTable:
    """Reads in flight by key, a priority heap, channel generations and running counts."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._reads: dict[ChunkRequest, Read] = {}
        #: queued reads by lane, each a heap ordered by (priority, arrival)
        self._heaps: dict[Hashable, list[tuple[int, int, Read]]] = collections.defaultdict(list)
        self._seq = itertools.count()
        self._generations: dict[str, int] = {}
        #: queued reads by (source token, coalesce key), for batches
        self._groups: dict[tuple[str, Hashable], list[Read]] = {}
        #: chunks the prefetcher read that no one has used yet (prefetch_used accounting):
        #: when each read ended (``time.monotonic()``; inf while it runs)
        self.prefetched: dict[ChunkRequest, float] = {}
        #: per source token, how many of its prefetched chunks a reader used
        self.used_by_token: dict[str, int] = {}
        #: chunks one-pass readers asked for lately (they will not ask again), oldest first
        self.taken: collections.OrderedDict[ChunkRequest, None] = collections.OrderedDict()
        #: reads running (read slots taken), per lane; of them, guesses
        self.running: collections.Counter[Hashable] = collections.Counter()
        self.spec_running: collections.Counter[Hashable] = collections.Counter()
        #: VISIBLE reads queued or running, per lane (lower priorities wait for them)
        self.visible: collections.Counter[Hashable] = collections.Counter()
        #: called (outside the lock) when a VISIBLE read ends: background streams look again
        self.on_visible_end: Callable[[], None] | None = None
        #: until then the reader is catching up with the prefetch (it may run at full speed)
        self.catching_up_until = 0.0

    # -- generations -------------------------------------------------------------------------
    def owner(self, channel: str | None, generation: int | None) -> tuple[Owner | None, int]:
        """The owner of a request; a newer generation cancels older queued reads.

        Returns ``(owner, cancelled)``.
        """
        if channel is None:
            return None, 0
        with self.lock:
            now = self._generations.get(channel, -1)
            gen = now if generation is None else generation
            cancelled = 0
            if gen > now:
                self._generations[channel] = gen
                cancelled = self._cancel_older_locked(channel, gen)
            return (channel, gen), cancelled

    def cancel(self, channel: str, generation: int | None = None) -> int:
        """Move ``channel`` to ``generation`` (default: past every one so far); cancel the rest."""
        with self.lock:
            now = self._generations.get(channel, -1)
            gen = now + 1 if generation is None else generation
            if gen <= now:
                return 0
            self._generations[channel] = gen
            return self._cancel_older_locked(channel, gen)

    def _cancel_older_locked(self, channel: str, generation: int) -> int:
        cancelled = 0
        for read in list(self._reads.values()):
            if read.state != "queued" or not read.owners:
                continue
            stale = {o for o in read.owners if o[0] == channel and o[1] < generation}
            if not stale:
                continue
            read.owners -= stale
            if not read.owners and read.anonymous == 0 and read.priority != Priority.PLANNED:
                self._drop_locked(read, RequestCancelledError(f"chunk {read.index} superseded by a newer view"))
                cancelled += 1
        return cancelled

    def _drop_locked(self, read: Read, exc: BaseException) -> None:
        read.state = "cancelled"
        self._unvisible_locked(read)
        del self._reads[read.key]
        self._ungroup_locked(read)
        self.prefetched.pop(read.key, None)
        try:  # a read thread may finish it meanwhile (settle tolerates the other order)
            read.future.set_exception(exc)
        except cf.InvalidStateError:
            pass

    # -- admitting requests ------------------------------------------------------------------
    def note_taken(self, keys: Iterable[ChunkRequest]) -> None:
        """One-pass readers asked for ``keys``: guesses of them are refused from now on (see
        :meth:`admit`; noted before the reader's cached chunks leave the cache)."""
        with self.lock:
            taken = self.taken
            for key in keys:
                taken[key] = None
                taken.move_to_end(key)
            while len(taken) > TAKEN_MEMORY:
                taken.popitem(last=False)

    def admit(
        self,
        source: ChunkSource,
        lane: Hashable,
        keys: list[ChunkRequest],
        priority: Priority,
        owner: Owner | None,
        cache: bool,
        tally: Tally,
        cached: Callable[[ChunkRequest], Any] | None = None,
        skip_taken: bool = False,
    ) -> dict[ChunkRequest, Any]:
        """The read of each key (:class:`Admitted`): joined when in flight (a part: also
        when its whole chunk's read is running), else queued anew.

        ``cached`` (the cache's ``get``): a key no read holds is looked up there again under
        the table's lock and its value returned instead of a read (a read that ended after
        the caller's own look-up put it there before it left the table). ``skip_taken``
        (guesses for a one-pass reader): keys whose whole chunk a one-pass reader took
        (:meth:`note_taken`) are left out. Both are decided under the same lock as every
        admission, so no guess re-reads a chunk a one-pass reader has had.
        """
        waiting = priority is not Priority.SPECULATIVE
        reads: dict[ChunkRequest, Any] = {}
        with self.lock:
            for key in keys:
                read = self._reads.get(key)
                if read is None and key.part is not WHOLE:  # a part joins its whole chunk's
                    read = self._reads.get(key.whole)  # read once it runs (else it is quicker)
                    if read is not None and read.state != "running":
                        read = None
                if read is not None and read.state in ("queued", "running"):
                    # (a part that joins its whole chunk's read keeps the chunk for the views
                    # that follow)
                    self._join_locked(read, priority, cache or read.key != key, tally)
                else:
                    if skip_taken and key.whole in self.taken:
                        continue
                    value = None if cached is None else cached(key)
                    if value is not None:
                        reads[key] = value
                        continue
                    read = self._queue_locked(source, lane, key, priority, cache, tally)
                if owner is not None:
                    read.owners.add(owner)
                elif waiting:
                    read.anonymous += 1
                reads[key] = Admitted(read, read.future)
        return reads

    def _join_locked(self, read: Read, priority: Priority, cache: bool, tally: Tally) -> None:
        if priority is not Priority.SPECULATIVE:  # (the prefetcher asking again changes nothing)
            if cache:
                read.keep, read.prefetch_only = True, False
                read.kept_at = time.monotonic()
            elif read.prefetch_only:
                read.keep = False  # read ahead for this one-pass reader only
            if read.priority is Priority.SPECULATIVE:
                self.catch_up()
            tally.joined += 1
            if read.key in self.prefetched:
                del self.prefetched[read.key]
                self._used_locked(read.key)
                tally.prefetch_used += 1
        if priority < read.priority:
            read.priority = priority
            self._count_visible_locked(read)
            if read.state == "queued":
                heapq.heappush(self._heaps[read.lane], (int(priority), next(self._seq), read))

    def _queue_locked(
        self, source: ChunkSource, lane: Hashable, key: ChunkRequest, priority: Priority, cache: bool,
        tally: Tally,
    ) -> Read:
        read = Read(key, source, key.index, priority, lane)
        read.keep = cache
        if cache:
            read.kept_at = time.monotonic()
        read.prefetch_only = priority is Priority.SPECULATIVE
        if source.max_batch > 1 and key.part is WHOLE:  # parts and stored bytes run alone
            read.group = source.batch_key(read.index)
            if read.group is not None:
                self._groups.setdefault((key.array, read.group), []).append(read)
        self._reads[key] = read
        self._count_visible_locked(read)
        heapq.heappush(self._heaps[lane], (int(priority), next(self._seq), read))
        tally.new += 1
        if priority is Priority.VISIBLE:
            tally.misses += 1
        else:
            tally.prefetch_reads += 1
            if priority is Priority.SPECULATIVE:
                self.prefetched[key] = math.inf
                tally.speculative_reads += 1
        return read

    def _count_visible_locked(self, read: Read) -> None:
        if read.priority is Priority.VISIBLE and not read.visible:
            read.visible = True
            self.visible[read.lane] += 1

    def _unvisible_locked(self, read: Read) -> bool:
        """Stop counting ``read`` as VISIBLE; returns whether it was."""
        if not read.visible:
            return False
        read.visible = False
        self.visible[read.lane] -= 1
        return True

    def visible_active(self) -> bool:
        """Whether VISIBLE reads are queued or running (read without the lock: a hint)."""
        return any(self.visible.values())

    def release(self, keys: Iterable[ChunkRequest], before: float) -> None:
        """Reads of ``keys`` in flight are not kept when they end (their waiters still get
        them): a steady pattern passed them while they were read, by ``before`` (a
        ``time.monotonic`` time). A read a reader asked to keep since then stays kept, as
        does one a reader joining later asks to keep (:meth:`_join_locked`)."""
        with self.lock:
            for key in keys:
                read = self._reads.get(key)
                if read is not None and read.kept_at < before:
                    read.keep = False

    def get(self, key: ChunkRequest) -> Read | None:
        """The read of ``key`` queued or running, or None."""
        with self.lock:
            read = self._reads.get(key)
            return read if read is not None and read.state in ("queued", "running") else None

    def reading(self, key: ChunkRequest) -> bool:
        """Whether ``key`` is queued or running, read without the lock: a hint for guesses
        (only queued and running reads are in the table)."""
        return key in self._reads

    def catch_up(self) -> None:
        """A reader is at the chunks being read ahead: the prefetch may run at full speed for
        the next :data:`CATCH_UP_SECONDS` (the engine's ``speculative_cap``)."""
        self.catching_up_until = time.monotonic() + CATCH_UP_SECONDS

    def take_prefetched(self, key: ChunkRequest) -> bool:
        """Whether ``key`` was read ahead and is now used (counted once)."""
        return self.take_prefetched_at(key) is not None

    def take_prefetched_at(self, key: ChunkRequest) -> float | None:
        """When the read ahead of ``key`` ended (inf: it had not), now that it is used
        (counted once); None when ``key`` was not read ahead."""
        if key not in self.prefetched:
            return None
        with self.lock:
            ended = self.prefetched.pop(key, None)
            if ended is not None:
                self._used_locked(key)
            return ended

    def prefetch_ended(self, key: ChunkRequest) -> None:
        """The read ahead of ``key`` ended and was kept: its value waits in the cache."""
        if key not in self.prefetched:  # most reads are not reads ahead: no lock for them
            return
        with self.lock:
            if key in self.prefetched:
                self.prefetched[key] = time.monotonic()

    def unprefetched(self, key: ChunkRequest) -> None:
        """``key``'s read ahead left nothing to use (not kept)."""
        if key not in self.prefetched:
            return
        with self.lock:
            self.prefetched.pop(key, None)

    def _used_locked(self, key: ChunkRequest) -> None:
        token = key.array
        self.used_by_token[token] = self.used_by_token.get(token, 0) + 1

    # -- dispatch ----------------------------------------------------------------------------
    def take_runnable(self, limit: Callable[[Hashable], int], spec_limit: Callable[[Hashable], int],
                      hold_below_visible: bool = True) -> list[list[Read]]:
        """Pop the reads that may start now (highest priority first) and mark them running;
        each comes with its companions (see the module docstring): a list of batches.

        ``hold_below_visible``: no PLANNED or SPECULATIVE read of a kind starts while a VISIBLE
        read of that kind is queued or running (the visible reads get the CPU and the link;
        the others start when the last one ends, see :meth:`finish`)."""
        out: list[list[Read]] = []
        running, spec_running = self.running, self.spec_running
        with self.lock:
            for lane, heap in self._heaps.items():
                if not heap:
                    continue
                most, spec_most = limit(lane), spec_limit(lane)
                while heap and running[lane] < most:
                    prio, _, read = heap[0]
                    if read.state != "queued" or prio != int(read.priority):
                        heapq.heappop(heap)  # cancelled, or queued again at a higher priority
                        continue
                    if hold_below_visible and read.priority is not Priority.VISIBLE and self.visible[lane]:
                        break  # the heap is ordered: VISIBLE reads are running, the rest waits
                    speculative = read.priority is Priority.SPECULATIVE
                    if speculative and spec_running[lane] >= spec_most:
                        break  # the heap is ordered: only prefetch reads remain
                    heapq.heappop(heap)
                    read.state = "running"
                    running[lane] += 1
                    if speculative:
                        read.speculative_slot = True
                        spec_running[lane] += 1
                    out.append(self._batch_locked(read))
        return out

    def _batch_locked(self, head: Read) -> list[Read]:
        """``head`` and the queued reads of its group and priority that ride along."""
        if head.group is None:
            return [head]
        gkey = (head.key.array, head.group)
        members = self._groups.get(gkey, ())
        batch = [head]
        room = max(1, head.source.max_batch) - 1
        rest = []
        for read in members:
            if read is head or read.state != "queued":
                continue
            if room and read.priority == head.priority:
                read.state = "running"
                read.companion = True
                batch.append(read)
                room -= 1
            else:
                rest.append(read)
        if rest:
            self._groups[gkey] = rest
        else:
            self._groups.pop(gkey, None)
        return batch

    def claim(self, reads: Iterable[Read]) -> list[Read]:
        """Take queued ``reads`` to run in the caller's thread: those still queued are
        running from now on, without a slot (returned); the others are running elsewhere."""
        out = []
        with self.lock:
            for read in reads:
                if read.state == "queued":
                    read.state = "running"
                    read.companion = True
                    out.append(read)
                    self._ungroup_locked(read)
        return out

    def _ungroup_locked(self, read: Read) -> None:
        """``read`` no longer waits in its batch group."""
        if read.group is None:
            return
        gkey = (read.key.array, read.group)
        members = [r for r in self._groups.get(gkey, ()) if r is not read]
        if members:
            self._groups[gkey] = members
        else:
            self._groups.pop(gkey, None)

    def settle(self, read: Read, result: Any = None, exc: BaseException | None = None) -> None:
        """A running read ended: free its slot (a companion has none), forget it, and hand
        its waiters ``result`` or ``exc`` (from any thread; a future the closing engine
        already failed stays failed). The last VISIBLE read of its kind to end lets the held
        background reads start (``on_visible_end``)."""
        lane = read.lane
        with self.lock:
            ended = self._unvisible_locked(read) and not self.visible[lane]
            if not read.companion:
                self.running[lane] -= 1
                if read.speculative_slot:
                    self.spec_running[lane] -= 1
                    read.speculative_slot = False
            if self._reads.get(read.key) is read:
                del self._reads[read.key]
            read.state = "done"
        if ended and self.on_visible_end is not None:
            self.on_visible_end()
        # the read lets go of its future before the waiters wake: a reader that then holds
        # the future alone may take the value over (``array._taken``: by its references)
        future, read.future = read.future, _ENDED
        try:
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(result)
        except cf.InvalidStateError:
            pass

    # -- introspection and shutdown ----------------------------------------------------------
    def queued(self) -> dict[str, int]:
        counts = {p.name.lower(): 0 for p in Priority}
        with self.lock:
            for read in self._reads.values():
                if read.state == "queued":
                    counts[read.priority.name.lower()] += 1
        return counts

    def in_flight_keys(self) -> set[ChunkRequest]:
        with self.lock:
            return {k for k, r in self._reads.items() if r.state in ("queued", "running")}

    def running_total(self) -> int:
        with self.lock:
            return sum(self.running.values())

    def clear(self) -> list[Read]:
        """Forget every read (the engine closes); returns them."""
        with self.lock:
            reads = list(self._reads.values())
            self._reads.clear()
            for heap in self._heaps.values():
                heap.clear()
            self._groups.clear()
            self.visible.clear()
        return reads
