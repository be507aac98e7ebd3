"""Orthogonal views: the Explorer's plane and the two planes across it, through one point.

``ex.orthogonal()`` (or ``tse.explore(da, ortho=True)``) on an array of 3 or more dims adds,
beside the Explorer's ``yx`` plane, the ``zy`` plane (right of it: y down the side, z across)
and the ``zx`` plane (below it: z up the side, x across), where z is a slider dim (default: the
last one, the dim next to the shown ones). The three meet at a crosshair (:attr:`Orthogonal.point`),
drawn on each:

- a click on any plane moves the point there (a click in ``yx`` picks y and x, in ``zy`` y and
  z, in ``zx`` z and x): the planes through it are read again (a new z moves the Explorer's
  slider);
- the z slider moves the point's z; the other sliders move all three planes;
- pan and zoom are shared along the shared axes (y between ``yx`` and ``zy``, x between ``yx``
  and ``zx``, z between ``zy`` and ``zx``); a zoom in a side plane zooms the Explorer's plane
  by the same factor, keeping its pixels square.

Each side plane is a :class:`~tsexplore.controller.ViewController` of its own over the same
selection: read through the engine at VISIBLE priority on its own channel (a newer view
cancels only its own older reads), strided to the screen (level 0: a pyramid halves y and x,
not z), with the label layer when the Explorer has one, coloured over the Explorer's colour
range (fixed when the planes open, so one value has one colour on all three).
"""

from __future__ import annotations

import functools
import math
import threading
from typing import Any

from ..controller import (
    Frame,
    LabelFrame,
    LabelLayer,
    PlaneGeometry,
    Profile,
    RoiStats,
    ViewController,
    ViewState,
)
from ..engine import get_engine
from ..errors import ConfigError
from ._parts import position
from .canvas import ImageCanvas

#: the side planes' size across (screen pixels): the Explorer's scale, within these bounds
SIDE_MIN, SIDE_MAX = 96, 280
#: the main canvas's traits the side canvases copy (colours are the Explorer's)
SHARED = ("cmap", "clim", "channel_names", "channel_colors", "channel_on", "channel_clims", "rgb", "label_opacity",
          "theme")
NAMES = ("zy", "zx")


class SidePlane:
    """One plane across the Explorer's: a canvas and the controller that reads it (the
    controller's :class:`~tsexplore.controller.View`)."""

    def __init__(self, ex: Any, name: str, ydim: str, xdim: str, box: tuple[int, int], state: ViewState) -> None:
        g = ex.geometry
        self.ex, self.name = ex, name
        self.geometry = PlaneGeometry.of(ex.selection, ydim, xdim, g.channel, g.rgb)
        sizes = dict(zip(g.dims, g.shape))
        self.canvas = ImageCanvas((sizes[ydim], sizes[xdim]), width=box[1], height=box[0], aspect="auto",
                                  cmap=ex.canvas.cmap, dispatch=ex.dispatch.loop, wait_ready=True)
        self.canvas.ack_policy = "eager"
        self.canvas.add_class("tsexplore-ortho-" + name)
        for trait in SHARED:
            setattr(self.canvas, trait, getattr(ex.canvas, trait))
        self.canvas.set_axes(ex.axes[ydim], ex.axes[xdim])
        self.canvas.set_view(state.y_range, state.x_range)
        labels = None
        if ex.label_layer is not None:
            labels = LabelLayer.over(ex.label_layer.selection, self.geometry, ex.label_layer.name)
        self._lock = threading.Lock()
        self._painted = -1
        self.closed = False
        self.controller = ViewController(ex.selection, self.geometry, engine=get_engine(), view=self, state=state,
                                         max_chunks=ex.max_chunks, clim=ex.colour.clim(), labels=labels,
                                         inline_cached=True)
        self.controller.update()

    # -- the controller's View --------------------------------------------------------------
    def show_frame(self, frame: Frame) -> None:
        with self._lock:
            if self.closed or frame.generation < self._painted:
                return
            self._painted = frame.generation
        state = frame.request.state
        g = self.geometry
        where = ", ".join(f"{d}={state.index(d)}" for d in g.slider_dims)
        self.canvas.show(frame.image, frame.extent, frame.clim, generation=frame.generation,
                         label=f"{self.name} · {where}", mode=frame.mode, final=frame.final,
                         clims=frame.clims or None, at=position(state))

    def show_error(self, exc: BaseException) -> None:
        self.ex._report(exc)

    def show_profile(self, profile: Profile) -> None:
        """Side planes stream no profiles."""

    def show_roi(self, stats: RoiStats) -> None:
        """... nor region statistics."""

    def show_labels(self, labels: LabelFrame) -> None:
        if not self.closed:
            self.canvas.show_labels(labels.ids, labels.extent, generation=labels.generation,
                                    at=position(labels.state))

    def update(self, **changes: Any) -> None:
        if not self.closed:
            self.controller.update(**changes)

    def close(self) -> None:
        self.closed = True
        self.controller.close()
        self.canvas.close()


