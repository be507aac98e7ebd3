"""Headless view controller: view state -> engine requests, with "latest wins" generations.

The Explorer widget (``tsexplore/ui``) is a thin face over :class:`ViewController`; the
controller never imports a widget library and is tested with a fake view.

- :class:`ViewState` (frozen): the slider indices, the visible region (in index space) and
  the screen size in pixels.
- :func:`resolve` (pure): ``ViewState`` -> :class:`ViewRequest`, the orthogonal key to read
  (strided so the frame has at most about one sample per screen pixel), the chunks it touches
  and the region it covers. When even one sample per pixel would touch more than
  ``max_chunks`` chunks (a far zoomed-out view of a huge plane, no pyramid), the strides grow
  until it does not: the frame gets coarser rather than the engine being flooded.
- :class:`ViewController`: every ``update`` makes a new generation and returns at once (the
  kernel is never blocked by I/O). One background thread (``tsexplore-view-*``) keeps at most
  ONE read in flight; when it completes, the newest pending request is taken and every one in
  between is dropped. A newer generation cancels the queued chunk reads of the older one in the
  engine, and a frame is only delivered when it is newer than the last one delivered.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .engine.array import read_selection
from .engine.planning import plan_selection
from .engine.scheduler import current_engine, get_engine
from .errors import ConfigError, RequestCancelledError, TsExploreError
from .sources.base import ChunkIndex, ChunkSource

Range = tuple[float, float]


@dataclass(frozen=True)
class PlaneGeometry:
    """The array being shown: its shape, chunk grid and which dims are on screen."""

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dims: tuple[str, ...]
    ydim: str
    xdim: str

    def __post_init__(self) -> None:
        if len(self.shape) < 2 or len(self.shape) != len(self.dims) != len(self.chunks):
            raise ConfigError(f"need >= 2 dims with one shape/chunk each, got {self.dims} {self.shape}")
        for name, d in (("ydim", self.ydim), ("xdim", self.xdim)):
            if d not in self.dims:
                raise ConfigError(f"{name}={d!r} is not a dimension; dims are {self.dims}")
        if self.ydim == self.xdim:
            raise ConfigError(f"x and y must be different dims, both are {self.xdim!r}")

    @classmethod
    def of(cls, source: ChunkSource, ydim: str, xdim: str) -> PlaneGeometry:
        return cls(tuple(source.shape), tuple(source.chunks), tuple(source.dims), ydim, xdim)

    @property
    def slider_dims(self) -> tuple[str, ...]:
        return tuple(d for d in self.dims if d not in (self.ydim, self.xdim))

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
    """One frame to read: the key for ``read_selection`` and where the result goes."""

    generation: int
    state: ViewState
    key: tuple[Any, ...]
    region: tuple[tuple[int, int], tuple[int, int]]  # (y0, y1), (x0, x1), half-open indices
    step: tuple[int, int]  # (sy, sx)
    chunks: tuple[ChunkIndex, ...] = field(repr=False)
    transpose: bool = False  # xdim comes before ydim in the source's dims

    @property
    def out_shape(self) -> tuple[int, int]:
        (y0, y1), (x0, x1) = self.region
        return (len(range(y0, y1, self.step[0])), len(range(x0, x1, self.step[1])))


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


def resolve(
    state: ViewState, geom: PlaneGeometry, generation: int = 0, *, max_chunks: int = 256
) -> ViewRequest:
    """Pure planning: the read that shows ``state`` at screen resolution (no I/O)."""
    ay, ax = geom.axis(geom.ydim), geom.axis(geom.xdim)
    ny, nx = geom.shape[ay], geom.shape[ax]
    (y0, y1), (x0, x1) = _clip_range(state.y_range, ny), _clip_range(state.x_range, nx)
    sy = max(1, math.ceil((y1 - y0) / max(1, state.height)))
    sx = max(1, math.ceil((x1 - x0) / max(1, state.width)))
    cy, cx = geom.chunks[ay], geom.chunks[ax]
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
        else:
            i = state.index(dim)
            if not 0 <= i < geom.shape[axis]:
                raise ConfigError(f"index {i} of {dim!r} is outside 0..{geom.shape[axis] - 1}")
            key.append(i)
    plan = plan_selection(tuple(key), geom.shape, geom.chunks)
    return ViewRequest(
        generation=generation,
        state=state,
        key=tuple(key),
        region=((y0, y1), (x0, x1)),
        step=(sy, sx),
        chunks=tuple(plan.chunk_indices()),
        transpose=ax < ay,
    )


# -- colour: pure NumPy, run on the view thread --------------------------------------------


def robust_range(data: np.ndarray, percentiles: tuple[float, float] = (2.0, 98.0)) -> Range:
    """Percentiles of the finite values of ``data`` (subsampled to <= 65536 values)."""
    flat = np.asarray(data).ravel()
    if flat.size > 65536:
        flat = flat[:: flat.size // 65536]
    flat = flat[np.isfinite(flat)]
    if flat.size == 0:
        return (0.0, 1.0)
    lo, hi = (float(v) for v in np.percentile(flat, percentiles))
    if hi <= lo:
        hi = lo + (abs(lo) * 1e-6 or 1.0)
    return (lo, hi)


def to_uint8(data: np.ndarray, clim: Range) -> np.ndarray:
    """Map ``data`` to colour indices 1..255 over ``clim``; NaN (and inf) becomes 0."""
    lo, hi = float(clim[0]), float(clim[1])
    scale = 254.0 / (hi - lo) if hi > lo else 0.0
    x = (np.asarray(data, dtype=np.float32) - np.float32(lo)) * np.float32(scale)
    bad = ~np.isfinite(x)
    np.clip(x, 0, 254, out=x)
    x[bad] = -1
    out = (x + 1.5).astype(np.uint8)
    return out


@dataclass(frozen=True)
class Frame:
    """A finished frame: the data on screen (row = y index ascending) and its colour image."""

    request: ViewRequest
    data: np.ndarray = field(repr=False)
    image: np.ndarray = field(repr=False)  # uint8, same shape as data, 0 = NaN
    clim: Range
    elapsed: float  # seconds from issuing the read to the finished image

    @property
    def generation(self) -> int:
        return self.request.generation


# -- the controller ------------------------------------------------------------------------

_ids = itertools.count(1)
_live: weakref.WeakSet[ViewController] = weakref.WeakSet()


def live_controllers() -> list[ViewController]:
    """Controllers not yet closed, oldest first (the StatsPanel shows the newest one's plane)."""
    return sorted((c for c in list(_live) if not c.closed), key=lambda c: c.id)


class ViewController:
    """Turns view changes into engine reads: one read in flight, newest request wins.

    ``on_frame(frame)`` is called on the view thread for every delivered frame, in increasing
    generation order; ``on_error(exc)`` for a failed read. Use as a context manager, or call
    :meth:`close`.
    """

    def __init__(
        self,
        source: ChunkSource,
        geometry: PlaneGeometry,
        *,
        state: ViewState | None = None,
        on_frame: Callable[[Frame], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        max_chunks: int = 256,
        clim: Range | None = None,
        percentiles: tuple[float, float] = (2.0, 98.0),
        timeout: float | None = None,
        cancel_after: float = 0.1,
    ) -> None:
        if max_chunks < 1:
            raise ConfigError(f"max_chunks must be >= 1, got {max_chunks}")
        self.id = next(_ids)
        self.source = source
        self.geometry = geometry
        self.channel = f"explorer-{self.id}"
        self.on_frame = on_frame
        self.on_error = on_error
        self.max_chunks = int(max_chunks)
        self.clim = clim
        self.percentiles = percentiles
        self.timeout = timeout
        self.cancel_after = float(cancel_after)
        self._issued_at = 0.0
        self._cancel_timer: threading.Timer | None = None
        self._cond = threading.Condition()
        self._state = state or ViewState()
        resolve(self._state, geometry, 0, max_chunks=self.max_chunks)  # validate early
        self._generation = 0
        self._pending: ViewRequest | None = None
        self._outstanding: ViewRequest | None = None
        self._delivered = -1
        self._frame: Frame | None = None
        self._pinned: list[Any] = []
        self._pin_engine: Any = None
        self._closed = False
        #: counters: updates received, slab reads issued, frames delivered, cancelled, errors
        self.counts = dict.fromkeys(("updates", "reads", "frames", "cancelled", "errors"), 0)
        self.last_error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"tsexplore-view-{self.id}", daemon=True
        )
        self._thread.start()
        _live.add(self)

    # -- state -----------------------------------------------------------------------------
    @property
    def state(self) -> ViewState:
        return self._state

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def frame(self) -> Frame | None:
        """The newest delivered frame."""
        return self._frame

    @property
    def closed(self) -> bool:
        return self._closed

    def update(self, **changes: Any) -> int:
        """Change the view (``indices={dim: i}``, ranges, size); returns the new generation.

        Never waits for I/O. The read starts when the one in flight (if any) completes; any
        request still pending then is replaced by this newer one.
        """
        if self._closed:
            raise TsExploreError("this view controller is closed; create a new Explorer")
        with self._cond:
            state = self._state.evolve(**changes)
            self._generation += 1
            gen = self._generation
            request = resolve(state, self.geometry, gen, max_chunks=self.max_chunks)
            self._state = state
            self._pending = request
            self.counts["updates"] += 1
            self._cond.notify_all()
        self._cancel_stale()
        return gen

    def _cancel_stale(self) -> None:
        """Cancel the queued chunk reads of the read in flight when a newer request waits.

        A read gets ``cancel_after`` seconds first, so that fast scrubbing still paints
        frames instead of cancelling every read the moment it starts; after that its queued
        chunks are dropped by the engine (running ones finish and fill the cache).
        """
        with self._cond:
            if self._outstanding is None or self._pending is None or self._closed:
                return
            gen = self._generation
            wait = self._issued_at + self.cancel_after - time.monotonic()
            if wait > 0:
                if self._cancel_timer is None:
                    timer = threading.Timer(wait, self._fire_cancel_timer)
                    timer.name = f"tsexplore-view-{self.id}-cancel"
                    timer.daemon = True
                    self._cancel_timer = timer
                    timer.start()
                return
        get_engine().request(self.source, [], channel=self.channel, generation=gen)

    def _fire_cancel_timer(self) -> None:
        with self._cond:
            self._cancel_timer = None
        self._cancel_stale()

    def refresh(self) -> int:
        """Read the current view again (e.g. after a colour change)."""
        return self.update()

    def wait(self, generation: int | None = None, timeout: float = 30.0) -> Frame:
        """Block until a frame of ``generation`` (default: the newest) or newer is delivered."""
        want = self._generation if generation is None else generation
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._delivered < want:
                if self._closed:
                    raise TsExploreError("the view controller was closed while waiting")
                if self.last_error is not None and self._pending is None and self._outstanding is None:
                    raise self.last_error
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"no frame of generation {want} within {timeout} s "
                        f"(last delivered: {self._delivered})"
                    )
                self._cond.wait(min(left, 0.1))
            assert self._frame is not None
            return self._frame

    # -- the view thread -------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait(0.5)
                if self._closed:
                    return
                request = self._pending
                assert request is not None
                self._pending = None
                self._outstanding = request
                self._issued_at = time.monotonic()
                self.counts["reads"] += 1
            try:
                frame = self._read(request)
            except RequestCancelledError:
                with self._cond:
                    self.counts["cancelled"] += 1
                    self._outstanding = None
                continue
            except BaseException as exc:  # noqa: BLE001 - reported to the view, thread lives on
                with self._cond:
                    self.counts["errors"] += 1
                    self.last_error = exc
                    self._outstanding = None
                    self._cond.notify_all()
                if self.on_error is not None and not self._closed:
                    self.on_error(exc)
                continue
            with self._cond:
                self._outstanding = None
                fresh = frame.generation > self._delivered and not self._closed
                if fresh:
                    self._delivered = frame.generation
                    self._frame = frame
                    self.counts["frames"] += 1
                    self.last_error = None
                self._cond.notify_all()
            if fresh:
                self._pin(request)
                if self.on_frame is not None:
                    try:
                        self.on_frame(frame)
                    except Exception as exc:  # noqa: BLE001 - a view bug must not kill the thread
                        self.last_error = exc

    def _read(self, request: ViewRequest) -> Frame:
        t0 = time.perf_counter()
        data = read_selection(
            self.source,
            request.key,
            channel=self.channel,
            generation=request.generation,
            timeout=self.timeout,
        )
        if request.transpose:
            data = data.T
        clim = self.clim if self.clim is not None else robust_range(data, self.percentiles)
        image = to_uint8(data, clim)
        return Frame(request, data, image, clim, time.perf_counter() - t0)

    def _pin(self, request: ViewRequest) -> None:
        engine = get_engine()
        keys = [engine.key(self.source, idx) for idx in request.chunks]
        engine.cache.pin(keys)
        old_engine, old = self._pin_engine, self._pinned
        self._pin_engine, self._pinned = engine, keys
        if old_engine is not None and old:
            old_engine.cache.unpin(old)

    # -- chunk map -------------------------------------------------------------------------
    def chunk_states(self, max_cells: int = 64) -> tuple[np.ndarray, tuple[int, int, int, int]]:
        """The chunk grid of the current plane: 0 not loaded, 1 in flight, 2 cached,
        3 absent (the store has no such chunk; it reads as the fill value).

        Returns ``(states, (gy0, gy1, gx0, gx1))``: a window of at most ``max_cells`` chunks
        per axis, centred on the visible chunks (the whole plane when it is small enough).
        """
        geom, state = self.geometry, self._state
        ay, ax = geom.axis(geom.ydim), geom.axis(geom.xdim)
        window = []
        for axis, rng in ((ay, state.y_range), (ax, state.x_range)):
            n, c = geom.shape[axis], geom.chunks[axis]
            g = math.ceil(n / c)
            i0, i1 = _clip_range(rng, n)
            lo, hi = i0 // c, (i1 - 1) // c + 1
            if g <= max_cells:
                lo, hi = 0, g
            elif hi - lo > max_cells:
                mid = (lo + hi) // 2
                lo, hi = mid - max_cells // 2, mid - max_cells // 2 + max_cells
            else:
                pad = (max_cells - (hi - lo)) // 2
                lo = max(0, min(g - max_cells, lo - pad))
                hi = lo + max_cells
            window.append((lo, hi))
        (gy0, gy1), (gx0, gx1) = window
        engine = current_engine()  # polled by the StatsPanel: never start an engine here
        token = self.source.token
        cached = set() if engine is None else {
            k[1] for k in engine.cache.keys() if isinstance(k, tuple) and k[0] == token
        }
        flying = set() if engine is None else {k[1] for k in engine.in_flight_keys() if k[0] == token}
        absent = frozenset() if engine is None else engine.absent.indices(token)
        fixed = [
            state.index(d) // geom.chunks[i] if d in geom.slider_dims else None
            for i, d in enumerate(geom.dims)
        ]
        out = np.zeros((gy1 - gy0, gx1 - gx0), dtype=np.uint8)
        for iy in range(gy0, gy1):
            for ix in range(gx0, gx1):
                idx = list(fixed)
                idx[ay], idx[ax] = iy, ix
                t = tuple(idx)
                if t in absent:
                    out[iy - gy0, ix - gx0] = 3
                else:
                    out[iy - gy0, ix - gx0] = 2 if t in cached else (1 if t in flying else 0)
        return out, (gy0, gy1, gx0, gx1)

    # -- lifetime --------------------------------------------------------------------------
    def close(self, timeout: float = 2.0) -> None:
        """Stop the view thread and unpin the chunks on screen."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._pending = None
            timer, self._cancel_timer = self._cancel_timer, None
            self._cond.notify_all()
        if timer is not None:
            timer.cancel()
        if self._outstanding is not None:
            try:
                get_engine().request(
                    self.source, [], channel=self.channel, generation=self._generation + 1
                )
            except TsExploreError:
                pass
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        if self._pin_engine is not None and self._pinned:
            self._pin_engine.cache.unpin(self._pinned)
            self._pinned = []
        _live.discard(self)

    def __enter__(self) -> ViewController:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        c = self.counts
        return (
            f"<ViewController {self.channel} gen={self._generation} delivered={self._delivered} "
            f"updates={c['updates']} reads={c['reads']} frames={c['frames']} "
            f"cancelled={c['cancelled']} errors={c['errors']}>"
        )


# -- profile along a slider dim -------------------------------------------------------------


def profile_chunks(
    geom: PlaneGeometry, point: Mapping[str, int], dim: str
) -> tuple[tuple[Any, ...], list[ChunkIndex]]:
    """The key of the 1-D profile through ``point`` along ``dim`` and its chunks, in order."""
    if dim not in geom.dims:
        raise ConfigError(f"profile dim {dim!r} is not one of {geom.dims}")
    key: list[Any] = []
    for axis, d in enumerate(geom.dims):
        if d == dim:
            key.append(slice(None))
        else:
            i = int(point.get(d, 0))
            if not 0 <= i < geom.shape[axis]:
                raise ConfigError(f"index {i} of {d!r} is outside 0..{geom.shape[axis] - 1}")
            key.append(i)
    plan = plan_selection(tuple(key), geom.shape, geom.chunks)
    return tuple(key), list(plan.chunk_indices())


def stream_profile(
    source: ChunkSource,
    geom: PlaneGeometry,
    point: Mapping[str, int],
    dim: str,
    *,
    cancelled: Callable[[], bool] = lambda: False,
    timeout: float | None = None,
) -> Any:
    """Yield ``(values, filled)`` as the chunks of the profile arrive through the engine.

    ``values`` is a float64 array along ``dim`` (NaN where not read yet); stops early when
    ``cancelled()`` becomes true.
    """
    key, order = profile_chunks(geom, point, dim)
    axis = geom.axis(dim)
    n, clen = geom.shape[axis], geom.chunks[axis]
    values = np.full(n, np.nan)
    filled = 0
    local = tuple(
        slice(None) if a == axis else int(k) % geom.chunks[a] for a, k in enumerate(key)
    )
    stream: Any = get_engine().stream(source, order, timeout=timeout)
    try:
        for index, chunk in stream:
            if cancelled():
                return
            i0 = index[axis] * clen
            piece = np.asarray(chunk[local], dtype=np.float64)
            values[i0 : i0 + piece.shape[0]] = piece
            filled += piece.shape[0]
            yield values, filled
    finally:
        stream.close()
