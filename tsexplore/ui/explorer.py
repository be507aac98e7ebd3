"""The Explorer widget: a thin ipywidgets face over :class:`ViewController`, drawn on the
image canvas (:class:`~tsexplore.ui.canvas.ImageCanvas`).

Frames travel to the browser at screen resolution as ``uint8`` colour indices (one byte per
pixel, 0 = NaN), raw on a fast link and lossless PNG/WebP on a slow one (``encoding="auto"``);
the browser applies the colour table, so a colormap change repaints there, and so does a
display-range change when the indices allow it. Pan and zoom move the picture in the browser at
once and send the new region (``viewport``) to the controller, which reads only the chunks
on screen -- at the pyramid level that fits the screen when the data has levels
(``levels=``: ``ds.tse.levels``), a coarser level first, then the chosen level's tiles as they
arrive. Without a pyramid, a zoomed-out view that shows a subsample says so and offers to
build one. The slider of the first other dim lives in the canvas (``slider="canvas"``, with
its play button; the fastest path measured) or is an ipywidgets slider
(``slider="ipywidgets"``); a click streams the profile through the pixel (bokeh).
The Explorer is the controller's :class:`~tsexplore.controller.View` (frames come from the
controller's thread, or from the comm handler itself when all is cached). The variable shown
is exactly the selection it was given (``ds.temp.sel(lat=slice(...))``).

Beyond one plane (each in a module of its own): a colour bar per visible channel and the
page's theme (:mod:`.theme`), a label layer over the image (``labels=``,
:mod:`~tsexplore.controller.labels`), orthogonal planes through a crosshair (:meth:`orthogonal`,
:mod:`.ortho`), a projection along a dim (:meth:`project`,
:mod:`~tsexplore.controller.projection`), pictures (:meth:`snapshot`, :meth:`movie`, the PNG
a notebook keeps: :mod:`.export`) and a saved view (:attr:`state`, ``state=``: :mod:`.state`).
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import numpy as np

from ..controller import (
    Frame,
    LabelFrame,
    LabelLayer,
    PlaneGeometry,
    Profile,
    Projection,
    RoiStats,
    ViewController,
    ViewLevel,
    ViewState,
)
from ..engine import get_engine
from ..errors import ConfigError, TsExploreError
from . import export
from . import state as view_state
from ._axes import AxisMap
from ._colour import ExplorerColour
from ._kernel import Dispatcher
from ._parts import (
    as_dataset,
    block,
    channel_of,
    dropdown,
    frame_info,
    hover_text,
    label_candidates,
    looks_like_labels,
    position,
    row,
    selection_of,
    slider_rows,
)
from ._pyramids import ExplorerLevels
from .canvas import CMAPS, ImageCanvas, axis_spec
from .ortho import Orthogonal
from .planes import watch
from .profile import ProfilePanel
from .roi import RoiHandle, RoiPanel, RoiPlot
from .theme import ThemedPlots

SLIDERS = ("canvas", "ipywidgets")
PROFILE_WIDTH = 300
#: the StatsPanel's narrowest width: beside the image when the row has this much room left
STATS_MIN_WIDTH = 320


class _Bound:
    """The controller's view: the Explorer, for one build (frames of a replaced one are dropped)."""

    def __init__(self, explorer: Explorer, build: int) -> None:
        self.explorer, self.build = explorer, build

    def show_frame(self, frame: Frame) -> None:
        self.explorer._paint(frame, self.build)

    def show_error(self, exc: BaseException) -> None:
        self.explorer._report(exc)

    def show_profile(self, profile: Profile) -> None:
        self.explorer.profiles.update(profile, self.build)

    def show_roi(self, stats: RoiStats) -> None:
        self.explorer.rois.update(stats, self.build)

    def show_labels(self, labels: LabelFrame) -> None:
        self.explorer._paint_labels(labels, self.build)


