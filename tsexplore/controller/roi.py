"""Statistics of a region along a slider dim, streamed chunk by chunk (pure + engine).

A region of the plane (``y0:y1``, ``x0:x1`` in index space) at the other dims' current
indices: for every index of the slider dim ``dim``, the mean, min and max of the finite values
in the region (per channel, with a channel dim). The chunks are read through
:meth:`~tsexplore.engine.Engine.stream`, i.e. as PLANNED reads, below the visible reads'
priority, so the image keeps moving while the statistics fill in.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..engine import Engine
from ..engine.planning import SelectionPlan, take_piece
from ..errors import ConfigError, TsExploreError
from ..sources.base import ChunkSource
from .planning import PlaneGeometry
from .profile import along_plan

Region = tuple[tuple[int, int], tuple[int, int]]  # (y0, y1), (x0, x1): half-open indices


@dataclass(frozen=True)
class RoiStats:
    """The statistics of ``region`` along ``dim`` read so far (NaN where not read yet).

    ``mean``, ``min``, ``max`` have shape ``(n,)``, or ``(n, channels)`` with a channel dim;
    ``chunks`` of ``total`` chunks are in; ``done`` once all are."""

    generation: int
    dim: str
    region: Region
    point: tuple[tuple[str, int], ...]
    mean: np.ndarray = field(repr=False)
    min: np.ndarray = field(repr=False)
    max: np.ndarray = field(repr=False)
    chunks: int
    total: int
    done: bool

    @property
    def progress(self) -> float:
        return self.chunks / self.total if self.total else 1.0


def check_region(geom: PlaneGeometry, region: Region) -> Region:
    """``region`` clipped to the plane; raises :class:`ConfigError` when it holds no pixel."""
    out = []
    for name, (lo, hi), dim in (("y", region[0], geom.ydim), ("x", region[1], geom.xdim)):
        n = geom.shape[geom.axis(dim)]
        a, b = max(0, int(lo)), min(n, int(hi))
        if not b > a:
            raise ConfigError(f"the region's {name} range {lo}:{hi} holds no pixel of {dim!r} (0..{n - 1})")
        out.append((a, b))
    return (out[0], out[1])


def roi_plan(geom: PlaneGeometry, point: Mapping[str, int], dim: str,
             region: Region) -> tuple[tuple[Any, ...], SelectionPlan]:
    """The source key of the region along ``dim`` (every channel) and its plan."""
    if dim not in geom.slider_dims:
        raise ConfigError(f"statistics go along a slider dim, one of {geom.slider_dims}; got {dim!r}")
    return along_plan(geom, point, dim, whole=(geom.channel,), region=region)


def _source_axis(geom: PlaneGeometry, dim: str) -> int:
    axis = geom.axis(dim)
    return axis if geom.selection is None else geom.selection.axes[axis]


def stream_roi(
    source: ChunkSource,
    geom: PlaneGeometry,
    point: Mapping[str, int],
    dim: str,
    region: Region,
    *,
    engine: Engine,
    cancelled: Callable[[], bool] = lambda: False,
    timeout: float | None = None,
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, int, int]]:
    """Yield ``(mean, min, max, chunks_in, total)`` as the region's chunks arrive (PLANNED
    reads through ``engine``); stops early when ``cancelled()`` becomes true."""
    _, plan = roi_plan(geom, point, dim, region)
    along = _source_axis(geom, dim)
    chan = None if geom.channel is None else _source_axis(geom, geom.channel)
    keep = [along] if chan is None else [along, chan]
    sizes = [plan.dims[a].length for a in keep]
    total_sum = np.zeros(sizes)
    count = np.zeros(sizes, dtype=np.int64)
    lo = np.full(sizes, np.inf)
    hi = np.full(sizes, -np.inf)
    pieces = [{p[0]: p for p in d.pieces} for d in plan.dims]
    order = list(plan.chunk_indices())

    def finish(a: np.ndarray) -> np.ndarray:
        for k, axis in enumerate(keep):  # restore a requested order (index arrays)
            reorder = plan.dims[axis].reorder
            if reorder is not None:
                a = np.take(a, reorder, axis=k)
        return a

    stream: Any = engine.stream(source, order, timeout=timeout)
    done = 0
    try:
        for index, chunk in stream:
            if cancelled():
                return
            sels = tuple(pieces[a][index[a]][1] for a in range(len(plan.dims)))
            block = np.asarray(take_piece(chunk, sels), dtype=np.float64)
            good = np.isfinite(block)
            # the kept axes first (in source order), then reduce over the others
            moved = np.moveaxis(block, keep, list(range(len(keep))))
            gmoved = np.moveaxis(good, keep, list(range(len(keep))))
            flat = moved.reshape(*moved.shape[: len(keep)], -1)
            gflat = gmoved.reshape(flat.shape)
            out = tuple(pieces[a][index[a]][2] for a in keep)
            total_sum[out] += np.where(gflat, flat, 0.0).sum(axis=-1)
            count[out] += gflat.sum(axis=-1)
            lo[out] = np.minimum(lo[out], np.where(gflat, flat, np.inf).min(axis=-1))
            hi[out] = np.maximum(hi[out], np.where(gflat, flat, -np.inf).max(axis=-1))
            done += 1
            with np.errstate(invalid="ignore", divide="ignore"):
                mean = np.where(count > 0, total_sum / np.maximum(count, 1), np.nan)
            mn = np.where(count > 0, lo, np.nan)
            mx = np.where(count > 0, hi, np.nan)
            yield finish(mean), finish(mn), finish(mx), done, len(order)
    finally:
        stream.close()


class RoiStreams:
    """A view controller's region statistics, one region at a time: :meth:`start` streams one
    on a ``name`` thread and stops the one before; the controller's view (its optional
    ``show_roi``) gets partial statistics at most every ``interval`` seconds and the complete
    ones; ``stats`` is the newest."""

    def __init__(self, controller: Any, *, name: str, interval: float = 0.2) -> None:
        self.controller, self.name, self.interval = controller, name, float(interval)
        self.generation = 0
        self.stats: RoiStats | None = None
        self.thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self, region: Region, dim: str, point: Mapping[str, int]) -> threading.Thread:
        region = check_region(self.controller.geometry, region)
        roi_plan(self.controller.geometry, point, dim, region)  # bad input fails here
        with self._lock:
            self.generation += 1
            gen = self.generation
        thread = threading.Thread(target=self._run, args=(gen, dict(point), dim, region),
                                  name=self.name, daemon=True)
        self.thread = thread
        thread.start()
        return thread

    def stop(self) -> None:
        with self._lock:
            self.generation += 1

    def _run(self, gen: int, point: dict[str, int], dim: str, region: Region) -> None:
        ctl = self.controller

        def stale() -> bool:
            return gen != self.generation or bool(ctl.closed)

        where = tuple(sorted(point.items()))
        last = 0.0
        show = getattr(ctl.view, "show_roi", None)
        try:
            for mean, mn, mx, got, total in stream_roi(
                    ctl.source, ctl.geometry, point, dim, region, engine=ctl.engine,
                    cancelled=stale, timeout=ctl.timeout):
                stats = RoiStats(gen, dim, region, where, mean, mn, mx, got, total, got == total)
                if stale():
                    return
                self.stats = stats
                if show is not None and (stats.done or time.monotonic() - last > self.interval):
                    last = time.monotonic()
                    show(stats)
        except TsExploreError as exc:
            if ctl.view is not None and not stale():
                ctl.view.show_error(exc)
