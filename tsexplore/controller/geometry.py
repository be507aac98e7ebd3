"""Pyramid levels for a view: which level fits the screen, and what to read, coarse first.

Pure functions of geometry (no I/O), property-tested. Everything is in **level-0 index
coordinates**, the controller's convention: pixel ``i`` of level 0 spans ``[i - 0.5, i + 0.5]``;
an *extent* is ``((y_lo, y_hi), (x_lo, x_hi))`` of such edges. Pixel ``j`` of a coarser level
is centred at level-0 index ``offset + j * factor`` and spans ``factor`` level-0 pixels (a
2 x 2 block mean has ``factor = 2, offset = 0.5``).

- :func:`choose_level`: the coarsest level that still has at least ``min_density`` of its
  pixels per screen pixel (so nothing is upsampled), level 0 when zoomed in further;
- :func:`overview_plan`: the steps to paint a view: first a coarser level that is ready
  (all its chunks cached) or cheap (few chunks), then the chosen level's chunks, nearest the
  middle of the view first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import ConfigError

Range = tuple[float, float]
Extent = tuple[Range, Range]
Region = tuple[tuple[int, int], tuple[int, int]]  # ((i0, i1), (j0, j1)) half-open, level pixels
Chunk = tuple[int, int]


@dataclass(frozen=True)
class LevelGeometry:
    """The plane (y, x) of one level: its shape, chunk shape, and place in level 0."""

    shape: tuple[int, int]
    chunks: tuple[int, int]
    factor: tuple[float, float] = (1.0, 1.0)
    offset: tuple[float, float] = (0.0, 0.0)

    def __post_init__(self) -> None:
        if min(self.chunks) < 1 or min(self.shape) < 0 or min(self.factor) <= 0:
            raise ConfigError(f"a level needs positive chunks and factors, got {self}")

    def to_level(self, extent: Extent) -> Extent:
        """``extent`` (level-0 edges) in this level's index coordinates."""
        return tuple(  # type: ignore[return-value]
            ((lo - o) / f, (hi - o) / f) for (lo, hi), f, o in zip(extent, self.factor, self.offset))

    def to_base(self, extent: Extent) -> Extent:
        """An extent in this level's index coordinates, in level-0 coordinates."""
        return tuple(  # type: ignore[return-value]
            (o + lo * f, o + hi * f) for (lo, hi), f, o in zip(extent, self.factor, self.offset))

    def region(self, extent: Extent) -> Region:
        """The pixels of this level that ``extent`` touches (clipped to the plane; may be empty)."""
        out = []
        for (lo, hi), n in zip(self.to_level(extent), self.shape):
            i0 = max(0, min(n, math.floor(lo + 0.5)))
            i1 = max(i0, min(n, math.ceil(hi + 0.5)))
            out.append((i0, i1))
        return (out[0], out[1])

    def chunks_in(self, region: Region) -> list[Chunk]:
        """The chunks of this level that hold ``region``, in C order."""
        (i0, i1), (j0, j1) = region
        if i1 <= i0 or j1 <= j0:
            return []
        cy, cx = self.chunks
        return [(a, b) for a in range(i0 // cy, (i1 - 1) // cy + 1)
                for b in range(j0 // cx, (j1 - 1) // cx + 1)]

    def chunk_region(self, chunk: Chunk) -> Region:
        """The pixels of this level in ``chunk`` (trimmed at the plane's edge)."""
        (a, b), (cy, cx) = chunk, self.chunks
        return ((a * cy, min(self.shape[0], (a + 1) * cy)), (b * cx, min(self.shape[1], (b + 1) * cx)))

    def region_extent(self, region: Region) -> Extent:
        """Level-0 edges of ``region``: where to draw its pixels."""
        (i0, i1), (j0, j1) = region
        return self.to_base(((i0 - 0.5, i1 - 0.5), (j0 - 0.5, j1 - 0.5)))

    def density(self, extent: Extent, screen: tuple[int, int]) -> float:
        """This level's pixels per screen pixel for ``extent`` shown on ``screen`` (h, w)."""
        (ylo, yhi), (xlo, xhi) = extent
        h, w = max(1, int(screen[0])), max(1, int(screen[1]))
        return max((yhi - ylo) / self.factor[0] / h, (xhi - xlo) / self.factor[1] / w)


def _check(levels: Sequence[LevelGeometry]) -> None:
    if not levels:
        raise ConfigError("no levels given")
    for a, b in zip(levels, levels[1:]):
        if b.factor[0] < a.factor[0] or b.factor[1] < a.factor[1]:
            raise ConfigError(f"levels must go from fine to coarse; factors {a.factor} then {b.factor}")


def choose_level(levels: Sequence[LevelGeometry], extent: Extent, screen: tuple[int, int],
                 min_density: float = 1.0) -> int:
    """The coarsest level with at least ``min_density`` pixels per screen pixel (0 if none)."""
    _check(levels)
    best = 0
    for k, lev in enumerate(levels):
        if lev.density(extent, screen) >= min_density * (1 - 1e-9):
            best = k
    return best


@dataclass(frozen=True)
class PlanStep:
    """Read ``chunks`` of ``level`` (in this order) to paint ``region`` of it."""

    level: int
    region: Region
    chunks: tuple[Chunk, ...]
    cached: tuple[bool, ...]  # per chunk: already in the cache when planned

    @property
    def reads(self) -> int:
        return sum(not c for c in self.cached)


@dataclass(frozen=True)
class OverviewPlan:
    """What to paint, coarse first: ``steps[-1]`` is the ``target`` level for the screen."""

    target: int
    steps: tuple[PlanStep, ...]

    @property
    def reads(self) -> int:
        return sum(s.reads for s in self.steps)


def _step(levels: Sequence[LevelGeometry], k: int, extent: Extent,
          cached: Callable[[int, Chunk], bool]) -> PlanStep:
    lev = levels[k]
    region = lev.region(extent)
    (ylo, yhi), (xlo, xhi) = lev.to_level(extent)
    cy, cx = (ylo + yhi) / 2, (xlo + xhi) / 2

    def distance(chunk: Chunk) -> tuple[float, Chunk]:
        (i0, i1), (j0, j1) = lev.chunk_region(chunk)
        return (math.hypot((i0 + i1 - 1) / 2 - cy, (j0 + j1 - 1) / 2 - cx), chunk)

    chunks = tuple(sorted(lev.chunks_in(region), key=distance))
    return PlanStep(k, region, chunks, tuple(bool(cached(k, c)) for c in chunks))


def overview_plan(levels: Sequence[LevelGeometry], extent: Extent, screen: tuple[int, int], *,
                  cached: Callable[[int, Chunk], bool] | None = None, min_density: float = 1.0,
                  quick_chunks: int = 4) -> OverviewPlan:
    """The steps that paint ``extent`` on ``screen``: the chosen level's chunks (nearest the
    middle first), preceded -- when they are not all cached -- by the finest coarser level
    that is all cached, or else by the finest coarser level needing at most
    ``quick_chunks`` reads (a quick first picture). ``cached(level, chunk)`` says what the
    cache holds (default: nothing)."""
    is_cached = cached or (lambda _k, _c: False)
    target = choose_level(levels, extent, screen, min_density)
    last = _step(levels, target, extent, is_cached)
    if last.reads == 0 or last.reads <= quick_chunks:
        return OverviewPlan(target, (last,))
    coarser = [_step(levels, k, extent, is_cached) for k in range(target + 1, len(levels))]
    first = next((s for s in coarser if s.reads == 0 and s.chunks), None)
    if first is None:
        first = next((s for s in coarser if s.reads <= quick_chunks and s.chunks), None)
    return OverviewPlan(target, (last,) if first is None else (first, last))