class Explorer:
    """Browse one variable of a Dataset: pickers, sliders, a zoomable image, a profile."""

    def __init__(
        self,
        obj: Any,
        var: str | None = None,
        *,
        x: str | None = None,
        y: str | None = None,
        width: int = 560,
        height: int = 420,
        cmap: str = "viridis",
        clim: tuple[float, float] | None = None,
        max_chunks: int = 256,
        stats: bool = True,
        colorbar: bool = True,
        view: dict[str, Any] | None = None,
        dispatch: Any = "auto",
        slider: str = "canvas",
        aspect: str = "equal",
        encoding: str = "auto",
        levels: Any = None,
        pyramids: Any = None,
        channel: Any = "auto",
        labels: Any = "auto",
        ortho: bool | str = False,
        state: dict[str, Any] | None = None,
    ) -> None:
        self.ds = as_dataset(obj)
        if state is not None:  # a saved view (ex.state): what it says wins
            saved = view_state.explorer_arguments(state, {"var": var, "x": x, "y": y})
            var, y, x = saved.get("var", var), saved.get("y", y), saved.get("x", x)
            cmap, width, height, view = saved["cmap"], saved["width"], saved["height"], saved["view"]
            channel, labels, ortho = saved["channel"], saved.get("labels", None), saved.get("ortho", False)
        self.names = [n for n, v in self.ds.data_vars.items() if v.ndim >= 2]
        if not self.names:
            raise TsExploreError(f"no variable with 2 or more dims to show; got {list(self.ds.data_vars)}")
        # shown first: a variable that is not a segmentation
        var = var or next((n for n in self.names if not looks_like_labels(self.ds[n])), self.names[0])
        if var not in self.names:
            raise ConfigError(f"var={var!r} is not one of the 2-D+ variables {self.names}")
        if cmap not in CMAPS:
            raise ConfigError(f"cmap={cmap!r} is not one of {CMAPS}")
        if slider not in SLIDERS:
            raise ConfigError(f"slider must be one of {SLIDERS}, got {slider!r}")
        self.width, self.height, self.max_chunks = int(width), int(height), int(max_chunks)
        self.slider_kind = slider
        self._channel_arg = channel
        self._labels_arg = labels
        #: the projection shown instead of the slice (:meth:`project`), or None
        self.projection: Projection | None = None
        self._setting_projection = False
        #: the orthogonal planes (:meth:`orthogonal`), or None; the dim they cross at, wanted
        self.ortho: Orthogonal | None = None
        self._ortho_dim: str | None = (ortho if isinstance(ortho, str) else "") if ortho else None
        self.label_layer: LabelLayer | None = None
        self.dispatch = Dispatcher() if dispatch == "auto" else Dispatcher(dispatch)
        self.controller: ViewController | None = None
        self._builds = 0
        self._gen_offset = 0
        self._painted = -1
        self._closed = False
        self._paint_lock = threading.Lock()
        self._initial_view = dict(view or {})
        self.painted_frames = 0
        self.stats_panel: Any = None
        self.profile_width = PROFILE_WIDTH
        #: called with ``(self, changes)`` after each view change (linked views follow)
        self.followers: list[Any] = []
        self._make_widgets(var, x, y, cmap, clim, aspect, encoding, stats, levels, pyramids, colorbar)
        self.poster = export.Poster(self, self.dispatch.loop)
        self._observe_controls()
        if state is not None:
            self.colour.restored = view_state.initial_ranges(state)[1]
        self._build()
        if ortho and self.ortho is None:
            self.close()
            raise ConfigError(f"orthogonal views need an array of 3 or more dims (besides a channel dim); "
                              f"{self.var_picker.value!r} has {tuple(self.ds[self.var_picker.value].dims)}")
        if state is not None:
            view_state.restore(self, state)

    @property
    def state(self) -> dict[str, Any]:
        """The view as a JSON-able dict: variable, dims, slider indices, the region on screen,
        size, colormap, colour ranges, channels, labels, crosshair and projection
        (:mod:`~tsexplore.ui.state`). ``tse.explore(ds, state=s)`` shows exactly this view."""
        return view_state.state_of(self)

    def _make_widgets(self, var: str, x: str | None, y: str | None, cmap: str, clim: Any, aspect: str,
                      encoding: str, stats: bool, levels: Any, pyramids: Any, colorbar: bool) -> None:
        """The controls, the canvas, the notice, the profile's place and (maybe) the StatsPanel,
        in blocks that wrap (see ``_parts``)."""
        import ipywidgets as w

        dims = self._plane_dims(var)
        if (y or dims[-2]) not in dims or (x or dims[-1]) not in dims:
            raise ConfigError(f"x={x!r} and y={y!r} must be dims of {var!r} other than its channel dim; "
                              f"it has {tuple(self.ds[var].dims)}")
        self.var_picker = dropdown(w, "variable", self.names, var, "190px")
        self.y_picker = dropdown(w, "y", dims, y or dims[-2], "130px")
        self.x_picker = dropdown(w, "x", dims, x or dims[-1], "130px")
        self.cmap_picker = dropdown(w, "colormap", list(CMAPS), cmap, "170px")
        self.proj_op = dropdown(w, "projection", [("slice", ""), ("max", "max"), ("mean", "mean"), ("min", "min")],
                                "", "160px")
        self.proj_dim = dropdown(w, "along", [""], "", "140px")
        self.proj_bar = w.FloatProgress(value=0.0, min=0.0, max=1.0, description="",
                                        layout=w.Layout(width="120px", flex="0 0 auto", display="none"))
        self.opacity = w.FloatSlider(value=0.5, min=0.0, max=1.0, step=0.05, description="labels",
                                     readout_format=".2f", style={"description_width": "initial"},
                                     layout=w.Layout(width="210px", flex="0 0 auto", display="none"))
        self.opacity.add_class("tse-labels-opacity")  # not a dimension's slider (tests find those)
        # the range fields the user sees are in the canvas, beside the histogram (filled from
        # each frame: no message of their own); clim_lo / clim_hi are their kernel side
        self.colour = ExplorerColour(self, w, clim)
        self.clim_mode, self.clim_lo, self.clim_hi = self.colour.mode, self.colour.lo, self.colour.hi
        self.info = w.HTML(value="", layout=w.Layout(max_width=f"{self.width + 72}px"))
        plane = (int(self.ds[var].sizes[y or dims[-2]]), int(self.ds[var].sizes[x or dims[-1]]))
        self.canvas = ImageCanvas(plane, width=self.width, height=self.height, cmap=cmap, aspect=aspect,
                                  encoding=encoding, dispatch=self.dispatch.loop, wait_ready=True,
                                  colorbar=bool(colorbar))
        #: the bokeh plots (profile, region statistics, StatsPanel) in the page's theme
        self.themed = ThemedPlots()
        self.canvas.ack_policy = "lazy" if self.slider_kind == "canvas" else "eager"
        self.sliders: dict[str, Any] = {}
        self.readouts: dict[str, Any] = {}
        self.players: dict[str, Any] = {}
        self.slider_box = w.VBox()
        self.pyramid = ExplorerLevels(w, levels, pyramids, var, self.dispatch)
        self.profiles = ProfilePanel(self, block(w, []))
        self.rois = RoiPanel(self, block(w, []))
        controls = [row(w, [self.var_picker, self.y_picker, self.x_picker]),
                    row(w, [self.cmap_picker, self.clim_mode, self.opacity]),
                    row(w, [self.proj_op, self.proj_dim, self.proj_bar])]
        self.main = block(w, [*controls, self.canvas, self.slider_box, self.notice.box, self.info],
                          max_width=f"{max(self.canvas.outer_width + 4, 480)}px")
        children = [self.main]
        if stats:
            from .stats_panel import StatsPanel

            # beside the image when the row has room for its narrowest, else below it across
            # the whole row (its plots then side by side)
            self.stats_panel = StatsPanel(explorer=self, themed=self.themed)
            self.stats_panel.widget.layout.flex = f"1 1 {STATS_MIN_WIDTH}px"
            self.stats_panel.widget.layout.min_width = f"{STATS_MIN_WIDTH}px"
            self.stats_panel.widget.layout.margin = "0 16px 8px 0"
            children.append(self.stats_panel.widget)
        children += [self.profiles.box, self.rois.box]
        self.widget = w.Box(children, layout=w.Layout(display="flex", flex_flow="row wrap",
                                                      align_items="flex-start"))
        self.widget.add_class("tsexplore-explorer")

    def _observe_controls(self) -> None:
        self.var_picker.observe(self._on_var, "value")
        for picker in (self.y_picker, self.x_picker):
            picker.observe(self._on_dims, "value")
        self.cmap_picker.observe(self._on_cmap, "value")
        self.opacity.observe(lambda ch: setattr(self.canvas, "label_opacity", float(ch["new"])), "value")
        self.proj_op.observe(self._on_projection_control, "value")
        self.proj_dim.observe(self._on_projection_control, "value")
        self.canvas.on_clim(self.colour.picked)
        self.canvas.observe(self._on_viewport, "viewport")
        self.canvas.observe(self._on_canvas_slider, "slider_value")
        self.canvas.on_pixel(self._clicked)
        self.canvas.on_hover(self._hover_text)
        self.canvas.on_roi(self.rois.dragged)
        self.canvas.observe(lambda ch: self.themed.set(ch["new"]), "theme")
        # what the browser recolours without a new frame: the poster is made again too
        self.canvas.observe(lambda _ch: self.poster.changed(), list(export.POSTER_TRAITS))
        self.notice.on_build = self.build_pyramid

    # -- building --------------------------------------------------------------------------
    def _build(self) -> None:
        """(Re)build controller, sliders and plots for the current variable and x/y dims."""
        with self.dispatch.lock:  # without a kernel, paints run on the view thread
            self._build_locked()

    def _build_locked(self) -> None:
        if self.ortho is not None:
            self._close_ortho()
        self._end_projection()
        if self.controller is not None:
            self.controller.close()
            self._gen_offset += self.controller.generation + 1
        with self._paint_lock:
            self._builds += 1
            self._painted = -1
        var, ydim, xdim = self.var_picker.value, self.y_picker.value, self.x_picker.value
        da = self.ds[var]
        self.da = da
        self.selection = selection_of(self.ds, var)
        self.source = self.selection.source
        channel, rgb = channel_of(da, self._channel_arg)
        self.geometry = PlaneGeometry.of(self.selection, ydim, xdim, channel, rgb)
        self.label_layer = self._find_labels(var)
        self.opacity.layout.display = "flex" if self.label_layer is not None else "none"
        self.colour.reset(self.geometry, da)
        self.axes = {d: AxisMap.of(da, d) for d in da.dims}
        self.canvas.value_axis = {"label": str(da.attrs.get("long_name") or var), "units": str(da.attrs.get("units", ""))}
        self.main.layout.max_width = f"{max(self.canvas.outer_width + 4, 480)}px"  # its colour bars
        view = self._initial_view
        self._initial_view = {}
        indices = {d: int(view.get(d, 0)) for d in self.geometry.slider_dims}
        c = self.canvas
        with c.hold_sync():
            c.clear()
            c.set_axes(self.axes[ydim], self.axes[xdim])
            c.title = f"{var} (loading)"
            c.slider = self._canvas_slider(indices)
            if c.slider:
                c.slider_value = indices[self.geometry.slider_dims[0]]
        (yr, xr_) = c.fitted(view.get("y_range"), view.get("x_range"))
        c.set_view(yr, xr_)
        state = ViewState(indices=tuple(sorted(indices.items())), y_range=yr, x_range=xr_,
                          height=self.height, width=self.width)
        self.controller = ViewController(
            self.selection, self.geometry, engine=get_engine(), view=_Bound(self, self._builds),  # type: ignore[arg-type]
            state=state, max_chunks=self.max_chunks, clim=self.colour.clim(),
            levels=None if channel else self.pyramid.view_levels(self.selection, self.geometry, var),
            inline_cached=True,  # a cached slider move is sent from the comm handler itself
            labels=self.label_layer,
        )
        watch(self.controller)
        self._build_sliders(indices)
        self._setting_projection = True
        try:
            dims = list(self.geometry.slider_dims)
            self.proj_dim.options = dims or [""]
            self.proj_dim.value = dims[-1] if dims else ""
            self.proj_op.value = ""
            self.proj_op.disabled = self.proj_dim.disabled = not dims
        finally:
            self._setting_projection = False
        self.profiles.reset()
        self.rois.drop()
        self.notice.show(None)
        self.controller.update()
        if self._ortho_dim is not None and self.geometry.slider_dims:
            self._open_ortho(self._ortho_dim or None)

    def _find_labels(self, var: str) -> LabelLayer | None:
        """The label layer over ``var`` (``labels=``): the first candidate that fits it. One
        given by name or as a DataArray must fit; others that do not are passed over."""
        arg = self._labels_arg
        given = arg is not None and arg is not False and not (isinstance(arg, str) and arg == "auto")
        for name, holder in label_candidates(self.ds, var, self._labels_arg):
            try:
                return LabelLayer.over(selection_of(holder, name), self.geometry, name)
            except ConfigError:
                if given:
                    raise
        return None

    @property
    def labels(self) -> str | None:
        """The name of the label layer drawn over the image (None: none)."""
        return None if self.label_layer is None else self.label_layer.name

    @property
    def label_opacity(self) -> float:
        """How opaque the label layer is drawn (0..1)."""
        return float(self.opacity.value)

    @label_opacity.setter
    def label_opacity(self, value: float) -> None:
        self.opacity.value = max(0.0, min(1.0, float(value)))

    def _paint_labels(self, labels: LabelFrame, build: int) -> None:
        """The label ids under the newest frame (a controller thread)."""
        with self._paint_lock:
            if build != self._builds or self._closed:
                return
            gen = self._gen_offset + labels.generation
        self.canvas.show_labels(labels.ids, labels.extent, generation=gen, at=position(labels.state))

    def _plane_dims(self, var: str) -> list[str]:
        """The dims of ``var`` that can be shown as y and x (all but the channel dim)."""
        channel, _ = channel_of(self.ds[var], self._channel_arg)
        return [str(d) for d in self.ds[var].dims if d != channel]

    @property
    def channels(self) -> list[str]:
        """The names of the composite's channels ([] without a channel dim)."""
        return self.colour.channels

    def show_channel(self, channel: int | str, on: bool = True) -> None:
        """Show (or hide) one channel of the composite (blended again in the browser)."""
        self.colour.show_channel(channel, on)

    def clim_in_use(self, channel: int = 0) -> tuple[float, float]:
        """The colour range ``channel`` is shown with now (fixed, or the frame's robust one)."""
        return self.colour.in_use(channel)

    def set_clim(self, lo: float | None = None, hi: float | None = None, channel: int = 0) -> None:
        """Fix the colour range of ``channel`` (a bound not given keeps the one in use)."""
        self.colour.set(lo, hi, channel)

    def _canvas_slider(self, indices: dict[str, int]) -> dict[str, Any]:
        dims = self.geometry.slider_dims
        if self.slider_kind != "canvas" or not dims:
            return {}
        return dict(axis_spec(self.axes[dims[0]]), interval=200)

    def _build_sliders(self, indices: dict[str, int]) -> None:
        canvas_dim = self.geometry.slider_dims[0] if self.slider_kind == "canvas" and self.geometry.slider_dims else None
        rows, self.sliders, self.readouts, self.players = slider_rows(
            self.canvas, self.geometry.slider_dims, canvas_dim, {d: int(self.da.sizes[d]) for d in self.da.dims},
            indices, self.axes, self._on_index)
        self.slider_box.children = rows

    @property
    def _profile_height(self) -> int:
        return max(200, self.height // 2 + 60)

    @property
    def profile_dim(self) -> str | None:
        dims = self.geometry.slider_dims
        return dims[0] if dims else None

    @property
    def levels(self) -> tuple[ViewLevel, ...]:
        """The levels the controller reads (one: no pyramid)."""
        assert self.controller is not None
        return self.controller.levels

    # -- events ----------------------------------------------------------------------------
    def _on_index(self, dim: str, value: int) -> None:
        if dim in self.readouts:
            self.readouts[dim].value = self.axes[dim].label(int(value))
        assert self.controller is not None
        self._update(indices={dim: int(value)})

    def _on_canvas_slider(self, change: Any) -> None:
        dims = self.geometry.slider_dims
        if self.slider_kind == "canvas" and dims and self.controller is not None:
            self._update(indices={dims[0]: int(change["new"])})

    def _update(self, **changes: Any) -> None:
        """Change the view, and tell the views linked to this one (``followers``). A new index
        of the projected dim ends a projection (its slice is shown); of another dim, the
        projection starts again there."""
        assert self.controller is not None
        proj = self.projection
        moved = dict(changes.get("indices", {}))
        if proj is not None and moved and any(proj.indices.get(d, v) != v or d == proj.dim for d, v in moved.items()):
            if proj.dim in moved:
                self.project(None)
            else:
                self.controller.update(**changes)
                self.project(proj.op, dim=proj.dim)
                for follow in list(self.followers):
                    follow(self, changes)
                return
        self.controller.update(**changes)
        for follow in list(self.followers):
            follow(self, changes)

    def _on_viewport(self, change: Any) -> None:
        """The browser's view (after a pan, a zoom, a reset or a new size)."""
        vp, ctl = change["new"], self.controller
        if ctl is None or not vp:
            return
        g = self.geometry
        if tuple(vp.get("shape", ())) not in ((), (g.shape[g.axis(g.ydim)], g.shape[g.axis(g.xdim)])):
            return  # made for the axes of another plane (before this one's reached the browser)
        s = ctl.state
        want = (tuple(vp["y"]), tuple(vp["x"]), int(vp["height"]), int(vp["width"]))
        have = (s.y_range, s.x_range, s.height, s.width)
        if have[2:] == want[2:] and all(
                r is not None and all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9) for a, b in zip(r, q))
                for r, q in zip(have[:2], want[:2])):
            return
        self._update(y_range=want[0], x_range=want[1], height=want[2], width=want[3])

    def set_view(self, y_range: Any = None, x_range: Any = None) -> None:
        """Show this region (edges in index coordinates; None: the whole axis), widened to
        the screen's aspect as the browser shows it."""
        if self.controller is None:
            return
        yr, xr_ = self.canvas.fitted(y_range, x_range)
        self.canvas.set_view(yr, xr_)
        self._update(y_range=yr, x_range=xr_)

    def set_ranges(self, x_range: Any = None, y_range: Any = None) -> None:
        """Show the coordinate ranges ``x_range``/``y_range`` (what a pan or zoom shows)."""
        if x_range is None or y_range is None:
            return
        geom = self.geometry
        self.set_view(self.axes[geom.ydim].index_range(*y_range), self.axes[geom.xdim].index_range(*x_range))

    def _on_var(self, change: Any) -> None:
        dims = self._plane_dims(change["new"])
        with self.y_picker.hold_trait_notifications(), self.x_picker.hold_trait_notifications():
            self.y_picker.unobserve(self._on_dims, "value")
            self.x_picker.unobserve(self._on_dims, "value")
            self.y_picker.options, self.x_picker.options = dims, dims
            self.y_picker.value, self.x_picker.value = dims[-2], dims[-1]
            self.y_picker.observe(self._on_dims, "value")
            self.x_picker.observe(self._on_dims, "value")
        self.pyramid.retarget(change["new"])
        self._build()

    def _on_dims(self, change: Any) -> None:
        other = self.x_picker if change["owner"] is self.y_picker else self.y_picker
        if other.value == change["new"]:  # picking the other axis' dim swaps the two
            other.unobserve(self._on_dims, "value")
            other.value = change["old"]
            other.observe(self._on_dims, "value")
        self._build()

    def _on_cmap(self, change: Any) -> None:
        self.canvas.cmap = change["new"]  # the browser recolours: nothing is read or sent

    # -- the controller's View (called on its threads) --------------------------------------
    def _paint(self, frame: Frame, build: int) -> None:
        """Hand ``frame`` to the canvas unless a newer generation was painted (view thread)."""
        ctl = self.controller
        with self._paint_lock:
            if build != self._builds or ctl is None or self._closed or frame.generation < self._painted:
                return
            gen = self._gen_offset + frame.generation
            dims = self.geometry.slider_dims
            index = frame.request.state.index(dims[0]) if dims else None
            self.canvas.show(frame.image, frame.extent, frame.clim, generation=gen, label=self._title(frame),
                             index=index, mode=frame.mode, info=frame_info(frame, len(self.levels)), final=frame.final,
                             clims=frame.clims or None, hists=frame.hists, at=position(frame.request.state))
            self._painted = frame.generation
            self.painted_frames += 1
        if frame.final:
            self.pyramid.check(frame, self.geometry, len(self.levels), self.var_picker.value)
            self.poster.changed()

    def _report(self, exc: BaseException) -> None:
        self.dispatch(self._show_error, exc)

    def _show_error(self, exc: BaseException) -> None:
        self.info.value = f"<span style='color:#b00'>read failed: {type(exc).__name__}: {exc}</span>"

    def _title(self, frame: Frame) -> str:
        state, proj = frame.request.state, self.projection
        dims = [d for d in self.geometry.slider_dims if proj is None or d != proj.dim]
        parts = [f"{d}={state.index(d)} ({self.axes[d].label(state.index(d))})" for d in dims]
        return " · ".join([self.var_picker.value, *([proj.title] if proj is not None else []), *parts])

    @property
    def painted_generation(self) -> int:
        """The controller generation of the newest frame handed to the canvas."""
        return self._painted

    # -- projections -------------------------------------------------------------------------
    def project(self, op: str | None, dim: str | None = None) -> Projection | None:
        """Show the ``op`` (``"max"``, ``"mean"`` or ``"min"``) of the variable along ``dim``
        (default: the last slider dim) at the other sliders' positions instead of the slice,
        streamed through ``tse.reduce`` tile by tile (nearest the middle of the view first; the
        picture fills in as tiles complete, a progress bar shows). Moving the slider of ``dim``
        ends it; moving another starts it again there. ``op=None``: the slice again. Returns the
        :class:`~tsexplore.controller.Projection` (``.result()`` is a DataArray)."""
        ctl = self.controller
        assert ctl is not None
        g = self.geometry
        if op is None:
            self._end_projection()
            self._controls_show(None)
            return None
        dim = dim or (self.ortho.z if self.ortho is not None else (g.slider_dims[-1] if g.slider_dims else None))
        if dim is None:
            raise ConfigError(f"{self.var_picker.value!r} has no slider dim to project along; it has {g.dims}")
        s = ctl.state
        (y0, y1), (x0, x1) = (s.y_range or (0, 0)), (s.x_range or (0, 0))
        proj = Projection(self.da, op, dim, g, dict(s.indices), on_update=self._projected,
                          centre=((y0 + y1) / 2, (x0 + x1) / 2) if s.y_range and s.x_range else None)
        old, self.projection = self.projection, proj
        if old is not None:
            old.cancel()
        self.canvas.show_labels(None)
        ctl.project(proj)
        self._controls_show(proj)
        return proj

    def _end_projection(self) -> None:
        proj, self.projection = self.projection, None
        if proj is not None:
            proj.cancel()
            if self.controller is not None and not self.controller.closed:
                self.controller.project(None)

    def _projected(self, proj: Projection) -> None:
        """A tile of the projection is done (its thread): show the projection so far."""
        ctl = self.controller
        if proj is not self.projection or ctl is None or ctl.closed:
            return
        if proj.error is not None:
            self._report(proj.error)
        ctl.refresh()
        self.dispatch(self._controls_show, proj)

    def _controls_show(self, proj: Projection | None) -> None:
        """The projection controls say what is shown (kernel thread)."""
        if proj is not None and proj is not self.projection:
            return
        self._setting_projection = True
        try:
            self.proj_op.value = proj.op if proj is not None else ""
            if proj is not None:
                self.proj_dim.value = proj.dim
            running = proj is not None and not proj.done
            self.proj_bar.value = proj.progress if proj is not None else 0.0
            self.proj_bar.layout.display = "inline-flex" if running else "none"
        finally:
            self._setting_projection = False

    def _on_projection_control(self, _change: Any) -> None:
        if self._setting_projection:
            return
        self.project(self.proj_op.value or None, dim=self.proj_dim.value or None)

    # -- orthogonal planes ----------------------------------------------------------------------
    def orthogonal(self, on: bool = True, *, dim: str | None = None) -> Orthogonal | None:
        """Show the planes across this one through a crosshair (``zy`` beside the image, ``zx``
        below it; z is ``dim``, default the last slider dim), linked: a click moves the
        crosshair, sliders, pan and zoom move them together (:mod:`~tsexplore.ui.ortho`).
        ``on=False`` removes them. Returns the :class:`~tsexplore.ui.ortho.Orthogonal`."""
        with self.dispatch.lock:
            if self.ortho is not None:
                self._close_ortho()
            self._ortho_dim = (dim or "") if on else None
            if on:
                self._open_ortho(dim)
        return self.ortho

    def _open_ortho(self, dim: str | None) -> None:
        import ipywidgets as w

        self.ortho = Orthogonal(self, dim)
        zy, zx = self.ortho.planes["zy"].canvas, self.ortho.planes["zx"].canvas
        grid = w.GridBox([self.canvas, zy, zx, w.Box()], layout=w.Layout(
            grid_template_columns="max-content max-content", grid_gap="4px 8px", align_items="flex-start"))
        grid.add_class("tsexplore-ortho")
        self.main.children = tuple(grid if c is self.canvas else c for c in self.main.children)
        self.main.layout.max_width = f"{max(self.canvas.outer_width + zy.outer_width + 12, 480)}px"
        self._ortho_grid = grid

    def _close_ortho(self) -> None:
        assert self.ortho is not None
        self.ortho.close()
        self.ortho = None
        grid = getattr(self, "_ortho_grid", None)
        self.main.children = tuple(self.canvas if c is grid else c for c in self.main.children)
        self.main.layout.max_width = f"{max(self.canvas.outer_width + 4, 480)}px"
        if grid is not None:
            grid.children = ()
            grid.close()

    def _clicked(self, pixel: dict[str, Any]) -> None:
        """A click on the image: the crosshair moves there (orthogonal planes), else the
        profile through that pixel streams."""
        if self.ortho is not None:
            self.ortho.clicked("yx", pixel)
        else:
            self.profile_at(int(pixel["iy"]), int(pixel["ix"]))

    # -- hover, click -> profile -----------------------------------------------------------
    def _hover_text(self, iy: int, ix: int) -> str:
        return hover_text(self.controller.frame if self.controller is not None else None, iy, ix)

    def profile_at(self, iy: int, ix: int) -> threading.Thread | None:
        """Stream the profile through pixel ``(iy, ix)`` along the first slider dim."""
        return self.profiles.at(iy, ix)

    @property
    def profile_values(self) -> np.ndarray | None:
        """The newest complete profile's values."""
        return self.profiles.values

    @property
    def profile_source(self) -> Any:
        """The profile plot's data (a bokeh ``ColumnDataSource``; None before the first click)."""
        return None if self.profiles.plot is None else self.profiles.plot.source

    @property
    def _profile_thread(self) -> threading.Thread | None:
        return self.profiles.thread

    # -- statistics of a region ---------------------------------------------------------------
    def roi(self, y: Any = None, x: Any = None, *, dim: str | None = None, **by_dim: Any) -> RoiHandle:
        """Stream the mean, min and max of a region of the plane along the slider dim ``dim``
        (default: the first), at the current indices of the other dims.

        ``y`` / ``x`` (or the shown dims by name) are index slices of the plane (``None``:
        all of it), as ``isel`` takes them. The reads go below the visible ones' priority; a
        newer region (or a shift-drag on the image) stops this one. Returns a
        :class:`~tsexplore.ui.roi.RoiHandle`: ``.result(timeout)`` is an ``xarray.Dataset``
        (``mean``, ``min``, ``max``)."""
        return self.rois.start(y, x, dim=dim, **by_dim)

    @property
    def roi_handle(self) -> RoiHandle | None:
        """The newest region's statistics, or None."""
        return self.rois.handle

    @property
    def roi_plot(self) -> RoiPlot | None:
        return self.rois.plot

    # -- building a pyramid ------------------------------------------------------------------
    def build_pyramid(self, target: str | None = None) -> threading.Thread:
        """Build the pyramid of the variable shown (into ``target``, default: the notice's
        path) on a ``tsexplore-pyramid`` thread with a progress bar, then show it."""
        var, dims = self.var_picker.value, (self.y_picker.value, self.x_picker.value)
        return self.pyramid.build(var, dims, target, self._use_pyramid)

    def _use_pyramid(self, levels: Any) -> None:
        """Show the levels just built, keeping the view (kernel thread)."""
        ctl = self.controller
        if ctl is not None:
            s = ctl.state
            self._initial_view = {**dict(s.indices), "y_range": s.y_range, "x_range": s.x_range}
        self._build()

    @property
    def notice(self) -> Any:
        """The notice under the image for zoomed-out views without a pyramid."""
        return self.pyramid.notice

    # -- lifetime --------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the view, profile and pyramid threads and the stats timer; close the widgets."""
        self._closed = True
        if self.ortho is not None:
            self._close_ortho()
        if self.projection is not None:
            self.projection.cancel()
            self.projection.join(5.0)
        if self.controller is not None:
            self.controller.close()
        if self.stats_panel is not None:
            self.stats_panel.close()
        self.pyramid.close()
        self.profiles.close()
        self.rois.close()
        self.poster.close()
        self.canvas.close()
        self.widget.close()

    def __enter__(self) -> Explorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return export.mimebundle(self, self.widget._repr_mimebundle_(**kwargs))

    # -- pictures ---------------------------------------------------------------------------
    def snapshot(self, path: Any = None, *, scale: float = 1.0) -> bytes:
        """The PNG bytes of what the Explorer shows (its picture, labels, colour bars, axes and
        title, in the page's theme; orthogonal planes as laid out); ``path``: written there
        too. ``scale``: device pixels per CSS pixel."""
        return export.snapshot(self, path, scale)

    def movie(self, path: Any, dim: str | None = None, *, fps: float = 10.0, start: int = 0,
              stop: int | None = None, step: int = 1, scale: float = 1.0, progress: bool = True) -> Any:
        """Render a movie along ``dim`` (default: the first slider dim) at the view on screen
        into ``path`` (``.gif``, or ``.mp4`` with imageio-ffmpeg), ``fps`` frames per second,
        one frame per step ``range(start, stop, step)``, each read through the engine; a
        progress bar shows. Returns the path."""
        return export.movie(self, path, dim, fps=fps, start=start, stop=stop, step=step, scale=scale,
                            progress=progress)

    def settle(self, timeout: float = 10.0) -> bool:
        """Wait (at most ``timeout`` seconds) until the picture shows the current view: its
        complete frame and, with a label layer, its labels. Returns whether it does."""
        ctl = self.controller
        if ctl is None:
            return False
        deadline = time.monotonic() + timeout
        try:
            frame = ctl.wait(timeout=timeout)
        except (TimeoutError, TsExploreError):
            return False
        if self.label_layer is None or self.projection is not None:
            return True
        want = self._gen_offset + frame.generation
        while True:
            layer = self.canvas.label_layer()
            if layer is not None and layer[0]["gen"] >= want:
                return True
            if time.monotonic() > deadline or ctl.last_error is not None:
                return False
            time.sleep(0.01)

    def _render_frame(self, indices: dict[str, int], timeout: float) -> tuple[list[Any], Any]:
        """The picture (and label layer) of the view at ``indices``, read now: a movie's frame."""
        assert self.controller is not None
        state = self.controller.state.evolve(indices=indices)
        frame = self.controller.read(state, channel=f"{self.controller.channel}-movie", timeout=timeout)
        (y0, y1), (x0, x1) = frame.extent
        meta = {"extent": [[y0, y1], [x0, x1]], "clim": list(frame.clim), "channels": len(frame.channel_clims),
                "clims": [list(c) for c in frame.clims] if frame.clims else None, "label": self._title(frame),
                "at": position(state)}
        labels = None
        if self.label_layer is not None:
            lf = self.controller.labels_of(frame.request, channel=f"{self.controller.channel}-movie")
            (ly0, ly1), (lx0, lx1) = lf.extent
            labels = ({"extent": [[ly0, ly1], [lx0, lx1]], "at": meta["at"]}, lf.ids)
        return [(meta, frame.image)], labels

    def link(self, *others: Explorer) -> Any:
        """Keep ``others``' slider, pan and zoom in step with this one (:mod:`.linked`)."""
        from .linked import link

        return link(self, *others)

    def __repr__(self) -> str:
        return f"<Explorer {self.var_picker.value} {self.controller!r}>"
