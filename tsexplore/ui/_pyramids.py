"""The Explorer's pyramid side: the levels it reads, the notice for views without any, the build.

:class:`ExplorerLevels` is given the pyramid the data is a level of (a
:class:`tsexplore.pyramid.Levels`, duck-typed: ``geometry``, ``array``, ``sources``,
``factors``) and the means to build one (:class:`tsexplore.pyramid.ExplorerPyramids`:
``default_target``, ``why_not``, ``build``) -- both from the top of the package, which this
layer may not import. It turns the pyramid into the controller's
:class:`~tsexplore.controller.ViewLevel` list (coarse levels opened on first read), says on
screen when a view without levels shows a subsample, and builds a pyramid on a
``tsexplore-pyramid-*`` thread with a progress bar.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ..controller import Frame, PlaneGeometry, ViewLevel
from ..errors import TsExploreError
from ..resolve import Resolved
from ._parts import PyramidNotice


class ExplorerLevels:
    """Pyramid levels and the build-a-pyramid notice of one Explorer."""

    def __init__(self, w: Any, levels: Any, pyramids: Any, var: str, dispatch: Callable[..., Any]) -> None:
        self.levels, self.pyramids, self.dispatch = levels, pyramids, dispatch
        self.notice = PyramidNotice(w, pyramids is not None, pyramids.default_target(var) if pyramids else "")
        self.thread: threading.Thread | None = None
        self.closed = False

    def view_levels(self, selection: Resolved, g: PlaneGeometry, var: str) -> list[ViewLevel] | None:
        """The levels of ``var`` showing ``g``'s plane, when ``selection`` is the whole
        variable and only the shown dims are downsampled; else None."""
        lv, ydim, xdim = self.levels, g.ydim, g.xdim
        if lv is None or not selection.is_whole or len(lv) < 2:
            return None
        try:
            geo = lv.geometry(ydim, xdim, var)
        except TsExploreError:
            return None
        arrays = [lv.array(k, var) for k in range(len(lv))]
        others = set(g.slider_dims)
        if (any(a is None or a[0] != g.dims for a in arrays) or arrays[0][1] != g.shape
                or any(f.get(d, 1.0) != 1.0 for f in lv.factors for d in others)):
            return None
        out = [ViewLevel.of(selection, ydim, xdim)]
        for k in range(1, len(lv)):
            dims, shape, chunks = arrays[k]
            out.append(ViewLevel.lazy(_opener(lv, k, var), dims, shape, chunks, ydim, xdim,
                                      geo[k].factor, geo[k].offset))
        return out

    # -- the notice ------------------------------------------------------------------------------
    def check(self, frame: Frame, g: PlaneGeometry, nlevels: int, var: str) -> None:
        """Say so when a view without pyramid levels shows a subsample (view thread)."""
        step = frame.request.step
        message = None
        if nlevels == 1 and max(step) > 1:
            ny, nx = g.shape[g.axis(g.ydim)], g.shape[g.axis(g.xdim)]
            message = (f"zoomed out: 1 pixel in {step[0]}×{step[1]} of this {ny:,}×{nx:,} plane is shown "
                       f"(a subsample: there is no pyramid). ")
            why = self._why_not(var)
            message += "Build one to see block means at every zoom:" if why is None else why
        if message is not None or self.notice.shown:
            self.dispatch(self.notice.show, message)

    def _why_not(self, var: str) -> str | None:
        if self.pyramids is None:
            return "Build one with tse.pyramid(...) and explore tse.open_dataset(target)."
        why: str | None = self.pyramids.why_not(var, self.notice.target)
        self.dispatch(self.notice.allow, why is None)
        return why

    def retarget(self, var: str) -> None:
        if self.pyramids is not None:
            self.notice.target = self.pyramids.default_target(var)

    # -- building --------------------------------------------------------------------------------
    def build(self, var: str, dims: tuple[str, str], target: str | None,
              done: Callable[[Any], Any]) -> threading.Thread:
        """Build the pyramid of ``var`` halving ``dims`` into ``target`` (default: the
        notice's path) on a thread; ``done(levels)`` runs on the kernel's thread after."""
        if self.pyramids is None:
            raise TsExploreError("this Explorer cannot build pyramids; use tse.pyramid(...) and "
                                 "tse.explore(tse.open_dataset(target))")
        if self.thread is not None and self.thread.is_alive():
            return self.thread
        path = target or self.notice.target
        self.thread = threading.Thread(target=self._build, args=(var, dims, path, done),
                                       name="tsexplore-pyramid", daemon=True)
        self.notice.progress(0.0)
        self.notice.building(True)
        self.thread.start()
        return self.thread

    def _build(self, var: str, dims: tuple[str, str], path: str, done: Callable[[Any], Any]) -> None:
        last = [0.0]

        def progress(so_far: int, total: int) -> None:
            if self.closed:
                raise TsExploreError("the Explorer was closed while its pyramid was built")
            now = time.monotonic()
            if so_far >= total or now - last[0] > 0.2:
                last[0] = now
                self.dispatch(self.notice.progress, so_far / max(1, total))

        try:
            levels = self.pyramids.build(var, dims, path, progress)
        except Exception as exc:  # noqa: BLE001 - shown in the notice
            self.dispatch(self.notice.show, f"building the pyramid failed: {type(exc).__name__}: {exc}")
            self.dispatch(self.notice.building, False)
            return
        if not self.closed:
            self.dispatch(self._built, levels, done)

    def _built(self, levels: Any, done: Callable[[Any], Any]) -> None:
        self.levels = levels
        self.notice.building(False)
        self.notice.progress(None)
        done(levels)

    def close(self, timeout: float = 5.0) -> None:
        """Stop a build in progress (at its next block) and wait for its thread."""
        self.closed = True
        if self.thread is not None:
            self.thread.join(timeout)


def _opener(levels: Any, k: int, var: str) -> Callable[[], Any]:
    return lambda: levels.sources(k)[var]
