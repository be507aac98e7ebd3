"""A label layer over a view: integer ids (a segmentation) read for the pixels on screen.

A :class:`LabelLayer` is an integer array whose dims are the image's (without its channel
dim; the slider dims it lacks are ignored), e.g. ``(time, y, x)`` labels over a ``(time, c, y,
x)`` image. For every frame the view shows, :func:`read_labels` reads the ids of the same
screen pixels through the engine (VISIBLE, on the view's channel and generation): at level 0
the same samples as the image; over a coarser pyramid level, the level-0 pixel at the centre
of each of its pixels (labels are never averaged). The ids travel to the browser as they are
(:class:`LabelFrame`); colouring them is the view's business.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..engine import Engine, Priority
from ..engine.array import read_selection
from ..engine.planning import plan_selection
from ..errors import ConfigError
from ..resolve import Resolved
from .planning import Extent, PlaneGeometry, ViewRequest, ViewState


@dataclass(frozen=True)
class LabelLayer:
    """Integer label ids over an image: ``selection`` (a source, or a selection of one) with
    ``dims``; ``name`` for the user."""

    selection: Resolved = field(repr=False)
    dims: tuple[str, ...]
    name: str = "labels"

    @classmethod
    def over(cls, selection: Resolved, image: PlaneGeometry, name: str = "labels") -> LabelLayer:
        """The layer ``selection`` over ``image``'s plane; a :class:`ConfigError` says what
        does not fit (an id dtype that is not integer, dims or sizes that differ)."""
        dims, shape = tuple(selection.dims), tuple(selection.shape)
        dtype = np.dtype(selection.source.dtype)
        if dtype.kind not in "iub":
            raise ConfigError(f"labels {name!r} must hold integer ids, got dtype {dtype}")
        sizes = dict(zip(image.dims, image.shape))
        for d, n in zip(dims, shape):
            if d not in sizes or d == image.channel:
                raise ConfigError(f"labels {name!r} have dim {d!r}, which the image {image.dims} "
                                  f"{'shows as channels' if d == image.channel else 'lacks'}")
            if n != sizes[d]:
                raise ConfigError(f"labels {name!r} have {n} {d!r} steps, the image {sizes[d]}")
        for d in (image.ydim, image.xdim):
            if d not in dims:
                raise ConfigError(f"labels {name!r} {dims} lack the shown dim {d!r}")
        return cls(selection, dims, name)

    def key(self, state: ViewState, ydim: str, xdim: str, ys: slice, xs: slice) -> tuple[Any, ...]:
        """The key on the source for samples ``ys`` x ``xs`` at ``state``'s slider indices."""
        key = tuple(ys if d == ydim else xs if d == xdim else state.index(d) for d in self.dims)
        return self.selection.key(key)


@dataclass(frozen=True)
class LabelFrame:
    """The ids under a frame's pixels: ``ids`` (y, x; row 0 = lowest y index) covering
    ``extent`` (level-0 index edges), for ``state`` of ``generation``."""

    generation: int
    state: ViewState
    ids: np.ndarray = field(repr=False)
    extent: Extent


def label_samples(request: ViewRequest, shape: tuple[int, int]) -> tuple[slice, slice]:
    """The level-0 samples (y, x) under ``request``'s pixels: the same as the image's at level
    0, else the pixel at the centre of each coarse pixel (clipped to ``shape``)."""
    if request.level == 0:
        (y0, y1), (x0, x1) = request.region
        return slice(y0, y1, request.step[0]), slice(x0, x1, request.step[1])
    out = []
    for (e0, e1), n, size in zip(request.base_extent, request.out_shape, shape):
        width = (e1 - e0) / max(1, n)
        step = max(1, round(width))
        first = math.floor(e0 + width / 2 + 0.5)
        start = min(max(0, first), size - 1)
        out.append(slice(start, min(size, first + n * step), step))
    return out[0], out[1]


def label_key(layer: LabelLayer, request: ViewRequest, image: PlaneGeometry) -> tuple[Any, ...]:
    """The key on the labels' source for the ids under ``request``'s frame."""
    sizes = dict(zip(image.dims, image.shape))
    ys, xs = label_samples(request, (sizes[image.ydim], sizes[image.xdim]))
    return layer.key(request.state, image.ydim, image.xdim, ys, xs)


def labels_cached(engine: Engine, layer: LabelLayer, request: ViewRequest, image: PlaneGeometry) -> bool:
    """Whether every chunk the ids under ``request`` need is in ``engine``'s cache."""
    source = layer.selection.source
    plan = plan_selection(label_key(layer, request, image), source.shape, source.chunks)
    return all(engine.key(source, c) in engine.cache for c in plan.chunk_indices())


def read_labels(engine: Engine, layer: LabelLayer, request: ViewRequest, image: PlaneGeometry, *,
                channel: str | None, timeout: float | None) -> LabelFrame:
    """Read the ids under ``request``'s frame (VISIBLE, ``channel``, its generation)."""
    state = request.state
    key = label_key(layer, request, image)
    data = read_selection(layer.selection.source, key, Priority.VISIBLE, channel=channel,
                          generation=request.generation, timeout=timeout, engine=engine)
    kept = [d for d in layer.dims if d in (image.ydim, image.xdim)]
    if kept != [image.ydim, image.xdim]:
        data = data.T
    ny, nx = data.shape
    extent = request.base_extent
    if request.level != 0:  # the samples' own edges: each stands for one coarse pixel
        (ey0, ey1), (ex0, ex1) = extent
        extent = ((ey0, ey0 + ny * (ey1 - ey0) / request.out_shape[0]),
                  (ex0, ex0 + nx * (ex1 - ex0) / request.out_shape[1]))
    ids = np.ascontiguousarray(data)
    if ids.dtype.kind == "b":
        ids = ids.astype(np.uint8)
    return LabelFrame(request.generation, state, ids, extent)
