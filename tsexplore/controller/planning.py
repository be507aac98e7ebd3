"""Pure view planning: the view's state -> the read that shows it at screen resolution.

- :class:`PlaneGeometry` (frozen): the array on screen -- its shape, chunk grid and dims, the
  two dims shown, and the :class:`~tsexplore.resolve.Resolved` selection of the source it is.
- :class:`ViewState` (frozen): the slider indices, the visible region (in index space) and
  the screen size in pixels.
- :func:`resolve` (pure): ``ViewState`` -> :class:`ViewRequest`, the orthogonal key to read
  (strided so the frame has at most about one sample per screen pixel) composed with the
  selection into a key on the source, the chunks it touches and the region it covers. When
  even one sample per pixel would touch more than ``max_chunks`` chunks (a far zoomed-out view
  of a huge plane, no pyramid), the strides grow until it does not: the frame gets coarser
  rather than the engine being flooded.
- the colour range, the 8-bit colour indices and the histogram of a frame are in
  :mod:`.colour`.
- a *channel* dim (``PlaneGeometry.channel``) is read whole with the plane: each channel is
  quantised over its own range and the browser blends them (an additive composite, or the
  colours themselves for RGB(A) ``uint8``: ``PlaneGeometry.rgb``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..engine.planning import plan_selection
from ..errors import ConfigError
from ..resolve import Resolved
from ..sources.base import ChunkIndex, ChunkSource
from .colour import Histogram

Range = tuple[float, float]
#: dim names taken for a channel dim (when of at most MAX_CHANNELS values)
CHANNEL_NAMES = ("c", "channel", "channels", "band", "bands", "wavelength")
MAX_CHANNELS = 8
Extent = tuple[Range, Range]  # ((y_lo, y_hi), (x_lo, x_hi)): edges in index coordinates


@dataclass(frozen=True)
class PlaneGeometry:
    """The array being shown: its shape, chunk grid and which dims are on screen."""

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dims: tuple[str, ...]
    ydim: str
    xdim: str
    #: the selection of a source these dims index (None: a source of exactly this shape)
    selection: Resolved | None = field(default=None, compare=False, repr=False)
    #: a dim shown as channels of one picture (read whole with the plane), or None
    channel: str | None = None
    #: the channels are the R, G, B (and A) of ``uint8`` colours, shown as they are
    rgb: bool = False

    def __post_init__(self) -> None:
        if len(self.shape) < 2 or len(self.shape) != len(self.dims) != len(self.chunks):
            raise ConfigError(f"need >= 2 dims with one shape/chunk each, got {self.dims} {self.shape}")
        for name, d in (("ydim", self.ydim), ("xdim", self.xdim)):
            if d not in self.dims:
                raise ConfigError(f"{name}={d!r} is not a dimension; dims are {self.dims}")
        if self.ydim == self.xdim:
            raise ConfigError(f"x and y must be different dims, both are {self.xdim!r}")
        if self.channel is not None:
            if self.channel not in self.dims or self.channel in (self.ydim, self.xdim):
                raise ConfigError(f"channel={self.channel!r} must be a dim other than y and x; dims are {self.dims}")
            if self.channels > MAX_CHANNELS:
                raise ConfigError(f"channel={self.channel!r} has {self.channels} values; a composite "
                                  f"shows at most {MAX_CHANNELS} (pick a slider for it: channel=None)")

    @classmethod
    def of(cls, data: ChunkSource | Resolved, ydim: str, xdim: str, channel: str | None = None,
           rgb: bool = False) -> PlaneGeometry:
        """The geometry of a source, or of a selection of one (its chunks as seen through it)."""
        sel = data if isinstance(data, Resolved) else Resolved.whole(data)
        return cls(sel.shape, sel.grid()[0], sel.dims, ydim, xdim, sel, channel, rgb)

    @property
    def channels(self) -> int:
        """How many channels one picture has (1: no channel dim)."""
        return 1 if self.channel is None else self.shape[self.axis(self.channel)]

    def source_key(self, key: tuple[Any, ...]) -> tuple[Any, ...]:
        """``key`` (in these dims) as a key on the source."""
        return key if self.selection is None else self.selection.key(key)

    @property
    def slider_dims(self) -> tuple[str, ...]:
        return tuple(d for d in self.dims if d not in (self.ydim, self.xdim, self.channel))

    def axis(self, dim: str) -> int:
        return self.dims.index(dim)


@dataclass(frozen=True)
class ViewState:
    """What the user looks at: slider positions, visible region (index space), screen size.

    ``y_range``/``x_range`` are continuous index coordinates: pixel ``i`` covers
    ``[i - 0.5, i + 0.5)``; ``None`` means the whole axis.
    """

    indices: tuple[tuple[str, int], ...] = ()
    y_range: Range | None = None
    x_range: Range | None = None
    height: int = 600
    width: int = 800

    def index(self, dim: str, default: int = 0) -> int:
        return dict(self.indices).get(dim, default)

    def evolve(self, **changes: Any) -> ViewState:
        """A copy with ``changes``; ``indices`` may be a partial dict merged into the old one."""
        if "indices" in changes:
            merged = dict(self.indices)
            merged.update({str(k): int(v) for k, v in dict(changes["indices"]).items()})
            changes["indices"] = tuple(sorted(merged.items()))
        return replace(self, **changes)


@dataclass(frozen=True)
class ViewRequest:
    """One frame to read: the key for ``read_selection`` and where the result goes.

    ``key`` is on the source; ``region`` and ``step`` are in the plane's own index space.
    """

    generation: int
    state: ViewState
    key: tuple[Any, ...]
    region: tuple[tuple[int, int], tuple[int, int]]  # (y0, y1), (x0, x1), half-open indices
    step: tuple[int, int]  # (sy, sx)
    chunks: tuple[ChunkIndex, ...] = field(repr=False)
    transpose: bool = False  # xdim comes before ydim in the source's dims
    #: the pyramid level read (0: the array itself) and where its pixels go, in level-0
    #: index edges (None: ``covered``, the region itself at level 0)
    level: int = 0
    extent: Extent | None = None
    #: where the channel axis is among the axes of the block read (None: no channel dim)
    channel_axis: int | None = None

    @property
    def out_shape(self) -> tuple[int, int]:
        (y0, y1), (x0, x1) = self.region
        return (len(range(y0, y1, self.step[0])), len(range(x0, x1, self.step[1])))

    @property
    def covered(self) -> Extent:
        """Edges (in this level's index coordinates) of the pixels read, each ``step`` wide."""
        (y0, y1), (x0, x1) = self.region
        return (_edges(y0, y1, self.step[0]), _edges(x0, x1, self.step[1]))

    @property
    def base_extent(self) -> Extent:
        """Where the frame goes, in level-0 index edges."""
        return self.covered if self.extent is None else self.extent


def _edges(start: int, stop: int, step: int) -> Range:
    n = len(range(start, stop, step))
    return (start - 0.5, start + n * step - 0.5)


def _clip_range(rng: Range | None, n: int) -> tuple[int, int]:
    if rng is None:
        return 0, n
    lo, hi = sorted((float(rng[0]), float(rng[1])))
    i0 = max(0, min(n - 1, math.floor(lo + 0.5)))
    i1 = max(i0 + 1, min(n, math.ceil(hi + 0.5)))
    return i0, i1


def _chunks_along(start: int, stop: int, step: int, clen: int) -> int:
    """How many chunks of length ``clen`` the samples ``range(start, stop, step)`` touch."""
    n = len(range(start, stop, step))
    if n == 0:
        return 0
    if step >= clen:
        return n
    return (start + (n - 1) * step) // clen - start // clen + 1


def _span(rng: Range | None, n: int) -> float:
    return float(n) if rng is None else abs(float(rng[1]) - float(rng[0]))


def resolve(
    state: ViewState, geom: PlaneGeometry, generation: int = 0, *, max_chunks: int = 256
) -> ViewRequest:
    """Pure planning: the read that shows ``state`` at screen resolution (no I/O).

    The step along an axis is the view's index units per screen pixel, rounded up (a view
    wider than the array, e.g. widened to square pixels, shows it smaller, not finer).
    """
    ay, ax = geom.axis(geom.ydim), geom.axis(geom.xdim)
    ny, nx = geom.shape[ay], geom.shape[ax]
    (y0, y1), (x0, x1) = _clip_range(state.y_range, ny), _clip_range(state.x_range, nx)
    sy = max(1, math.ceil(_span(state.y_range, ny) / max(1, state.height) - 1e-9))
    sx = max(1, math.ceil(_span(state.x_range, nx) / max(1, state.width) - 1e-9))
    cy, cx = geom.chunks[ay], geom.chunks[ax]
    if geom.channel is not None:  # every channel's chunks are read with the plane
        ac = geom.axis(geom.channel)
        max_chunks = max(1, max_chunks // -(-geom.shape[ac] // max(1, geom.chunks[ac])))
    # coarser when one sample per pixel would touch more than max_chunks chunks
    while _chunks_along(y0, y1, sy, cy) * _chunks_along(x0, x1, sx, cx) > max(1, max_chunks):
        if _chunks_along(y0, y1, sy, cy) >= _chunks_along(x0, x1, sx, cx):
            sy = sy * 2 if sy >= cy else min(cy, sy * 2)
        else:
            sx = sx * 2 if sx >= cx else min(cx, sx * 2)
    key: list[Any] = []
    for axis, dim in enumerate(geom.dims):
        if axis == ay:
            key.append(slice(y0, y1, sy))
        elif axis == ax:
            key.append(slice(x0, x1, sx))
        elif dim == geom.channel:
            key.append(slice(None))
        else:
            i = state.index(dim)
            if not 0 <= i < geom.shape[axis]:
                raise ConfigError(f"index {i} of {dim!r} is outside 0..{geom.shape[axis] - 1}")
            key.append(i)
    source_key = geom.source_key(tuple(key))
    if geom.selection is None:
        plan = plan_selection(source_key, geom.shape, geom.chunks)
    else:
        src = geom.selection.source
        plan = plan_selection(source_key, src.shape, src.chunks)
    return ViewRequest(
        generation=generation,
        state=state,
        key=source_key,
        region=((y0, y1), (x0, x1)),
        step=(sy, sx),
        chunks=tuple(plan.chunk_indices()),
        transpose=ax < ay,
        channel_axis=None if geom.channel is None else
        [d for d in geom.dims if d in (geom.ydim, geom.xdim, geom.channel)].index(geom.channel),
    )


#: how a frame is painted: the whole picture, an overview kept under the others, or one
#: piece added to the picture of its generation (a progressive read)
FRAME_MODES = ("replace", "base", "tile")


@dataclass(frozen=True)
class Frame:
    """A frame: the data on screen (row = y index ascending) and its colour image.

    A generation is shown by one ``"replace"`` frame, or progressively: a ``"base"`` (a
    coarser level, the whole view at once) then ``"tile"`` frames (pieces of the chosen
    level as their chunks arrive). ``final`` marks the last frame of a generation.
    """

    request: ViewRequest
    data: np.ndarray = field(repr=False)
    image: np.ndarray = field(repr=False)  # uint8, same shape as data, 0 = NaN
    clim: Range
    elapsed: float  # seconds from issuing the read to the finished image
    mode: str = "replace"
    final: bool = True
    #: of a tile: the read of its whole generation (None: ``request`` is the whole)
    whole: ViewRequest | None = field(default=None, repr=False)
    #: the histogram of each channel (empty for a tile)
    hists: tuple[Histogram, ...] = field(default=(), repr=False)
    #: each channel's colour range (a channel dim; else empty: ``clim`` is the one range)
    clims: tuple[Range, ...] = ()

    @property
    def channel_clims(self) -> tuple[Range, ...]:
        """The range of every channel (one: no channel dim)."""
        return self.clims or (self.clim,)

    @property
    def generation(self) -> int:
        return self.request.generation

    @property
    def level(self) -> int:
        return self.request.level

    @property
    def extent(self) -> Extent:
        """Where the image goes: edges in level-0 index coordinates."""
        return self.request.base_extent
