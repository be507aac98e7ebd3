"""The profile through one pixel along a slider dim, streamed chunk by chunk (pure + engine)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..engine import Engine
from ..engine.planning import SelectionPlan, plan_selection, take_piece
from ..errors import ConfigError, TsExploreError
from ..sources.base import ChunkIndex, ChunkSource
from .planning import PlaneGeometry


@dataclass(frozen=True)
class Profile:
    """The values along ``dim`` through ``point`` read so far (NaN where not read yet)."""

    generation: int
    dim: str
    point: tuple[tuple[str, int], ...]
    values: np.ndarray = field(repr=False)
    filled: int
    done: bool


def profile_chunks(
    geom: PlaneGeometry, point: Mapping[str, int], dim: str
) -> tuple[tuple[Any, ...], list[ChunkIndex]]:
    """The source key of the 1-D profile through ``point`` along ``dim`` and its chunks, in order."""
    key, plan = _profile_plan(geom, point, dim)
    return key, list(plan.chunk_indices())


def _profile_plan(
    geom: PlaneGeometry, point: Mapping[str, int], dim: str
) -> tuple[tuple[Any, ...], SelectionPlan]:
    if dim not in geom.dims:
        raise ConfigError(f"profile dim {dim!r} is not one of {geom.dims}")
    return along_plan(geom, point, dim)


def along_plan(
    geom: PlaneGeometry,
    point: Mapping[str, int],
    dim: str,
    *,
    whole: tuple[Any, ...] = (),
    region: tuple[tuple[int, int], tuple[int, int]] | None = None,
) -> tuple[tuple[Any, ...], SelectionPlan]:
    """The source key and plan of all of ``dim`` through ``point`` (indices of the other
    dims): the dims in ``whole`` are taken whole too, and with ``region`` ((y0, y1), (x0, x1))
    the plane's y and x are that range instead of a point (a profile is a 1x1 region)."""
    key: list[Any] = []
    for axis, d in enumerate(geom.dims):
        if d == dim or d in whole:
            key.append(slice(None))
        elif region is not None and d == geom.ydim:
            key.append(slice(*region[0]))
        elif region is not None and d == geom.xdim:
            key.append(slice(*region[1]))
        else:
            i = int(point.get(d, 0))
            if not 0 <= i < geom.shape[axis]:
                raise ConfigError(f"index {i} of {d!r} is outside 0..{geom.shape[axis] - 1}")
            key.append(i)
    source_key = geom.source_key(tuple(key))
    shape, chunks = geom.shape, geom.chunks
    if geom.selection is not None:
        shape, chunks = geom.selection.source.shape, geom.selection.source.chunks
    return source_key, plan_selection(source_key, shape, chunks)


def stream_profile(
    source: ChunkSource,
    geom: PlaneGeometry,
    point: Mapping[str, int],
    dim: str,
    *,
    engine: Engine,
    cancelled: Callable[[], bool] = lambda: False,
    timeout: float | None = None,
) -> Iterator[tuple[np.ndarray, int]]:
    """Yield ``(values, filled)`` as the chunks of the profile arrive through ``engine``.

    ``values`` is a float64 array along ``dim`` (NaN where not read yet); stops early when
    ``cancelled()`` becomes true.
    """
    _, plan = _profile_plan(geom, point, dim)
    along = next(d for d in plan.dims if not d.drop)  # the one kept source axis
    axis = plan.dims.index(along)
    block = np.full(along.length, np.nan)
    got = np.zeros(along.length, dtype=bool)
    pieces = {p[0]: p for p in along.pieces}
    fixed = tuple(d.pieces[0][1] for d in plan.dims)
    stream: Any = engine.stream(source, plan.chunk_indices(), timeout=timeout)
    try:
        for index, chunk in stream:
            if cancelled():
                return
            _, local, out = pieces[index[axis]]
            sels = fixed[:axis] + (local,) + fixed[axis + 1 :]
            block[out] = np.asarray(take_piece(chunk, sels), dtype=np.float64).reshape(-1)
            got[out] = True
            if along.reorder is None:
                yield block, int(got.sum())
            else:  # an index array out of order or with repeats: the profile in its order
                yield block[along.reorder], int(got[along.reorder].sum())
    finally:
        stream.close()


class ProfileStreams:
    """A view controller's profiles, one at a time: :meth:`start` streams one on a ``name``
    thread (a newer one stops it); the controller's view gets partial profiles at most every
    ``interval`` seconds and the complete one, unless a newer one was asked for meanwhile."""

    def __init__(self, controller: Any, *, name: str, interval: float = 0.2) -> None:
        self.controller, self.name, self.interval = controller, name, float(interval)
        self.generation = 0
        self.thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self, point: Mapping[str, int], dim: str) -> threading.Thread:
        with self._lock:
            self.generation += 1
            gen = self.generation
        where = tuple(sorted((str(k), int(v)) for k, v in point.items()))
        thread = threading.Thread(target=self._run, args=(gen, dict(where), dim), name=self.name, daemon=True)
        self.thread = thread
        thread.start()
        return thread

    def _run(self, gen: int, point: dict[str, int], dim: str) -> None:
        ctl = self.controller

        def stale() -> bool:
            return gen != self.generation or bool(ctl.closed)

        last, values, filled = 0.0, None, 0
        try:
            for values, filled in stream_profile(ctl.source, ctl.geometry, point, dim, engine=ctl.engine,
                                                 cancelled=stale, timeout=ctl.timeout):
                if time.monotonic() - last > self.interval:
                    last = time.monotonic()
                    self._show(Profile(gen, dim, tuple(point.items()), values.copy(), filled, False))
        except TsExploreError as exc:
            if ctl.view is not None and not stale():
                ctl.view.show_error(exc)
            return
        if values is not None and not stale():
            self._show(Profile(gen, dim, tuple(point.items()), values.copy(), filled, True))

    def _show(self, profile: Profile) -> None:
        view = self.controller.view
        if view is not None and profile.generation == self.generation:
            view.show_profile(profile)
