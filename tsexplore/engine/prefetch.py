"""Prefetch policies learned from the access history (no flags from the user).

- *momentum*: the last reads moved one way along one axis -> read ahead along it: velocity x
  (2 x a slab's read latency + 0.1 s) + one chunk, within half the cache headroom and
  ``max_slabs`` (``local_ahead_bytes`` for local stores). A remote store whose views read parts
  of chunks gets the next *views* as parts (at most ``max_views``) and the slabs ahead as
  stored bytes; otherwise the chunks of the slabs ahead are read whole. A steady pattern
  releases the chunks it has passed from the decoded tier (:meth:`Prefetcher._release_passed`).
- *neighbourhood*: the view moved along two or more axes (pan / zoom) -> the ring of chunks
  around the visible chunk box on the moving axes.
- *plan*: reductions and loaders announce their order through ``Engine.stream`` (PLANNED).

Every guess must be earned (:mod:`.guesses`): on access without a pattern the prefetcher falls
silent, and a steady pattern brings it back (:func:`steady_steps`). ``prefetch="off"`` disables
the first two. What to fetch is a pure function (:func:`momentum_targets`, :func:`ring_targets`,
:func:`shifted_keys`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import math
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple, Protocol, cast

import numpy as np

from ..sources.base import ChunkIndex, ChunkSource
from .cache import ChunkCache
from .guesses import Guesses
from .hints import ReadAheadMemory
from .parts import plan_requests
from .planning import SelectionPlan, memo_key, normalize_key, plan_selection
from .types import STORED, WHOLE, ChunkRequest, Priority

#: equal steps the same way that make a pattern steady: one guess is always allowed then,
#: and a whole view's worth (or slab's) after one more
STEADY = 3
#: equal steps of one element (a slider's arrow key, play) that make a pattern steady at once:
#: random jumps almost never make two in a row
UNIT_STEADY = 2
#: a move of more than this many chunks is a jump: a run of jumps is a pattern only when the
#: jumps are equal (paging at a stride), not merely alike (random jumps often are)
JUMP_CHUNKS = 4
#: seconds the engine's thread waits after a read answered from the cache before it plans from
#: the reads answered meanwhile: one wake-up for all of them (each keeps the time it was
#: answered); a drain takes the GIL from the reader, and read-ahead horizons are 100 ms and more
DRAIN_DELAY = 0.01
#: chunks a bounded reader took that its guesses leave out: the latest this many
TAKEN_KEPT = 1 << 16


class Within:
    """What a bounded reader (a reduction over a selection) announced: the chunk box its
    reads stay in, and the chunks it has read lately (it reads each once: a guess of one it
    took is decoded for nobody, even when the pattern it reads in points back at it). The
    memory of them is bounded (:data:`TAKEN_KEPT`): a reduction may read millions."""

    __slots__ = ("ranges", "taken")

    def __init__(self, ranges: tuple[tuple[int, int], ...]) -> None:
        self.ranges = ranges
        self.taken: collections.OrderedDict[ChunkIndex, None] = collections.OrderedDict()

    def take(self, indices: Iterable[ChunkIndex]) -> None:
        taken = self.taken
        for index in indices:
            taken[index] = None
        while len(taken) > TAKEN_KEPT:
            taken.popitem(last=False)

    def admits(self, index: ChunkIndex) -> bool:
        return index not in self.taken and all(lo <= i <= hi for i, (lo, hi) in zip(index, self.ranges))


#: :meth:`Prefetcher.observe`'s default bounds: the source's at the time of the call
NOW = object()
#: views a source's history keeps (the momentum and neighbourhood patterns look at the last few)
HISTORY = 8
#: the allowance each policy starts with (momentum earns its own; a pan is a clear signal)
INITIAL_ALLOWANCE = {"momentum": 0, "neighbourhood": 64}


class PrefetchHost(Protocol):
    """What the prefetcher needs from the engine, and nothing more."""

    cache: ChunkCache
    hints: ReadAheadMemory

    @property
    def closed(self) -> bool: ...
    def slab_latency(self, source: ChunkSource, nchunks: int) -> float: ...
    def call_soon(self, fn: Any, *args: Any) -> None: ...
    def submit(self, source: ChunkSource, requests: list[ChunkRequest], priority: Priority = ..., *,
               channel: str | None = ..., generation: int | None = ..., skip_taken: bool = ...) -> list[Any]: ...
    def catch_up(self) -> None: ...
    def paced(self, source: ChunkSource) -> bool: ...


class Observation(NamedTuple):
    """One read, as the prefetcher learns from it (one per read answered: a named tuple)."""

    time: float
    lo: tuple[int, ...]  # first element selected along each axis
    ranges: tuple[tuple[int, int], ...]  # first/last chunk touched along each axis
    extent: tuple[int, ...] = ()  # elements selected along each axis (the view's size)


def similar_views(a: Observation, b: Observation) -> bool:
    """Whether two views are about the same size (a pan or a zoom step, not a jump from
    one kind of view to another, such as a frame to a pixel's profile)."""
    if not a.extent or not b.extent:
        return True
    return all(max(x, y) <= 2 * max(1, min(x, y)) for x, y in zip(a.extent, b.extent))


def momentum_targets(
    history: list[Observation],
    grid: tuple[int, ...],
    chunks: tuple[int, ...],
    slab_latency: float,
    max_slabs: int,
) -> tuple[int, int, list[ChunkIndex]] | None:
    """Chunks to read ahead when the last moves went one way along one axis.

    Returns ``(axis, direction, indices)`` in the order they will be needed, or None.
    """
    if len(history) < 3:
        return None
    a, b, c = history[-3:]
    d1 = [y - x for x, y in zip(a.lo, b.lo)]
    d2 = [y - x for x, y in zip(b.lo, c.lo)]
    moved1 = [i for i, d in enumerate(d1) if d]
    moved2 = [i for i, d in enumerate(d2) if d]
    if len(moved2) != 1 or moved1 != moved2:
        return None
    axis = moved2[0]
    direction = 1 if d2[axis] > 0 else -1
    if (d1[axis] > 0) != (direction > 0):
        return None
    if abs(d1[axis]) != abs(d2[axis]) and (_jumps(a, b, axis) or _jumps(b, c, axis)):
        return None  # jumps that are not equal: random, not paging
    # velocity over the run of same-direction moves
    run = [c]
    for obs in reversed(history[:-1]):
        step = run[-1].lo[axis] - obs.lo[axis]
        if step * direction <= 0 or any(
            o != r for k, (o, r) in enumerate(zip(obs.lo, run[-1].lo)) if k != axis
        ):
            break
        run.append(obs)
    dt = max(run[0].time - run[-1].time, 1e-3)
    velocity = abs(run[0].lo[axis] - run[-1].lo[axis]) / dt
    clen = chunks[axis]
    depth = velocity * (2 * slab_latency + 0.1) + clen
    nslabs = max(1, min(max_slabs, math.ceil(depth / clen)))
    first, last = c.ranges[axis]
    start = last + 1 if direction > 0 else first - 1
    along = [start + direction * k for k in range(nslabs)]
    along = [i for i in along if 0 <= i < grid[axis]]
    others = [range(lo, hi + 1) for lo, hi in c.ranges]
    out: list[ChunkIndex] = []
    for i in along:
        others[axis] = range(i, i + 1)
        out.extend(itertools.product(*others))
    return axis, direction, out


def ring_targets(obs: Observation, axes: Iterable[int], grid: tuple[int, ...]) -> list[ChunkIndex]:
    """The ring of chunks one step outside the visible chunk box along ``axes``."""
    axes = set(axes)
    spans = []
    for k, (lo, hi) in enumerate(obs.ranges):
        if k in axes:
            spans.append(range(max(0, lo - 1), min(grid[k] - 1, hi + 1) + 1))
        else:
            spans.append(range(lo, hi + 1))
    inside = obs.ranges
    return [
        idx
        for idx in itertools.product(*spans)
        if any(not lo <= i <= hi for i, (lo, hi) in zip(idx, inside))
    ]


def steady_steps(history: list[Observation]) -> int:
    """How many of the last moves were the same step, give or take a factor of two, the same
    way along one axis (random jumps rarely make two; play and scans make them all)."""
    if len(history) < 2:
        return 0
    last = [y - x for x, y in zip(history[-2].lo, history[-1].lo)]
    moved = [i for i, d in enumerate(last) if d]
    if len(moved) != 1:
        return 0
    axis = moved[0]
    ref = abs(last[axis])
    jumped = _jumps(history[-2], history[-1], axis)
    n = 0
    for a, b in zip(reversed(history[:-1]), reversed(history[1:])):
        d = [y - x for x, y in zip(a.lo, b.lo)]
        if any(v for i, v in enumerate(d) if i != axis) or d[axis] * last[axis] <= 0:
            break
        if not ref / 2 <= abs(d[axis]) <= 2 * ref:
            break
        if abs(d[axis]) != ref and (jumped or _jumps(a, b, axis)):
            break
        n += 1
    return n


def _jumps(a: Observation, b: Observation, axis: int) -> bool:
    """Whether the move from view ``a`` to view ``b`` crosses more than :data:`JUMP_CHUNKS`
    chunks along ``axis``."""
    return abs(b.ranges[axis][0] - a.ranges[axis][0]) > JUMP_CHUNKS


def shifted_keys(
    key: tuple[object, ...], shape: tuple[int, ...], axis: int, step: int, n: int
) -> list[tuple[object, ...]]:
    """The selection ``key`` moved on by ``step``, ``2 step``, ... ``n step`` along ``axis``
    (the views play will show next), as long as they stay inside the array; empty when the
    indexer on ``axis`` cannot move (an index array, a negative step)."""
    key = normalize_key(key, len(shape))
    k = key[axis]
    size = shape[axis]
    out = []
    for i in range(1, n + 1):
        d = step * i
        if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            pos = int(k) + (size if int(k) < 0 else 0) + d
            if not 0 <= pos < size:
                break
            moved: object = pos
        elif isinstance(k, slice):
            start, stop, stride = k.indices(size)
            if stride <= 0 or not (0 <= start + d and stop + d <= size):
                break
            moved = slice(start + d, stop + d, stride)
        else:
            break
        out.append(key[:axis] + (moved,) + key[axis + 1 :])
    return out


def _first(source: ChunkSource, plan: SelectionPlan) -> tuple[int, ...] | None:
    """The first position a read of ``plan`` takes per axis (None: prefetch off, an empty
    selection): what tells one view from the next."""
    if source.options.prefetch == "off" or not plan.dims or any(not d.pieces for d in plan.dims):
        return None
    lo = []
    for d, clen in zip(plan.dims, source.chunks):
        ci, sel, _ = d.pieces[0]
        first = sel.start if isinstance(sel, slice) else int(sel[0])
        lo.append(ci * clen + first)
    return tuple(lo)


def _kept(reads: list[tuple[ChunkSource, SelectionPlan, float]]) -> list[tuple[str, Observation]]:
    """The observations of a batch of reads (each with the time it was answered) that a
    history of :data:`HISTORY` views keeps: per source, those from the start of its last
    ``HISTORY`` distinct views on (a view read again right after itself adds nothing). A
    reader answered from the cache queues a batch of tens between two drains; only the last
    few can stay."""
    views: dict[str, tuple[int, object]] = {}  # per source: distinct views seen, the last
    out = []
    for source, plan, when in reversed(reads):
        token = source.token
        seen, last = views.get(token, (0, None))
        if seen > HISTORY:
            continue
        lo = _first(source, plan)
        if lo is None:
            continue  # nothing to record
        if lo != last:
            seen += 1
            views[token] = (seen, lo)
            if seen > HISTORY:
                continue
        out.append((token, Observation(when, lo, plan.chunk_ranges(), plan.block_shape)))
    return out[::-1]


class Prefetcher:
    """Watches VISIBLE reads per source and queues SPECULATIVE ones."""

    #: read ahead at most: a remote store's slabs; a local store's bytes, at least one slab
    #: (its reads take milliseconds, and each slab ahead is decoded memory the view does not
    #: need yet: a slab of deep chunks is tens of MiB, a slab of one-frame chunks a frame)
    max_slabs = 4
    local_ahead_bytes = 64 << 20
    min_chunks_ahead = 16
    max_views = 16

    def __init__(self, engine: PrefetchHost) -> None:
        self._engine = engine
        self._lock = threading.Lock()
        self._history: dict[str, deque[Observation]] = {}
        self._mode: dict[str, tuple[object, ...]] = {}
        self._gen_for: dict[str, int] = {}
        self._generation = itertools.count()
        self._guesses: dict[tuple[str, str], Guesses] = {}
        #: per source, the plans of views read ahead lately (a view is planned once)
        self._plans: dict[str, collections.OrderedDict[Any, list[ChunkRequest]]] = {}
        self.last_policy: dict[str, str] = {}
        #: per source, where a steady pattern's release of passed chunks stopped:
        #: ``(axis, direction, chunk index, reads recorded by then)``
        self._passed: dict[str, tuple[int, int, int, int]] = {}
        #: per source, the reads recorded (more than its history keeps)
        self._recorded: collections.Counter[str] = collections.Counter()
        #: per source, what a bounded reader announced (guesses stay in its box)
        self._bounds: dict[str, Within] = {}

        #: reads answered from the cache, waiting for :meth:`_drain` on the engine's thread,
        #: each with the bounds its source had when it was answered
        self._pending: list[tuple[ChunkSource, SelectionPlan, bool, Any, float, Within | None]] = []
        self._draining = False  # a drain is scheduled on the engine's thread

    @contextlib.contextmanager
    def bounded(self, source: ChunkSource, ranges: tuple[tuple[int, int], ...]) -> Iterator[None]:
        """While inside, guesses of ``source``'s chunks stay within ``ranges`` (first, last
        chunk per axis) and leave out the chunks read inside: a reduction over a selection
        announces where its reads end, and reads each chunk once."""
        with self._lock:
            self._bounds[source.token] = Within(tuple(ranges))
        try:
            yield
        finally:
            with self._lock:
                self._bounds.pop(source.token, None)
                # reads answered inside and not planned from yet would plan unbounded
                self._pending = [read for read in self._pending if read[0].token != source.token]

    def following(self, source: ChunkSource) -> bool:
        """Whether the views of ``source`` move along a pattern the prefetcher follows."""
        return self._mode.get(source.token, ("none",))[0] == "momentum"

    def guesses(self, source: ChunkSource, policy: str) -> Guesses:
        """The record of ``source``'s guesses under ``policy`` ("momentum", "neighbourhood")."""
        with self._lock:
            found = self._guesses.get((source.token, policy))
            if found is None:
                found = self._guesses[(source.token, policy)] = Guesses(INITIAL_ALLOWANCE[policy])
            return found

    def observe_soon(
        self,
        source: ChunkSource,
        plan: SelectionPlan,
        one_pass: bool = False,
        key: tuple[object, ...] | None = None,
    ) -> None:
        """:meth:`observe` later, on the engine's thread (what a read answered from the cache
        calls). The thread plans :data:`DRAIN_DELAY` after the first pending read: reads that
        come faster share one wake-up of it (waking it costs the reader more than answering
        from the cache does), and only the newest pending read of a source plans; the ones
        before it are recorded in the history (the pattern is learnt from all of them)."""
        with self._lock:  # when it was answered, and within which bounds
            within = self._bounds.get(source.token)
            if within is not None:
                within.take(plan.indices)
            self._pending.append((source, plan, one_pass, key, time.monotonic(), within))
            if self._draining:
                return  # a drain is on its way
            self._draining = True
        self._engine.call_soon(self._drain_later)

    def _drain_later(self) -> None:
        asyncio.get_running_loop().call_later(DRAIN_DELAY, self._drain)

    def _drain(self) -> None:
        """Plan from the pending reads; while reads keep coming, the engine's thread comes
        back every :data:`DRAIN_DELAY` by itself (the readers wake it once per burst). A drain
        due while the engine closes does nothing."""
        if self._engine.closed:
            return
        with self._lock:
            batch, self._pending = self._pending, []
            self._draining = bool(batch)
        if batch:
            self._drain_later()
        newest = {item[0].token: item for item in batch}
        self._record_all([(i[0], i[1], i[4]) for i in batch if newest[i[0].token] is not i])
        for item in newest.values():
            self.observe(*item)

    def _flush(self) -> None:
        """Record the pending observations (older than the one being made) without planning."""
        if not self._pending:
            return
        with self._lock:
            batch, self._pending = self._pending, []
        self._record_all([(item[0], item[1], item[4]) for item in batch])

    def _record(
        self, source: ChunkSource, plan: SelectionPlan, when: float | None = None
    ) -> list[Observation] | None:
        """Add a read (answered at ``when``, default now) to ``source``'s history; the
        history, or None when there is nothing new to plan from (prefetch off, an empty
        selection, the same view again)."""
        return self._record_all([(source, plan, time.monotonic() if when is None else when)])

    def _record_all(
        self, reads: list[tuple[ChunkSource, SelectionPlan, float]]
    ) -> list[Observation] | None:
        """Add reads (each with the time it was answered: a momentum's speed is measured from
        them) to their sources' histories, in order, taking the lock once (a reader answered
        from the cache takes it per read to queue the next: measured, taking it per recorded
        read cost the engine's thread ~13 us a read in lock hand-offs); the history after the
        last read, or None when it brought nothing new to plan from."""
        found = _kept(reads)
        out = None
        with self._lock:
            recorded = self._recorded
            for source, _, _ in reads:  # every read, also those the history cannot keep
                recorded[source.token] += 1
            for token, obs in found:
                out = None
                hist = self._history.get(token)
                if hist is None:
                    hist = self._history[token] = deque(maxlen=HISTORY)
                if hist and hist[-1].lo == obs.lo:
                    continue  # the same view again: nothing new to learn
                hist.append(obs)
                out = hist
            return None if out is None else list(out)

    def observe(
        self,
        source: ChunkSource,
        plan: SelectionPlan,
        one_pass: bool = False,
        key: tuple[object, ...] | None = None,
        when: float | None = None,
        bounds: Within | None | object = NOW,
    ) -> list[ChunkIndex]:
        """Record a read and queue what the access pattern predicts; returns it.

        ``one_pass``: the reader reads each chunk once (dask tasks), so chunks that one-pass
        readers already took are not read ahead again. ``key``: the selection read (its next
        views are read ahead as parts when it read parts of chunks). ``when``: the time the
        read was answered (default now; a drain passes the time each read was queued).
        ``bounds``: what the reader announced (default: :meth:`bounded`'s now; a drain
        passes what each read was answered within, so a drain that plans while a bounded
        reduction ends still plans inside it).
        """
        if bounds is NOW:
            with self._lock:
                bounds = self._bounds.get(source.token)
                if bounds is not None:
                    cast(Within, bounds).take(plan.indices)
        self._flush()
        history = self._record(source, plan, when)
        if history is None:
            return []
        policy = source.options.prefetch
        engine = self._engine
        used, unused = engine.hints.guesses_used(source.token), engine.hints.guess_unused
        for name in INITIAL_ALLOWANCE:
            self.guesses(source, name).settle(used, unused)
        found = self._targets(source, policy, history, plan, key)
        if found is None:  # no pattern (now): nothing is followed, chunks are read by parts
            with self._lock:
                self._mode.pop(source.token, None)
            return []
        mode, targets, views, steady = found
        if mode[0] == "momentum" and steady:
            self._release_passed(source, history, mode[1], mode[2])  # type: ignore[arg-type]
        track = self.guesses(source, str(mode[0]))
        room = min(track.room(steady, unused), max(0, engine.cache.headroom // 2) // max(1, source.chunk_nbytes()))
        keys = self._select(source, track, targets, views, one_pass, room, cast("Within | None", bounds))
        if not keys:
            return []
        indices = [k.index for k in keys]
        with self._lock:
            if self._mode.get(source.token) != mode:
                self._mode[source.token] = mode
                self._gen_for[source.token] = next(self._generation)
            gen = self._gen_for.get(source.token, 0)
            self.last_policy[source.token] = str(mode[0])
        track.made(keys)
        if not source.is_async:  # local files to the page cache: this view's (read by parts until
            # the chunks ahead are cached) and those ahead
            here = list(itertools.product(*(range(lo, hi + 1) for lo, hi in history[-1].ranges)))
            engine.hints.advise(source, here + indices)
            if not set(here).isdisjoint(indices):  # the reader is on them now, reading by parts:
                engine.catch_up()  # the prefetch runs at full speed till it has passed them
        elif views is None:
            engine.hints.advise(source, indices)  # the store can start on all of them
        engine.submit(
            source, keys, Priority.SPECULATIVE, channel=f"prefetch:{source.token}",
            generation=gen, skip_taken=one_pass,
        )
        return indices

    def _release_passed(self, source: ChunkSource, history: list[Observation], axis: int, direction: int) -> None:
        """The chunks a steady pattern has passed along ``axis`` (behind this view, from where
        the last release stopped, or from where the run began) leave the decoded tier: their
        buffers decode what comes next instead of fresh memory (those still being read are
        not kept when they end: the reader caught up with them). What another reader put in
        the cache, or asked to keep, after this view was answered stays (a ``fetch`` made
        while the engine's thread had yet to plan from the view). A drain plans once for the
        views answered meanwhile (many, when chunks are one frame deep and the scrub is fast),
        so the release reaches back as far as those views moved -- at most two chunks a view:
        a jump leaves what it left, it may be visited again. Their stored bytes stay where
        they are: a local store's in the page cache, a remote store's frames in the encoded
        tier."""
        token = source.token
        first, last = history[-1].ranges[axis]
        now = first if direction > 0 else last
        steps = steady_steps(history)
        began = history[max(0, len(history) - 1 - steps)].ranges[axis][0 if direction > 0 else 1]
        with self._lock:
            recorded = self._recorded[token]
            mark = self._passed.get(token)
            self._passed[token] = (axis, direction, now, recorded)
        if abs(now - began) > 2 * max(1, steps):
            return  # the views jump (more than two chunks a step): what they left may be seen again
        if mark is not None and mark[:2] == (axis, direction):
            start, views = mark[2], recorded - mark[3]
        else:
            start, views = began, steps
        behind = range(start, now) if direction > 0 else range(now + 1, start + 1)
        if not behind or len(behind) > 2 * max(1, views):
            return
        spans = [range(a, b + 1) for a, b in history[-1].ranges]
        spans[axis] = behind
        self._engine.hints.release([ChunkRequest(token, i) for i in itertools.product(*spans)],
                                   history[-1].time)

    def _targets(
        self,
        source: ChunkSource,
        policy: str,
        history: list[Observation],
        plan: SelectionPlan,
        key: tuple[object, ...] | None,
    ) -> tuple[tuple[object, ...], list[ChunkIndex], list[list[ChunkRequest]] | None, int] | None:
        """What the pattern predicts: ``(mode, chunk targets, views as their requests or
        None, the guesses a steady pattern may always make)``, or None."""
        grid = source.grid_shape
        obs = history[-1]
        slab = math.prod(hi - lo + 1 for lo, hi in obs.ranges)
        if policy in ("auto", "momentum"):
            # small slabs (one chunk per dask task) may run further ahead: up to 16 chunks
            slabs = self.max_slabs if source.is_async else max(
                1, self.local_ahead_bytes // max(1, slab * source.chunk_nbytes()))
            most = max(slabs, math.ceil(self.min_chunks_ahead / slab))
            slab_latency = self._engine.slab_latency(source, slab)
            found = momentum_targets(history, grid, source.chunks, slab_latency, most)
            if found is not None:
                axis, direction, targets = found
                if not source.is_async and not self._engine.paced(source):
                    # the view's own chunks whole too: read by parts till then (a reader that
                    # paces its views has the next ones made by parts in its pauses instead)
                    targets = list(itertools.product(*(range(lo, hi + 1) for lo, hi in obs.ranges))) + targets
                run = steady_steps(history)
                if abs(obs.lo[axis] - history[-2].lo[axis]) == 1 and run >= UNIT_STEADY:
                    steady = slab
                else:
                    steady = 0 if run < STEADY else (1 if run == STEADY else slab)
                views = None
                if key is not None and source.is_async and any(
                        r.part is not WHOLE for r in plan_requests(plan, source)):
                    views = self._views(source, key, history, axis, slab_latency)
                if targets or views:
                    return ("momentum", axis, direction), targets, views, steady
        if policy in ("auto", "neighbourhood") and len(history) >= 2:
            moved = [k for k, (x, y) in enumerate(zip(history[-2].lo, obs.lo)) if x != y]
            if len(moved) >= 2 and similar_views(history[-2], obs):
                targets = ring_targets(obs, moved, grid)
                if targets:
                    steady = int(len(history) >= 3 and len(
                        [k for k, (x, y) in enumerate(zip(history[-3].lo, history[-2].lo)) if x != y]
                    ) >= 2)
                    return ("neighbourhood", tuple(moved)), targets, None, steady
        return None

    def _views(
        self,
        source: ChunkSource,
        key: tuple[object, ...],
        history: list[Observation],
        axis: int,
        latency: float,
    ) -> list[list[ChunkRequest]]:
        """The next views along ``axis`` as their requests, as many as the velocity needs
        over ``2 x latency + 0.1 s`` (at least one, at most ``max_views``)."""
        step = history[-1].lo[axis] - history[-2].lo[axis]
        dt = max(history[-1].time - history[-2].time, 1e-3)
        n = max(1, min(self.max_views, math.ceil((2 * latency + 0.1) / dt)))
        out = []
        memo = self._plans.setdefault(source.token, collections.OrderedDict())
        for moved in shifted_keys(key, source.shape, axis, step, n):
            name = memo_key(moved)
            found = memo.get(name) if name is not None else None
            if found is None:
                found = plan_requests(plan_selection(moved, source.shape, source.chunks), source)
                if name is not None:
                    memo[name] = found
                    if len(memo) > 4 * self.max_views:
                        memo.popitem(last=False)
            out.append(found)
        return out

    def _select(
        self,
        source: ChunkSource,
        track: Guesses,
        targets: list[ChunkIndex],
        views: list[list[ChunkRequest]] | None,
        one_pass: bool,
        room: int,
        bounds: Within | None,
    ) -> list[ChunkRequest]:
        """The guesses to make now: at most ``room``, none cached or already guessed, all
        admitted by ``bounds`` when given."""
        engine, cache = self._engine, self._engine.cache
        token = source.token
        named: Iterable[ChunkRequest]
        if views is None:
            named = (ChunkRequest(token, tuple(t)) for t in targets)
        else:  # the next views (as parts); the slabs ahead only as stored bytes (remote)
            named = itertools.chain.from_iterable(views)
            if source.is_async:
                named = itertools.chain(named, (ChunkRequest(token, tuple(t), STORED) for t in targets))
        keys: list[ChunkRequest] = []
        for key in named:  # made as needed: the scan stops once the room is used
            if len(keys) >= room:
                break
            if track.guessed(key) or (bounds is not None and not bounds.admits(key.index)):
                continue
            whole = key.whole
            if whole in cache or (key.part is not WHOLE and key in cache) or engine.hints.reading(key):
                continue
            if one_pass and engine.hints.recently_consumed(whole):
                continue
            keys.append(key)
        return keys
