"""Pyramid levels in a view (pure): which level to read, coarse first, and the tiles of a
progressive read.

A :class:`ViewLevel` is one level of a pyramid as the controller reads it: the level's array
(a whole source), its :class:`~tsexplore.controller.PlaneGeometry` (for :func:`resolve`) and its
:class:`~tsexplore.controller.geometry.LevelGeometry` (its place in level 0). Level 0 is the array the
view shows; view ranges are always in level-0 index coordinates.

- :func:`plan_view`: the reads that show a :class:`ViewState`: the level whose resolution
  matches the screen (:func:`~tsexplore.controller.geometry.choose_level`), preceded by a coarser
  level that is cached or cheap when the chosen one is not ready
  (:func:`~tsexplore.controller.geometry.overview_plan`), each as a :class:`ViewRequest` with its
  ``level`` and level-0 ``extent``; with one level it is exactly :func:`resolve`.
- :func:`tile_requests`: the chosen level's read cut into one request per chunk (the pieces
  painted as their chunks arrive), nearest the middle of the view first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ConfigError
from ..resolve import Resolved
from ..sources.base import ChunkIndex, ChunkSource
from .geometry import LevelGeometry, overview_plan
from .planning import Extent, PlaneGeometry, ViewRequest, ViewState, resolve

#: a chosen level needing at most this many reads is read at once, without a coarser picture first
QUICK_CHUNKS = 4


@dataclass(frozen=True)
class ViewLevel:
    """One level of a pyramid: its plane geometry, its place in level 0, and its array -- a
    selection given (``plane.selection``), or opened on first use by ``opener`` (a pyramid's
    coarse levels cost a store open each; a view opens only those it reads)."""

    plane: PlaneGeometry
    geometry: LevelGeometry
    opener: Callable[[], ChunkSource] | None = field(default=None, compare=False, repr=False)
    _opened: dict[str, Any] = field(default_factory=lambda: {"lock": threading.Lock()},
                                    compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.plane.selection is None and self.opener is None:
            raise ConfigError("a level needs its selection (plane.selection) or an opener")

    @classmethod
    def of(cls, data: ChunkSource | Resolved, ydim: str, xdim: str,
           factor: tuple[float, float] = (1.0, 1.0), offset: tuple[float, float] = (0.0, 0.0)) -> ViewLevel:
        """The level ``data`` showing ``ydim`` x ``xdim``; ``factor``/``offset`` (y, x) place
        its pixels in level 0 (pixel ``j`` is centred at level-0 index ``offset + j * factor``)."""
        sel = data if isinstance(data, Resolved) else Resolved.whole(data)
        plane = PlaneGeometry.of(sel, ydim, xdim)
        return cls(plane, _placed(plane, factor, offset))

    @classmethod
    def lazy(cls, opener: Callable[[], ChunkSource], dims: Sequence[str], shape: Sequence[int],
             chunks: Sequence[int], ydim: str, xdim: str, factor: tuple[float, float] = (1.0, 1.0),
             offset: tuple[float, float] = (0.0, 0.0)) -> ViewLevel:
        """A whole array of this ``dims``/``shape``/``chunks`` (from metadata) that
        ``opener()`` opens when it is first read."""
        plane = PlaneGeometry(tuple(map(int, shape)), tuple(map(int, chunks)), tuple(dims), ydim, xdim)
        return cls(plane, _placed(plane, factor, offset), opener)

    @property
    def opened(self) -> bool:
        """Whether the array is open (a level never opened has nothing in the cache)."""
        return self.plane.selection is not None or "selection" in self._opened

    @property
    def selection(self) -> Resolved:
        if self.plane.selection is not None:
            return self.plane.selection
        with self._opened["lock"]:
            if "selection" not in self._opened:
                assert self.opener is not None
                source = self.opener()
                if tuple(source.shape) != self.plane.shape or tuple(source.dims) != self.plane.dims:
                    raise ConfigError(f"the level opened as {source.dims} {source.shape}; its metadata "
                                      f"said {self.plane.dims} {self.plane.shape}")
                self._opened["selection"] = Resolved.whole(source)
            return self._opened["selection"]  # type: ignore[no-any-return]

    @property
    def source(self) -> ChunkSource:
        return self.selection.source

    def chunk_index(self, state: ViewState, chunk: tuple[int, int]) -> ChunkIndex:
        """The source chunk holding plane chunk ``chunk`` (y, x) at ``state``'s slider indices."""
        p = self.plane
        out = []
        for axis, dim in enumerate(p.dims):
            if dim == p.ydim:
                out.append(int(chunk[0]))
            elif dim == p.xdim:
                out.append(int(chunk[1]))
            else:
                out.append(state.index(dim) // p.chunks[axis])
        return tuple(out)


def _placed(plane: PlaneGeometry, factor: tuple[float, float], offset: tuple[float, float]) -> LevelGeometry:
    ay, ax = plane.axis(plane.ydim), plane.axis(plane.xdim)
    return LevelGeometry((plane.shape[ay], plane.shape[ax]), (plane.chunks[ay], plane.chunks[ax]),
                         (float(factor[0]), float(factor[1])), (float(offset[0]), float(offset[1])))


def check_levels(levels: Sequence[ViewLevel]) -> None:
    """Raise :class:`ConfigError` unless ``levels`` can stand for one array at several sizes."""
    if not levels:
        raise ConfigError("no levels given")
    first = levels[0].plane
    for k, lv in enumerate(levels):
        p = lv.plane
        if (p.dims, p.ydim, p.xdim) != (first.dims, first.ydim, first.xdim):
            raise ConfigError(f"level {k} shows dims {p.dims} ({p.ydim}, {p.xdim}); level 0 shows "
                              f"{first.dims} ({first.ydim}, {first.xdim})")
        for dim in first.slider_dims:
            if p.shape[p.axis(dim)] != first.shape[first.axis(dim)]:
                raise ConfigError(f"level {k} has {p.shape[p.axis(dim)]} {dim!r} steps, level 0 has "
                                  f"{first.shape[first.axis(dim)]}: only the shown dims may be downsampled")
        if len(levels) > 1 and lv.plane.selection is not None and not lv.plane.selection.is_whole:
            raise ConfigError(f"the levels of a pyramid are whole arrays; level {k} is a selection {lv.selection!r}")
        if k and (lv.geometry.factor[0] < levels[k - 1].geometry.factor[0]
                  or lv.geometry.factor[1] < levels[k - 1].geometry.factor[1]):
            raise ConfigError(f"levels go from fine to coarse; level {k} has factor {lv.geometry.factor}")


def view_extent(state: ViewState, level0: ViewLevel) -> Extent:
    """The view's region in level-0 index edges (the whole plane for a ``None`` range)."""
    ny, nx = level0.geometry.shape
    y = tuple(sorted(map(float, state.y_range))) if state.y_range is not None else (-0.5, ny - 0.5)
    x = tuple(sorted(map(float, state.x_range))) if state.x_range is not None else (-0.5, nx - 0.5)
    return ((y[0], y[1]), (x[0], x[1]))


def level_state(state: ViewState, level: ViewLevel, extent: Extent) -> ViewState:
    """``state`` with its ranges in ``level``'s index coordinates."""
    (ylo, yhi), (xlo, xhi) = level.geometry.to_level(extent)
    return replace(state, y_range=(ylo, yhi), x_range=(xlo, xhi))


@dataclass(frozen=True)
class ViewPlan:
    """The reads that show one generation: ``steps[-1]`` reads the ``target`` level; a step
    before it is a coarser picture to show first. ``order``: the target's chunks, nearest the
    middle of the view first."""

    target: int
    steps: tuple[ViewRequest, ...]
    order: tuple[ChunkIndex, ...]

    @property
    def progressive(self) -> bool:
        return len(self.steps) > 1


def plan_view(state: ViewState, levels: Sequence[ViewLevel], generation: int = 0, *,
              cached: Callable[[int, ChunkIndex], bool] | None = None, max_chunks: int = 256,
              quick_chunks: int = QUICK_CHUNKS) -> ViewPlan:
    """Pure planning of one generation over ``levels`` (``cached(level, chunk)``: in the cache)."""
    if len(levels) == 1:
        req = resolve(state, levels[0].plane, generation, max_chunks=max_chunks)
        return ViewPlan(0, (req,), req.chunks)
    is_cached = cached or (lambda _k, _c: False)
    extent = view_extent(state, levels[0])
    plan = overview_plan([lv.geometry for lv in levels], extent, (state.height, state.width),
                         cached=lambda k, c: is_cached(k, levels[k].chunk_index(state, c)),
                         quick_chunks=quick_chunks)
    steps = []
    for step in plan.steps:
        lv = levels[step.level]
        at = state if step.level == 0 else level_state(state, lv, extent)
        req = resolve(at, lv.plane, generation, max_chunks=max_chunks)
        steps.append(replace(req, level=step.level, extent=lv.geometry.to_base(req.covered)))
    target = steps[-1]
    wanted = set(target.chunks)
    first = [i for c in plan.steps[-1].chunks if (i := levels[plan.target].chunk_index(state, c)) in wanted]
    rest = [c for c in target.chunks if c not in set(first)]
    return ViewPlan(plan.target, tuple(steps), tuple(first + rest))


def _within(start: int, stop: int, step: int, lo: int, hi: int) -> tuple[int, int] | None:
    """The samples of ``range(start, stop, step)`` inside ``[lo, hi)`` as ``(first, stop)``."""
    first = start if lo <= start else start + -(-(lo - start) // step) * step
    end = min(stop, hi)
    return (first, end) if first < end else None


def tile_requests(request: ViewRequest, order: Sequence[ChunkIndex], level: ViewLevel) -> list[ViewRequest]:
    """``request`` (of ``level``, a whole array) cut along its chunks: one request per chunk of
    ``order`` that holds samples, in that order, each with its own region, key and extent."""
    p = level.plane
    ay, ax = p.axis(p.ydim), p.axis(p.xdim)
    cy, cx = p.chunks[ay], p.chunks[ax]
    (y0, y1), (x0, x1) = request.region
    sy, sx = request.step
    out = []
    for chunk in order:
        ys = _within(y0, y1, sy, chunk[ay] * cy, (chunk[ay] + 1) * cy)
        xs = _within(x0, x1, sx, chunk[ax] * cx, (chunk[ax] + 1) * cx)
        if ys is None or xs is None:
            continue
        key = list(request.key)
        key[ay], key[ax] = slice(ys[0], ys[1], sy), slice(xs[0], xs[1], sx)
        tile = replace(request, key=tuple(key), region=(ys, xs), chunks=(tuple(chunk),), extent=None)
        out.append(replace(tile, extent=level.geometry.to_base(tile.covered)))
    return out
