"""Reading one generation's frames through the engine: whole, or progressively by tiles.

:func:`read_frame` reads a request at once (``read_selection``: cache, prefetcher, stats).
:func:`read_tiles` asks the engine for all of a request's chunks (nearest the middle of the
view first), and yields one tile frame per chunk as it arrives, quantised over a colour range
fixed beforehand (the coarser picture's), so the pieces match; then the whole frame. The
prefetcher sees the read as it sees any visible read of that level's source, so read-ahead
works per level.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ..engine import Engine, Priority
from ..engine.array import assemble, read_selection
from ..engine.planning import plan_selection
from ..errors import RequestCancelledError
from ..sources.base import ChunkIndex
from .colour import frame_histogram, robust_range, to_uint8
from .levels import ViewLevel, tile_requests
from .planning import Frame, Range, ViewRequest

#: a colour range per channel (None: that channel's robust range)
ChannelRanges = tuple[Range | None, ...]


def _oriented(data: np.ndarray, request: ViewRequest) -> np.ndarray:
    """The block read as ``(y, x)``, or ``(channel, y, x)`` with a channel dim."""
    if request.channel_axis is not None:
        data = np.moveaxis(data, request.channel_axis, 0)
        return data.transpose(0, 2, 1) if request.transpose else data
    return data.T if request.transpose else data


def colour_frame(request: ViewRequest, data: np.ndarray, clim: Range | ChannelRanges | None,
                 percentiles: tuple[float, float], elapsed: float, mode: str = "replace",
                 final: bool = True, rgb: bool = False) -> Frame:
    """The :class:`Frame` of ``data`` (``(y, x)`` or ``(channel, y, x)``): colour indices over
    ``clim`` (one range; one per channel; None: robust), and each channel's histogram.
    RGB(A) ``uint8`` channels travel as they are (their own values are the colours)."""
    if data.ndim == 2:
        one: Any = clim if clim is not None and not _per_channel(clim) else robust_range(data, percentiles)
        rng = (float(one[0]), float(one[1]))
        return Frame(request, data, to_uint8(data, rng), rng, elapsed, mode, final,
                     hists=(frame_histogram(data, rng),))
    n = data.shape[0]
    if rgb:
        ranges = [(0.0, 255.0)] * n
        image = np.ascontiguousarray(data, dtype=np.uint8)
    else:
        wanted: list[Any] = list(clim) if _per_channel(clim) else [clim] * n  # type: ignore[arg-type]
        wanted += [None] * (n - len(wanted))
        ranges = [(float(r[0]), float(r[1])) if r is not None else robust_range(data[k], percentiles)
                  for k, r in enumerate(wanted[:n])]
        image = np.empty(data.shape, np.uint8)
        for k in range(n):
            image[k] = to_uint8(data[k], ranges[k])
    hists = tuple(frame_histogram(data[k], ranges[k]) for k in range(n))
    return Frame(request, data, image, ranges[0], elapsed, mode, final, hists=hists, clims=tuple(ranges))


def _per_channel(clim: Any) -> bool:
    return clim is not None and len(clim) > 0 and (clim[0] is None or not np.isscalar(clim[0]))


def read_frame(engine: Engine, level: ViewLevel, request: ViewRequest, *, channel: str | None,
               clim: Range | ChannelRanges | None, percentiles: tuple[float, float],
               timeout: float | None, started: float, mode: str = "replace",
               final: bool = True, ahead: bool = False) -> Frame:
    """Read ``request`` of ``level`` and colour it (over ``clim``, or its robust range).
    ``ahead``: a frame made before it is asked for (SPECULATIVE: no hits counted, nothing the
    prefetcher learns from; :func:`note_cached_read` tells the engine once it is shown)."""
    data = read_selection(level.source, request.key, Priority.SPECULATIVE if ahead else Priority.VISIBLE,
                          channel=channel, generation=request.generation, timeout=timeout, engine=engine)
    data = _oriented(data, request)
    return colour_frame(request, data, clim, percentiles, time.perf_counter() - started, mode, final,
                        rgb=level.plane.rgb)


def note_cached_read(engine: Engine, level: ViewLevel, request: ViewRequest, *, channel: str) -> None:
    """Tell the engine of a read of ``request`` answered by a frame made ahead, as
    :func:`read_frame` would of its cached read: the hits (and the cache's recency), the
    channel's generation, the prefetcher's view of the access."""
    source = level.source
    plan = plan_selection(request.key, source.shape, source.chunks)
    engine.request(source, plan.indices, Priority.VISIBLE, channel=channel, generation=request.generation)
    engine.count_useful(math.prod(plan.out_shape) * source.dtype.itemsize)
    engine.prefetcher.observe_soon(source, plan, False, request.key)


def read_tiles(engine: Engine, level: ViewLevel, request: ViewRequest, order: Sequence[ChunkIndex], *,
               channel: str, clim: Range, timeout: float | None, started: float,
               stale: Callable[[], bool]) -> Iterator[Frame]:
    """Yield a ``"tile"`` frame per chunk of ``request`` as it arrives (the last one
    ``final``), then the whole frame (``"replace"``, ``final``). Stops with
    :class:`RequestCancelledError` as soon as ``stale()`` says a newer view waits."""
    source = level.source
    order = list(order)
    timeout = engine.context.settings.wait_timeout if timeout is None else timeout
    items = engine.submit(source, [engine.key(source, index) for index in order], Priority.VISIBLE,
                          channel=channel, generation=request.generation)
    plan = plan_selection(request.key, source.shape, source.chunks)
    if any(isinstance(item, cf.Future) for item in items):
        engine.prefetcher.observe(source, plan)
    tiles = {t.chunks[0]: t for t in tile_requests(request, order, level)}
    arrived: dict[ChunkIndex, np.ndarray] = {}
    waiting = {item: index for index, item in zip(order, items) if isinstance(item, cf.Future)}
    ready = [(index, item) for index, item in zip(order, items) if not isinstance(item, cf.Future)]

    def done() -> Iterator[tuple[ChunkIndex, np.ndarray]]:
        yield from ready
        for fut in cf.as_completed(waiting, timeout=timeout):
            yield waiting[fut], fut.result()

    left = len(tiles)
    for index, chunk in done():
        arrived[index] = chunk
        if stale():
            raise RequestCancelledError(f"generation {request.generation} was superseded")
        tile = tiles.get(index)
        if tile is None:
            continue
        left -= 1
        piece = plan_selection(tile.key, source.shape, source.chunks)
        data = _oriented(assemble(piece, [chunk], source.dtype, timeout), tile)
        yield Frame(tile, data, to_uint8(data, clim), clim, time.perf_counter() - started, "tile", left == 0,
                    request)
    data = _oriented(assemble(plan, [arrived[i] for i in plan.chunk_indices()], source.dtype, timeout), request)
    yield Frame(request, data, to_uint8(data, clim), clim, time.perf_counter() - started, "replace", True,
                hists=(frame_histogram(data, clim),))
