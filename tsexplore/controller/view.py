"""The view controller: view changes -> engine reads, "latest wins", pushed to a :class:`View`.

As in ndv's ``ArrayViewer``, the controller owns the request cycle and talks to its view
through a small interface (:class:`View`), so it is tested headless with a mock view. It is
given the engine it reads through (it never starts one).

Every :meth:`ViewController.update` makes a new generation and returns at once (the kernel is
never blocked by I/O). One background thread (``tsexplore-view-*``) keeps at most ONE read in
flight; when it completes, the newest pending request is taken and every one in between is
dropped. A newer generation cancels the queued chunk reads of the older one in the engine
(:meth:`~tsexplore.engine.Engine.cancel`), and a frame is only delivered when it is newer than
the last one delivered. Profiles (:meth:`ViewController.profile_at`) follow the same rule: a
newer click stops the older stream, and only the newest profile reaches the view.

With ``levels`` (a pyramid: :class:`~tsexplore.controller.levels.ViewLevel`, finest first) each
generation reads the level whose resolution matches the screen; when that level is not
cached, a coarser one that is (or that takes at most a few reads) is shown first as a
``"base"`` frame, then the chosen level's chunks as ``"tile"`` frames as they arrive
(:func:`~tsexplore.controller.levels.plan_view`).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from ..engine import Engine
from ..errors import ConfigError, RequestCancelledError, TsExploreError
from ..resolve import Resolved
from ..sources.base import ChunkIndex, ChunkSource
from .ahead import FramesAhead, next_step
from .geometry import LevelGeometry
from .labels import LabelFrame, LabelLayer, labels_cached, read_labels
from .levels import (
    QUICK_CHUNKS,
    ViewLevel,
    ViewPlan,
    check_levels,
    level_state,
    plan_view,
    view_extent,
)
from .planning import Frame, PlaneGeometry, Range, ViewRequest, ViewState
from .profile import Profile, ProfileStreams
from .projection import Projection
from .reading import ChannelRanges, note_cached_read, read_frame, read_tiles
from .roi import Region, RoiStats, RoiStreams

#: seconds between two partial profiles sent to the view while one streams
PROFILE_INTERVAL = 0.2
#: what the view thread's queue hands it when a frame is to be made ahead (see .ahead)
_AHEAD: tuple[int, ViewState] = (-1, ViewState())
#: ... and when the label ids of a frame shown on the caller's thread are to be read
_LABELS: tuple[int, ViewState] = (-2, ViewState())


class View(Protocol):
    """What the controller tells its view. Called on the controller's own threads."""

    def show_frame(self, frame: Frame) -> None:
        """A new frame, newer than every one shown before."""

    def show_error(self, exc: BaseException) -> None:
        """A read failed (the controller keeps running)."""

    def show_profile(self, profile: Profile) -> None:
        """The newest profile so far (``profile.done`` once complete)."""

    def show_roi(self, stats: RoiStats) -> None:
        """The newest region statistics so far (``stats.done`` once complete). Optional: a
        view without it is not told."""

    def show_labels(self, labels: LabelFrame) -> None:
        """The label ids under the newest complete frame (a view with a label layer).
        Optional: a view without it is not told."""


_ids = itertools.count(1)


