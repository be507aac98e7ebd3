"""Prefetch policies learned from the access history (no flags from the user).

- *momentum*: the last reads moved along one axis in one direction -> read ahead along it.
  Depth (in elements) = velocity x (2 x fetch latency of one slab + 0.1 s) + one chunk,
  bounded by half the cache headroom and by ``max_slabs`` (or 16 chunks, for small slabs).
- *neighbourhood*: the view moved along two or more axes (pan / zoom) -> a ring of one chunk
  around the visible chunk box on the moving axes.
- *plan*: reductions and loaders announce their order through ``Engine.stream`` (PLANNED).

A source built with ``prefetch="off"`` (``source.options``) disables the first two. Choosing what to fetch is a pure
function (:func:`momentum_targets`, :func:`ring_targets`) that the tests call directly.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from ..sources.base import ChunkIndex, ChunkSource
from .cache import ChunkCache
from .planning import SelectionPlan
from .types import ChunkKey, Priority


class PrefetchHost(Protocol):
    """What the prefetcher needs from the engine, and nothing more."""

    cache: ChunkCache

    def key(self, source: ChunkSource, index: ChunkIndex) -> ChunkKey: ...

    def slab_latency(self, source: ChunkSource, nchunks: int) -> float: ...

    def recently_consumed(self, key: ChunkKey) -> bool: ...

    def advise(self, source: ChunkSource, indices: Iterable[ChunkIndex]) -> None: ...

    def request(
        self,
        source: ChunkSource,
        indices: Iterable[ChunkIndex],
        priority: Priority = ...,
        *,
        channel: str | None = ...,
        generation: int | None = ...,
    ) -> list[Any]: ...


@dataclass(frozen=True)
class Observation:
    time: float
    lo: tuple[int, ...]  # first element selected along each axis
    ranges: tuple[tuple[int, int], ...]  # first/last chunk touched along each axis


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


class Prefetcher:
    """Watches VISIBLE reads per source and queues SPECULATIVE ones."""

    max_slabs = 4
    min_chunks_ahead = 16

    def __init__(self, engine: PrefetchHost) -> None:
        self._engine = engine
        self._lock = threading.Lock()
        self._history: dict[str, deque[Observation]] = {}
        self._mode: dict[str, tuple[object, ...]] = {}
        self._gen_for: dict[str, int] = {}
        self._generation = itertools.count()
        self.last_policy: dict[str, str] = {}

    def observe(
        self, source: ChunkSource, plan: SelectionPlan, one_pass: bool = False
    ) -> list[ChunkIndex]:
        """Record a read and queue what the access pattern predicts; returns it.

        ``one_pass``: the reader reads each chunk once (dask tasks), so chunks that one-pass
        readers already took are not read ahead again.
        """
        policy = source.options.prefetch
        if policy == "off" or not plan.dims or any(not d.pieces for d in plan.dims):
            return []
        lo = []
        for d, clen in zip(plan.dims, source.chunks):
            ci, sel, _ = d.pieces[0]
            first = sel.start if isinstance(sel, slice) else int(sel[0])
            lo.append(ci * clen + first)
        obs = Observation(time.monotonic(), tuple(lo), plan.chunk_ranges())
        with self._lock:
            hist = self._history.setdefault(source.token, deque(maxlen=8))
            if hist and hist[-1].lo == obs.lo:
                return []  # the same view again: nothing new to learn
            hist.append(obs)
            history = list(hist)
        engine = self._engine
        grid = source.grid_shape
        per_chunk = max(1, source.chunk_nbytes())
        slab = math.prod(hi - lo + 1 for lo, hi in obs.ranges)
        slab_latency = engine.slab_latency(source, slab)
        targets: list[ChunkIndex] = []
        mode: tuple[object, ...] = ("none",)
        if policy in ("auto", "momentum"):
            # small slabs (one chunk per dask task) may run further ahead: up to 16 chunks
            most = max(self.max_slabs, math.ceil(self.min_chunks_ahead / slab))
            found = momentum_targets(history, grid, source.chunks, slab_latency, most)
            if found is not None:
                axis, direction, targets = found
                mode = ("momentum", axis, direction)
        if not targets and policy in ("auto", "neighbourhood") and len(history) >= 2:
            moved = [k for k, (x, y) in enumerate(zip(history[-2].lo, obs.lo)) if x != y]
            if len(moved) >= 2:
                targets = ring_targets(obs, moved, grid)
                mode = ("neighbourhood", tuple(moved))
        if not targets:
            return []
        cache = engine.cache
        room = max(0, cache.headroom // 2) // per_chunk
        todo = [
            t for t in targets
            if (key := engine.key(source, t)) not in cache
            and not (one_pass and engine.recently_consumed(key))
        ][:room]
        if not todo:
            return []
        with self._lock:
            if self._mode.get(source.token) != mode:
                self._mode[source.token] = mode
                self._gen_for[source.token] = next(self._generation)
            gen = self._gen_for.get(source.token, 0)
            self.last_policy[source.token] = str(mode[0])
        engine.advise(source, todo)  # the disk can start on all of them; reads go a few at a time
        engine.request(
            source, todo, Priority.SPECULATIVE, channel=f"prefetch:{source.token}", generation=gen
        )
        return todo
