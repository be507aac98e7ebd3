"""The planes the StatsPanel maps: the live Explorers' controllers, and their chunk states.

:func:`watch` registers a controller (the Explorer does so for each one it builds);
:func:`live_controllers` lists those not closed, oldest first. :func:`chunk_states` is the
chunk map of a controller's current plane, read from the engine's cache and read table.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

import numpy as np

from ..controller import ViewController
from ..engine.planning import plan_selection

_order = itertools.count()
_live: weakref.WeakKeyDictionary[ViewController, int] = weakref.WeakKeyDictionary()


def watch(controller: ViewController) -> None:
    """Let the StatsPanel map ``controller``'s plane (until it is closed)."""
    _live[controller] = next(_order)


def live_controllers() -> list[ViewController]:
    """Watched controllers not yet closed, oldest first (the panel maps the newest one)."""
    found = [(n, c) for c, n in list(_live.items()) if not c.closed]
    return [c for _, c in sorted(found, key=lambda item: item[0])]


def _window(positions: list[int], visible: set[int], max_cells: int) -> tuple[int, int]:
    """At most ``max_cells`` consecutive positions, centred on the visible ones."""
    g = len(positions)
    if g <= max_cells:
        return 0, g
    seen = [i for i, p in enumerate(positions) if p in visible] or [0]
    lo, hi = min(seen), max(seen) + 1
    if hi - lo > max_cells:
        mid = (lo + hi) // 2
        return mid - max_cells // 2, mid - max_cells // 2 + max_cells
    lo = max(0, min(g - max_cells, lo - (max_cells - (hi - lo)) // 2))
    return lo, lo + max_cells


def chunk_states(
    engine: Any, controller: ViewController, max_cells: int = 64
) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """The chunk grid of ``controller``'s plane at the level it shows: 0 not loaded, 1 in
    flight, 2 cached, 3 absent (the store has no such chunk; it reads as the fill value).

    Returns ``(states, (gy0, gy1, gx0, gx1))``: the source's chunks along the plane's y and x
    axes (only those the plane's selection touches), a window of at most ``max_cells`` per
    axis centred on the visible chunks, with the chunk indices it spans. ``engine`` may be
    None (nothing is cached then).
    """
    request = controller.request()
    level, state = controller.level_view(request.level)
    geom, selection, source = level.plane, level.selection, level.source
    plane = tuple(
        slice(None) if d in (geom.ydim, geom.xdim) else state.index(d) for d in geom.dims
    )
    plan = plan_selection(selection.key(plane), source.shape, source.chunks)
    sy, sx = selection.axes[geom.axis(geom.ydim)], selection.axes[geom.axis(geom.xdim)]
    windows = []
    for axis in (sy, sx):
        positions = [p[0] for p in plan.dims[axis].pieces]
        lo, hi = _window(positions, {c[axis] for c in request.chunks}, max_cells)
        windows.append(positions[lo:hi])
    ys, xs = windows
    token = source.token
    cached = set() if engine is None else engine.cached_indices(token)
    flying = set() if engine is None else {k.index for k in engine.in_flight_keys() if k.array == token}
    absent = frozenset() if engine is None else engine.absent.indices(token)
    fixed = [d.pieces[0][0] if d.pieces else 0 for d in plan.dims]
    out = np.zeros((len(ys), len(xs)), dtype=np.uint8)
    for i, iy in enumerate(ys):
        for j, ix in enumerate(xs):
            idx = list(fixed)
            idx[sy], idx[sx] = iy, ix
            t = tuple(idx)
            if t in absent:
                out[i, j] = 3
            else:
                out[i, j] = 2 if t in cached else (1 if t in flying else 0)
    span = (ys[0], ys[-1] + 1, xs[0], xs[-1] + 1) if ys and xs else (0, 0, 0, 0)
    return out, span
