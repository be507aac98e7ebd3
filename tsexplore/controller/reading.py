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
import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from ..engine import Engine, Priority
from ..engine.array import assemble, read_selection
from ..engine.planning import plan_selection
from ..errors import RequestCancelledError
from ..sources.base import ChunkIndex
from .levels import ViewLevel, tile_requests
from .planning import Frame, Range, ViewRequest, robust_range, to_uint8


def _oriented(data: np.ndarray, request: ViewRequest) -> np.ndarray:
    return data.T if request.transpose else data


def read_frame(engine: Engine, level: ViewLevel, request: ViewRequest, *, channel: str,
               clim: Range | None, percentiles: tuple[float, float], timeout: float | None,
               started: float, mode: str = "replace", final: bool = True) -> Frame:
    """Read ``request`` of ``level`` and colour it (over ``clim``, or its robust range)."""
    data = read_selection(level.source, request.key, channel=channel, generation=request.generation,
                          timeout=timeout, engine=engine)
    data = _oriented(data, request)
    rng = clim if clim is not None else robust_range(data, percentiles)
    return Frame(request, data, to_uint8(data, rng), rng, time.perf_counter() - started, mode, final)


def read_tiles(engine: Engine, level: ViewLevel, request: ViewRequest, order: Sequence[ChunkIndex], *,
               channel: str, clim: Range, timeout: float | None, started: float,
               stale: Callable[[], bool]) -> Iterator[Frame]:
    """Yield a ``"tile"`` frame per chunk of ``request`` as it arrives (the last one
    ``final``), then the whole frame (``"replace"``, ``final``). Stops with
    :class:`RequestCancelledError` as soon as ``stale()`` says a newer view waits."""
    source = level.source
    order = list(order)
    items = engine.request_mixed(source, order, Priority.VISIBLE, channel=channel,
                                 generation=request.generation)
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
    yield Frame(request, data, to_uint8(data, clim), clim, time.perf_counter() - started, "replace", True)