class Orthogonal:
    """The Explorer's plane and two planes across it, linked through a point (module docstring)."""

    def __init__(self, ex: Any, dim: str | None = None) -> None:
        g = ex.geometry
        if len(g.slider_dims) == 0:
            raise ConfigError(f"orthogonal views need an array of 3 or more dims (besides a channel dim); "
                              f"{ex.var_picker.value!r} has {g.dims}")
        z = dim or g.slider_dims[-1]
        if z not in g.slider_dims:
            raise ConfigError(f"dim={z!r} is not a slider dim of this view; it has {list(g.slider_dims)}")
        self.ex, self.z, self.y, self.x = ex, z, g.ydim, g.xdim
        self.sizes = dict(zip(g.dims, g.shape))
        ctl = ex.controller
        s = ctl.state
        self.point = {z: s.index(z), self.y: self.sizes[self.y] // 2, self.x: self.sizes[self.x] // 2}
        if ex.clim_mode.value != "fixed":  # one colour range for the three planes
            ex.clim_mode.value = "fixed"
        scale = min(ex.height / self.sizes[self.y], ex.width / self.sizes[self.x])
        side = max(SIDE_MIN, min(SIDE_MAX, round(self.sizes[z] * scale)))
        others = {d: i for d, i in s.indices if d != z}
        zfull = (-0.5, self.sizes[z] - 0.5)
        self._linking = False
        self.planes = {
            "zy": SidePlane(ex, "zy", self.y, z, (ex.height, side),
                            ViewState(indices=tuple(sorted({**others, self.x: self.point[self.x]}.items())),
                                      y_range=s.y_range, x_range=zfull, height=ex.height, width=side)),
            "zx": SidePlane(ex, "zx", z, self.x, (side, ex.width),
                            ViewState(indices=tuple(sorted({**others, self.y: self.point[self.y]}.items())),
                                      y_range=zfull, x_range=s.x_range, height=side, width=ex.width)),
        }
        for name, plane in self.planes.items():
            plane.canvas.observe(functools.partial(self._side_viewport_change, name), "viewport")
            plane.canvas.on_pixel(functools.partial(self.clicked, name))
        ex.canvas.observe(self._copy, list(SHARED))
        ex.followers.append(self._follow)
        self._lines()

    def _copy(self, change: dict[str, Any]) -> None:
        """The Explorer's colours changed: the side planes show them too (in the browser)."""
        for plane in self.planes.values():
            setattr(plane.canvas, change["name"], change["new"])

    # -- the point ---------------------------------------------------------------------------
    def clicked(self, plane: str, pixel: dict[str, Any]) -> None:
        """A click at ``pixel`` (``iy``, ``ix`` of ``plane``'s own axes) moves the point."""
        iy, ix = int(pixel["iy"]), int(pixel["ix"])
        if plane == "yx":
            self.move(**{self.y: iy, self.x: ix})
        elif plane == "zy":
            self.move(**{self.y: iy, self.z: ix})
        else:
            self.move(**{self.z: iy, self.x: ix})

    def move(self, **point: int) -> None:
        """Move the point (index coordinates of z, y and x; each clipped to its dim): the
        planes through it are read, a new z moves the Explorer's slider."""
        new = {d: max(0, min(self.sizes[d] - 1, int(v))) for d, v in point.items() if d in self.point}
        if not new:
            raise ConfigError(f"the point has dims {list(self.point)}; got {sorted(point)}")
        changed = {d: v for d, v in new.items() if v != self.point[d]}
        self.point.update(new)
        if self.y in changed:
            self.planes["zx"].update(indices={self.y: changed[self.y]})
        if self.x in changed:
            self.planes["zy"].update(indices={self.x: changed[self.x]})
        if self.z in changed:
            self.ex.sliders[self.z].value = changed[self.z]  # the Explorer reads; _follow draws
        self._lines()

    def _lines(self) -> None:
        p = self.point
        self.ex.canvas.crosshair = {"y": p[self.y], "x": p[self.x]}
        self.planes["zy"].canvas.crosshair = {"y": p[self.y], "x": p[self.z]}
        self.planes["zx"].canvas.crosshair = {"y": p[self.z], "x": p[self.x]}

    # -- linking -----------------------------------------------------------------------------
    def _follow(self, _ex: Any, changes: dict[str, Any]) -> None:
        """The Explorer's view changed by ``changes``: the side planes follow."""
        if self._linking:
            return
        self._linking = True
        try:
            others = {d: int(v) for d, v in dict(changes.get("indices", {})).items() if d != self.z}
            if self.z in dict(changes.get("indices", {})):
                self.point[self.z] = int(changes["indices"][self.z])
                self._lines()
            if others:
                for plane in self.planes.values():
                    plane.update(indices=others)
            s = self.ex.controller.state
            if "y_range" in changes:
                self._show(self.planes["zy"], y_range=s.y_range)
            if "x_range" in changes:
                self._show(self.planes["zx"], x_range=s.x_range)
        finally:
            self._linking = False

    @staticmethod
    def _show(plane: SidePlane, y_range: Any = None, x_range: Any = None) -> None:
        s = plane.controller.state
        y: Any = s.y_range if y_range is None else y_range
        x: Any = s.x_range if x_range is None else x_range
        plane.canvas.set_view(y, x)
        plane.update(y_range=(float(y[0]), float(y[1])), x_range=(float(x[0]), float(x[1])))

    def _side_viewport_change(self, name: str, change: dict[str, Any]) -> None:
        self._side_viewport(name, change["new"])

    def _side_viewport(self, name: str, vp: dict[str, Any]) -> None:
        """A pan or zoom in a side plane (the browser's view): its controller reads it, the
        other planes follow along the shared axes."""
        plane = self.planes[name]
        shape = (int(plane.canvas.y_axis["size"]), int(plane.canvas.x_axis["size"]))
        if not vp or tuple(vp.get("shape", shape)) != shape:
            return
        y, x = tuple(map(float, vp["y"])), tuple(map(float, vp["x"]))
        s = plane.controller.state
        if _same(s.y_range, y) and _same(s.x_range, x):
            return
        plane.update(y_range=y, x_range=x, height=int(vp["height"]), width=int(vp["width"]))
        if self._linking:
            return
        self._linking = True
        try:
            main = self.ex.controller.state
            if name == "zy":  # its y is the Explorer's y, its x (z) is zx's y
                self.ex.set_view(y_range=y, x_range=_scaled(main.x_range, main.y_range, y))
                self._show(self.planes["zx"], y_range=x, x_range=self.ex.controller.state.x_range)
            else:  # its x is the Explorer's x, its y (z) is zy's x
                self.ex.set_view(y_range=_scaled(main.y_range, main.x_range, x), x_range=x)
                self._show(self.planes["zy"], y_range=self.ex.controller.state.y_range, x_range=y)
        finally:
            self._linking = False

    def recolour(self, requantise: bool) -> None:
        """The Explorer's colour range changed: the side planes read with it (their canvases
        copied the display range already)."""
        clim = self.ex.colour.clim()
        for plane in self.planes.values():
            plane.controller.clim = clim
            if requantise:
                plane.controller.refresh()

    def wait(self, timeout: float = 30.0) -> dict[str, Frame]:
        """The newest frame of each side plane, once it shows the current point."""
        return {name: p.controller.wait(timeout=timeout) for name, p in self.planes.items()}

    def close(self) -> None:
        self.ex.canvas.unobserve(self._copy, list(SHARED))
        if self._follow in self.ex.followers:
            self.ex.followers.remove(self._follow)
        for plane in self.planes.values():
            plane.close()
        self.ex.canvas.crosshair = {}

    def __repr__(self) -> str:
        return f"<Orthogonal yx/zy/zx through {self.point}>"


def _same(a: Any, b: Any) -> bool:
    return a is not None and all(math.isclose(p, q, rel_tol=1e-9, abs_tol=1e-9) for p, q in zip(a, b))


def _scaled(rng: Any, was: Any, now: Any) -> tuple[float, float]:
    """``rng`` zoomed about its centre by the factor ``was`` -> ``now`` changed by."""
    c, half = (rng[0] + rng[1]) / 2, (rng[1] - rng[0]) / 2
    f = (now[1] - now[0]) / (was[1] - was[0])
    return (c - half * f, c + half * f)