class ViewController:
    """Turns view changes into engine reads: one read in flight, newest request wins.

    ``source`` is a :class:`~tsexplore.sources.ChunkSource` or a
    :class:`~tsexplore.resolve.Resolved` selection of one; ``geometry`` the plane it shows.
    The ``view`` (optional) is told of every delivered frame (in increasing generation
    order), every failed read and every profile. ``levels``: coarser versions of the same
    plane (a pyramid, finest first, level 0 being ``source`` itself), see the module
    docstring. ``inline_cached``: a view whose chunks are all cached is read and delivered
    on the thread that called :meth:`update` (a few milliseconds of copying and colour
    mapping, no I/O, no thread hop), the others on the view thread as always. Use as a
    context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        source: ChunkSource | Resolved,
        geometry: PlaneGeometry,
        *,
        engine: Engine,
        view: View | None = None,
        state: ViewState | None = None,
        max_chunks: int = 256,
        clim: Range | ChannelRanges | None = None,
        percentiles: tuple[float, float] = (2.0, 98.0),
        timeout: float | None = None,
        cancel_after: float = 0.1,
        levels: Sequence[ViewLevel] | None = None,
        quick_chunks: int = QUICK_CHUNKS,
        inline_cached: bool = False,
        labels: LabelLayer | None = None,
    ) -> None:
        if max_chunks < 1:
            raise ConfigError(f"max_chunks must be >= 1, got {max_chunks}")
        self.selection = source if isinstance(source, Resolved) else Resolved.whole(source)
        if geometry.shape != self.selection.shape:
            raise ConfigError(
                f"the geometry's shape {geometry.shape} is not the selection's {self.selection.shape}"
            )
        self.id = next(_ids)
        self.source = self.selection.source
        self.geometry = geometry if geometry.selection is not None else replace(geometry, selection=self.selection)
        self.levels = self._levels(levels)
        self.engine = engine
        self.view = view
        self.channel = f"explorer-{self.id}"
        self.max_chunks = int(max_chunks)
        self.quick_chunks = int(quick_chunks)
        #: show a view whose chunks are all cached on the thread that asked for it
        self.inline_cached = bool(inline_cached)
        #: the label layer read under each complete frame (:mod:`.labels`), or None
        self.labels = labels
        self._labels_shown = -1
        self._label_job: ViewRequest | None = None
        #: a projection shown instead of the plane's slice (:mod:`.projection`), or None
        self.projection: Projection | None = None
        self.clim = clim
        self.percentiles = percentiles
        self.timeout = timeout
        self.cancel_after = float(cancel_after)
        self._issued_at = 0.0
        self._cancel_timer: threading.Timer | None = None
        self._cond = threading.Condition()
        self._state = state or ViewState()
        self._check_indices(self._state)
        self._generation = 0
        self._pending: tuple[int, ViewState] | None = None
        self._outstanding: tuple[int, ViewState] | None = None
        self._delivered = -1
        self._frame: Frame | None = None
        self._pinned: list[Any] = []
        self._profiles = ProfileStreams(self, name=f"tsexplore-profile-{self.id}", interval=PROFILE_INTERVAL)
        self._rois = RoiStreams(self, name=f"tsexplore-roi-{self.id}", interval=PROFILE_INTERVAL)
        #: the frame a steadily stepping slider shows next, made ahead (``inline_cached``)
        self.ahead = FramesAhead()
        self._step: tuple[str, int] | None = None
        self._last_step: tuple[str, int] | None = None
        self._closed = False
        #: counters: updates received, generations read, frames delivered (pieces included),
        #: cancelled, errors, and reads shown progressively (a coarser level first)
        self.counts = dict.fromkeys(("updates", "reads", "frames", "cancelled", "errors", "progressive"), 0)
        self.last_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"tsexplore-view-{self.id}", daemon=True)
        self._thread.start()

    def _levels(self, levels: Sequence[ViewLevel] | None) -> tuple[ViewLevel, ...]:
        g = self.geometry
        ay, ax = g.axis(g.ydim), g.axis(g.xdim)
        base = ViewLevel(g, LevelGeometry((g.shape[ay], g.shape[ax]), (g.chunks[ay], g.chunks[ax])))
        if not levels or g.channel is not None:  # a composite is read from level 0
            return (base,)
        found = tuple(levels)
        first = found[0]
        if first.plane.shape != g.shape or first.plane.dims != g.dims or first.geometry.factor != (1.0, 1.0):
            raise ConfigError(f"level 0 of the pyramid ({first.plane.dims} {first.plane.shape}, factor "
                              f"{first.geometry.factor}) is not the array shown ({g.dims} {g.shape})")
        out = (replace(base, geometry=replace(base.geometry, chunks=first.geometry.chunks)), *found[1:])
        check_levels(out)
        return out

    def _check_indices(self, state: ViewState) -> None:
        g = self.geometry
        for dim in g.slider_dims:
            i, n = state.index(dim), g.shape[g.axis(dim)]
            if not 0 <= i < n:
                raise ConfigError(f"index {i} of {dim!r} is outside 0..{n - 1}")

    # -- state -----------------------------------------------------------------------------
    @property
    def state(self) -> ViewState:
        return self._state

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def frame(self) -> Frame | None:
        """The newest complete frame (of a progressive read: the whole of it)."""
        return self._frame

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def profile_generation(self) -> int:
        """The newest profile asked for (only it reaches the view)."""
        return self._profiles.generation

    def _is_cached(self, level: int, index: ChunkIndex) -> bool:
        lv = self.levels[level]
        return lv.opened and self.engine.key(lv.source, index) in self.engine.cache

    def plan(self, state: ViewState | None = None, generation: int | None = None) -> ViewPlan:
        """The reads that show ``state`` (default: the current one) now: the level chosen for
        the screen, and a coarser picture first when that level is not cached. Nothing is read."""
        return plan_view(self._state if state is None else state, self.levels,
                         self._generation if generation is None else generation,
                         cached=self._is_cached, max_chunks=self.max_chunks,
                         quick_chunks=self.quick_chunks)

    def request(self) -> ViewRequest:
        """The read that shows the current state, at the level chosen for the screen."""
        return self.plan().steps[-1]

    def level_view(self, level: int | None = None) -> tuple[ViewLevel, ViewState]:
        """Level ``level`` (default: the one chosen for the current view) and the current
        state in its index coordinates."""
        k = self.request().level if level is None else int(level)
        lv = self.levels[k]
        if k == 0:
            return lv, self._state
        return lv, level_state(self._state, lv, view_extent(self._state, self.levels[0]))

    def update(self, **changes: Any) -> int:
        """Change the view (``indices={dim: i}``, ranges, size); returns the new generation.

        Never waits for I/O. The read starts when the one in flight (if any) completes; any
        request still pending then is replaced by this newer one.
        """
        if self._closed:
            raise TsExploreError("this view controller is closed; create a new Explorer")
        with self._cond:
            state = self._state.evolve(**changes)
            self._check_indices(state)
            if self.inline_cached:  # the same step twice: the next one's frame is made ahead
                step = next_step(self._state, state, self.geometry.slider_dims)
                self._step = step if step is not None and step == self._last_step else None
                self._last_step = step
            self._generation += 1
            gen = self._generation
            self._state = state
            self.counts["updates"] += 1
            self.engine.activity.hold(self.channel)  # background streams wait (engine.activity)
            inline = (self.inline_cached and self._outstanding is None and self._pending is None
                      and threading.current_thread() is not self._thread)
            if inline:
                self._outstanding = (gen, state)
            else:
                self._pending = (gen, state)
                self._cond.notify_all()
        if inline:
            self._inline(gen, state)
        else:
            self._cancel_stale()
        return gen

    def _inline(self, generation: int, state: ViewState) -> None:
        """Show ``generation`` on the caller's thread when every chunk it needs is cached
        (``inline_cached``: no thread hop, the frame leaves before the caller returns); else
        hand it to the view thread."""
        if self.projection is not None:  # made from the projection so far: nothing to read
            with self._cond:
                self.counts["reads"] += 1
            self._run_job(generation, state)
            return
        plan = self.plan(state, generation)
        if not plan.progressive and all(self._is_cached(plan.target, c) for c in plan.steps[-1].chunks):
            with self._cond:
                self.counts["reads"] += 1
            self._run_job(generation, state, self.ahead.take(state, self._colour(), plan.steps[-1]))
            self._want_next(state)
            return
        with self._cond:
            self._outstanding = None
            if self._pending is None or self._pending[0] < generation:
                self._pending = (generation, state)
            self._cond.notify_all()

    def _colour(self) -> tuple[Any, ...]:
        """The colour settings a frame is made with (a frame made ahead must match them)."""
        return (self.clim, self.percentiles)

    def _want_next(self, state: ViewState) -> None:
        """After a steady step, make the next step's frame ahead on the view thread."""
        step = self._step
        if step is None:
            return
        dim, d = step
        i = state.index(dim) + d
        g = self.geometry
        if not 0 <= i < g.shape[g.axis(dim)]:
            return
        self.ahead.want(state.evolve(indices={dim: i}), self._colour())
        with self._cond:
            self._cond.notify_all()

    def _make_ahead(self, state: ViewState) -> Frame | None:
        """The frame of ``state`` when every chunk it needs is cached (view thread), else None."""
        try:
            plan = self.plan(state, 0)
            target = plan.steps[-1]
            if plan.progressive or not all(self._is_cached(target.level, c) for c in target.chunks):
                return None
            return read_frame(self.engine, self.levels[target.level], target, channel=None, clim=self.clim,
                              percentiles=self.percentiles, timeout=self.timeout,
                              started=time.perf_counter(), ahead=True)
        except Exception:  # noqa: BLE001 - made as always when its state is asked for
            return None

    def _release_if_idle_locked(self) -> None:
        """Nothing pending or in flight: the view no longer holds the engine's activity."""
        if self._pending is None and self._outstanding is None:
            self.engine.activity.release(self.channel)

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
        self.engine.cancel(self.channel, gen)

    def _fire_cancel_timer(self) -> None:
        with self._cond:
            self._cancel_timer = None
        self._cancel_stale()

    def refresh(self) -> int:
        """Read the current view again (e.g. after a colour change)."""
        return self.update()

    def read(self, state: ViewState | None = None, *, channel: str | None = None,
             timeout: float | None = None) -> Frame:
        """The frame of ``state`` (default: the current view) read now on the calling thread,
        at the level chosen for it, coloured as the view colours its frames -- without showing
        it, and on reads of its own (``channel``, default ``"<this view's>-read"``: the view's
        newer generations do not cancel them). A movie's frames are read so."""
        if self._closed:
            raise TsExploreError("this view controller is closed; create a new Explorer")
        state = self._state if state is None else state
        self._check_indices(state)
        target = self.plan(state, 0).steps[-1]
        return read_frame(self.engine, self.levels[target.level], target, channel=channel or f"{self.channel}-read",
                          clim=self.clim, percentiles=self.percentiles,
                          timeout=self.timeout if timeout is None else timeout, started=time.perf_counter())

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
    def _next_request(self) -> tuple[int, ViewState] | None:
        with self._cond:
            while (self._pending is None and not self._closed and not self.ahead.has_job
                   and self._label_job is None):
                self._cond.wait(0.5)
            if self._closed:
                return None
            if self._pending is None and self._label_job is not None:
                return _LABELS
            if self._pending is None:
                return _AHEAD
            job = self._pending
            self._pending = None
            self._outstanding = job
            self._issued_at = time.monotonic()
            self.counts["reads"] += 1
            return job

    def _run(self) -> None:
        while (job := self._next_request()) is not None:
            if job is _AHEAD:
                wish = self.ahead.take_job()
                if wish is not None:
                    self.ahead.make(wish, self._make_ahead)
                continue
            if job is _LABELS:
                with self._cond:
                    request, self._label_job = self._label_job, None
                if request is not None:
                    self._run_labels(request)
                continue
            self._run_job(*job)

    def _run_job(self, generation: int, state: ViewState, ahead: Frame | None = None) -> None:
        try:
            self._show(generation, state, ahead)
        except RequestCancelledError:
            with self._cond:
                self.counts["cancelled"] += 1
                self._outstanding = None
                self._release_if_idle_locked()
                self._cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - reported to the view, thread lives on
            if self.view is not None and not self._closed:
                self.view.show_error(exc)  # before the waiters wake: they find the view told
            with self._cond:
                self.counts["errors"] += 1
                self.last_error = exc
                self._outstanding = None
                self._release_if_idle_locked()
                self._cond.notify_all()

    def _stale(self, generation: int) -> bool:
        return self._closed or self._generation > generation

    def _show(self, generation: int, state: ViewState, ahead: Frame | None = None) -> None:
        """Read and deliver one generation: one frame, or a coarser base and then tiles
        (``ahead``: its frame, made ahead: the engine is told of the read, then it goes)."""
        started = time.perf_counter()
        projection = self.projection
        if projection is not None:
            self._deliver(projection.frame(state, generation, self.clim, self.percentiles, self.max_chunks, started))
            return
        if ahead is not None:
            note_cached_read(self.engine, self.levels[ahead.request.level], ahead.request, channel=self.channel)
            self._deliver(replace(ahead, elapsed=time.perf_counter() - started))
            self._show_labels(ahead.request)
            return
        plan = self.plan(state, generation)
        target = plan.steps[-1]
        level = self.levels[target.level]
        kw: dict[str, Any] = {"channel": self.channel, "timeout": self.timeout, "started": started}
        if not plan.progressive:
            frame = read_frame(self.engine, level, target, clim=self.clim, percentiles=self.percentiles, **kw)
            self._deliver(frame)
            self._show_labels(target)
            return
        with self._cond:
            self.counts["progressive"] += 1
        first = plan.steps[0]
        base = read_frame(self.engine, self.levels[first.level], first, clim=self.clim,
                          percentiles=self.percentiles, mode="base", final=False, **kw)
        self._deliver(base)
        for frame in read_tiles(self.engine, level, target, plan.order, clim=base.clim,
                                stale=lambda: self._stale(generation), **kw):
            self._deliver(frame, show=frame.mode == "tile")
        self._show_labels(target)

    # -- a projection instead of the slice (see .projection) -----------------------------------
    def project(self, projection: Projection | None) -> int:
        """Show ``projection`` (as it fills in: call :meth:`refresh` after each of its tiles)
        instead of the plane's slice; None: the slice again. The previous projection is
        cancelled. Returns the new generation."""
        with self._cond:
            old, self.projection = self.projection, projection
            self.ahead.drop()
        if old is not None and old is not projection:
            old.cancel()
        return self.update()

    # -- the label layer (see .labels) ------------------------------------------------------
    def _show_labels(self, request: ViewRequest) -> None:
        """Read the label ids under ``request``'s frame and hand them to the view, unless a
        newer view waits (its own labels come with it)."""
        show = getattr(self.view, "show_labels", None)
        if self.labels is None or show is None or self._stale(request.generation) or self.projection is not None:
            return
        if threading.current_thread() is not self._thread and not labels_cached(
                self.engine, self.labels, request, self.geometry):
            with self._cond:  # a read that waits: on the view thread, never the caller's
                self._label_job = request
                self._cond.notify_all()
            return
        labels = self.labels_of(request)
        with self._cond:
            if self._stale(request.generation) or request.generation < self._labels_shown:
                return
            self._labels_shown = request.generation
        show(labels)

    def _run_labels(self, request: ViewRequest) -> None:
        try:
            self._show_labels(request)
        except RequestCancelledError:
            pass
        except BaseException as exc:  # noqa: BLE001 - reported to the view, thread lives on
            if self.view is not None and not self._closed:
                self.view.show_error(exc)

    def labels_of(self, request: ViewRequest, channel: str | None = None) -> LabelFrame:
        """The label ids under ``request``'s frame, read now (``channel``: default the view's)."""
        if self.labels is None:
            raise ConfigError("this view has no label layer")
        return read_labels(self.engine, self.labels, request, self.geometry, channel=channel or self.channel,
                           timeout=self.timeout)

    def _deliver(self, frame: Frame, show: bool = True) -> None:
        """Hand ``frame`` to the view unless a newer generation was completed meanwhile; a
        complete (``"replace"``, ``final``) frame ends its generation. The view has the frame
        before :meth:`wait` returns it (only the view thread delivers)."""
        complete = frame.final and frame.mode == "replace"
        with self._cond:
            fresh = frame.generation > self._delivered and not self._closed
        view_error: Exception | None = None
        if fresh and show and self.view is not None:
            try:
                self.view.show_frame(frame)
            except Exception as exc:  # noqa: BLE001 - a view bug must not kill the thread
                view_error = exc
        with self._cond:
            if complete:
                self._outstanding = None
                self._release_if_idle_locked()
            if fresh and complete:
                self._delivered = frame.generation
                self._frame = frame
                self.last_error = None
            if view_error is not None:
                self.last_error = view_error
            if fresh and show:
                self.counts["frames"] += 1
            self._cond.notify_all()
        if fresh and complete:
            self._pin(frame.request)

    def _pin(self, request: ViewRequest) -> None:
        source = self.levels[request.level].source
        keys = [self.engine.key(source, idx) for idx in request.chunks]
        self.engine.cache.pin(keys)
        old, self._pinned = self._pinned, keys
        if old:
            self.engine.cache.unpin(old)

    # -- profile along a dim (see .profile) -------------------------------------------------
    def profile_at(self, point: Mapping[str, int], dim: str) -> threading.Thread:
        """Stream the profile along ``dim`` through ``point`` (indices of the other dims).

        Returns the thread that streams it. A newer call stops this one; the view gets a
        partial :class:`Profile` at most every ``PROFILE_INTERVAL`` seconds and the complete
        one at the end, unless a newer profile was asked for meanwhile.
        """
        if self._closed:
            raise TsExploreError("this view controller is closed; create a new Explorer")
        return self._profiles.start(point, dim)

    @property
    def profile_thread(self) -> threading.Thread | None:
        return self._profiles.thread

    # -- statistics of a region along a dim (see .roi) -------------------------------------
    @property
    def roi_generation(self) -> int:
        return self._rois.generation

    @property
    def roi_stats(self) -> RoiStats | None:
        """The newest statistics of a region (partial while they stream), or None."""
        return self._rois.stats

    def roi(self, region: Region, dim: str) -> threading.Thread:
        """Stream the mean, min and max of ``region`` (``((y0, y1), (x0, x1))``, half-open)
        along ``dim`` at the other dims' current indices, as PLANNED reads, to the view's
        ``show_roi``; a newer call (or :meth:`stop_roi`) stops it. Returns the thread."""
        if self._closed:
            raise TsExploreError("this view controller is closed; create a new Explorer")
        return self._rois.start(region, dim, {d: i for d, i in self._state.indices if d != dim})

    def stop_roi(self) -> None:
        self._rois.stop()

    # -- lifetime --------------------------------------------------------------------------
    def close(self, timeout: float = 2.0) -> None:
        """Stop the view and profile threads, cancel queued reads, unpin the chunks on screen."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._pending = None
            self.ahead.drop()
            timer, self._cancel_timer = self._cancel_timer, None
            self._cond.notify_all()
        if timer is not None:
            timer.cancel()
        if self.projection is not None:
            self.projection.cancel()
            self.projection.join(timeout)
        if not self.engine.closed:
            self.engine.cancel(self.channel)
        self.engine.activity.release(self.channel)
        for thread in (self._thread, self.profile_thread, self._rois.thread):
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout)
        if self._pinned:
            self.engine.cache.unpin(self._pinned)
            self._pinned = []

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
