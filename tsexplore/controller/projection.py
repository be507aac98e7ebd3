"""A projection of a view's plane along a dim (max, mean or min), streamed through ``tse.reduce``.

The plane is cut into tiles along its chunk grid (at most :data:`MAX_TILES`, nearest the
middle of the view first); each tile is one ``tse.reduce(tile, op, dim)`` over every step of
``dim`` at the view's other slider indices, run in the background on a
``tsexplore-project-*`` thread and written into the projection as it completes, so the
picture fills in tile by tile (``on_update``) while the engine reads ahead for the reduction
(PLANNED reads, below the visible ones). :meth:`Projection.cancel` stops it within one chunk.

The :class:`~tsexplore.controller.ViewController` shows a projection instead of the plane's
slice while one is set (:meth:`~tsexplore.controller.ViewController.project`):
:meth:`Projection.frame` makes the frame of any view of it, strided to the screen as a slice
would be, without a read.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from .. import config
from ..errors import ConfigError, TsExploreError
from .planning import Frame, PlaneGeometry, ViewState, resolve
from .reading import colour_frame

#: the reductions a projection takes
OPS = ("max", "mean", "min")
#: the most tiles a projection is cut into (each is one tse.reduce)
MAX_TILES = 16
#: the largest share of RAM a projection's values may take
MAX_RAM_SHARE = 0.25
_ids = itertools.count(1)


def tiles(ny: int, nx: int, cy: int, cx: int, centre: tuple[float, float] | None = None,
          max_tiles: int = MAX_TILES) -> list[tuple[slice, slice]]:
    """``(ys, xs)`` tiles covering an ``ny`` x ``nx`` plane, whole chunks of ``cy`` x ``cx``
    each (as many chunks per tile as keep them to ``max_tiles``), nearest ``centre`` (y, x)
    first."""
    gy, gx = -(-ny // max(1, cy)), -(-nx // max(1, cx))
    ky = kx = 1
    while -(-gy // ky) * -(-gx // kx) > max_tiles:
        if -(-gy // ky) >= -(-gx // kx):
            ky += 1
        else:
            kx += 1
    ty, tx = cy * ky, cx * kx
    out = [(slice(y, min(ny, y + ty)), slice(x, min(nx, x + tx))) for y in range(0, ny, ty) for x in range(0, nx, tx)]
    cyx = centre if centre is not None else ((ny - 1) / 2, (nx - 1) / 2)
    return sorted(out, key=lambda t: ((t[0].start + t[0].stop - 1) / 2 - cyx[0]) ** 2
                  + ((t[1].start + t[1].stop - 1) / 2 - cyx[1]) ** 2)


class Projection:
    """``op`` of ``da`` along ``dim`` at ``indices`` (its other slider dims), over the plane of
    ``geometry``; see the module docstring. ``on_update(self)`` runs on the projection's
    thread after each tile."""

    def __init__(self, da: Any, op: str, dim: str, geometry: PlaneGeometry, indices: dict[str, int], *,
                 on_update: Callable[[Projection], Any] | None = None, centre: tuple[float, float] | None = None,
                 timeout: float = 600.0, max_tiles: int = MAX_TILES) -> None:
        if op not in OPS:
            raise ConfigError(f"a projection takes op in {OPS}, got {op!r}")
        g = geometry
        if dim not in g.slider_dims:
            raise ConfigError(f"dim={dim!r} is not a slider dim of this view; it has {list(g.slider_dims)}")
        self.op, self.dim, self.geometry, self.timeout = op, dim, g, float(timeout)
        self.indices = {d: int(i) for d, i in indices.items() if d != dim and d in g.slider_dims}
        self.da = da.isel(self.indices) if self.indices else da
        self.out_dims = tuple(str(d) for d in self.da.dims if d != dim)
        sizes = dict(zip(g.dims, g.shape))
        self.ny, self.nx = sizes[g.ydim], sizes[g.xdim]
        need = 8 * int(np.prod([sizes[d] for d in self.out_dims], dtype=np.float64))
        if need > MAX_RAM_SHARE * config.total_ram():
            raise ConfigError(f"a projection of this {self.ny:,} x {self.nx:,} plane would hold {need / 2**30:.1f} GiB; "
                              f"project a selection (da.isel(...)) or a pyramid level instead")
        self.values = np.full(tuple(sizes[d] for d in self.out_dims), np.nan, dtype=np.float64)
        self.tiles = tiles(self.ny, self.nx, g.chunks[g.axis(g.ydim)], g.chunks[g.axis(g.xdim)], centre, max_tiles)
        self.tiles_done = 0
        self.on_update = on_update
        self.error: BaseException | None = None
        self.id = next(_ids)
        self._cancel = threading.Event()
        self._done = threading.Event()
        self._job: Any = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"tsexplore-project-{self.id}", daemon=True)
        self._thread.start()

    # -- the run ------------------------------------------------------------------------------
    def _run(self) -> None:
        from ..compute import reduce

        g = self.geometry
        try:
            for ys, xs in self.tiles:
                if self._cancel.is_set():
                    break
                part = self.da.isel({g.ydim: ys, g.xdim: xs})
                job = reduce(part, self.op, self.dim, background=True, progress=False)
                with self._lock:
                    self._job = job
                deadline = time.monotonic() + self.timeout
                while not job.wait(0.05):
                    if self._cancel.is_set():
                        job.cancel()
                    if time.monotonic() > deadline:
                        job.cancel()
                        raise TsExploreError(f"a tile of the {self.op} projection took longer than {self.timeout} s")
                if self._cancel.is_set():
                    break
                result = job.result()
                where = tuple(ys if d == g.ydim else xs if d == g.xdim else slice(None) for d in self.out_dims)
                with self._lock:
                    self.values[where] = result.transpose(*self.out_dims).values
                    self.tiles_done += 1
                    self._job = None
                if self.on_update is not None and not self._cancel.is_set():
                    self.on_update(self)
        except BaseException as exc:  # noqa: BLE001 - kept for result() and the view
            if not self._cancel.is_set():
                self.error = exc
                if self.on_update is not None:
                    self.on_update(self)
        finally:
            self._done.set()

    # -- state -------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """Complete (every tile reduced), cancelled or failed."""
        return self._done.is_set()

    @property
    def complete(self) -> bool:
        return self.tiles_done == len(self.tiles)

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    @property
    def progress(self) -> float:
        """Fraction done: the tiles reduced, and the part of the running one."""
        with self._lock:
            job = self._job
            part = job.progress.fraction if job is not None else 0.0
            return min(1.0, (self.tiles_done + part) / max(1, len(self.tiles)))

    def cancel(self) -> None:
        """Stop: the running tile's reduction stops within one chunk."""
        self._cancel.set()
        with self._lock:
            if self._job is not None:
                self._job.cancel()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def result(self, timeout: float | None = None) -> Any:
        """The projection as a DataArray (the variable's remaining dims and coords), once
        complete; raises what stopped it."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"the {self.op} projection along {self.dim!r} was {self.progress:.0%} done "
                               f"after {timeout} s")
        if self.error is not None:
            raise self.error
        if not self.complete:
            raise TsExploreError(f"the {self.op} projection along {self.dim!r} was cancelled (the view moved on)")
        import xarray as xr

        coords = {d: self.da[d] for d in self.out_dims if d in self.da.coords}
        return xr.DataArray(self.values.copy(), dims=self.out_dims, coords=coords, attrs=dict(self.da.attrs),
                            name=f"{self.da.name}_{self.op}")

    # -- frames -------------------------------------------------------------------------------
    def frame(self, state: ViewState, generation: int, clim: Any, percentiles: tuple[float, float],
              max_chunks: int, started: float) -> Frame:
        """The frame of view ``state`` of the projection so far (NaN where not reduced yet),
        strided to the screen as the plane's slice would be; nothing is read."""
        g = self.geometry
        shape = tuple(1 if d in g.slider_dims else n for d, n in zip(g.dims, g.shape))
        plane = PlaneGeometry(shape, g.chunks, g.dims, g.ydim, g.xdim, channel=g.channel, rgb=g.rgb)
        flat = replace(state, indices=())
        request = resolve(flat, plane, generation, max_chunks=max_chunks)
        request = replace(request, state=state, chunks=())
        (y0, y1), (x0, x1) = request.region
        sy, sx = request.step
        with self._lock:
            taken = self.values[tuple(slice(y0, y1, sy) if d == g.ydim else slice(x0, x1, sx) if d == g.xdim
                                      else slice(None) for d in self.out_dims)].copy()
        order = [d for d in (g.channel, g.ydim, g.xdim) if d is not None]
        data = np.moveaxis(taken, [self.out_dims.index(d) for d in order], range(len(order)))
        if g.rgb:
            data = np.nan_to_num(data, nan=0.0)
        return colour_frame(request, data, clim, percentiles, time.perf_counter() - started, rgb=g.rgb)

    @property
    def title(self) -> str:
        state = "" if self.complete else f" {self.progress:.0%}"
        return f"{self.op} over {self.dim}{state}"

    def __repr__(self) -> str:
        status = "failed" if self.error else "complete" if self.complete else "cancelled" if self.cancelled \
            else f"{self.progress:.0%}"
        return f"<Projection {self.op} along {self.dim} at {self.indices}: {self.tiles_done}/{len(self.tiles)} tiles, {status}>"

