"""The Explorer widget: a thin ipywidgets + bokeh face over :class:`ViewController`.

The image travels to the browser at screen resolution as ``uint8`` colour indices (one byte
per pixel, 0 = NaN) with a fixed 256-colour mapper, never as the float frame. The plot is a
plain bokeh figure with an ``image`` glyph whose ``ColumnDataSource`` is replaced in place on
each frame, embedded through ``jupyter_bokeh.BokehModel`` (an ipywidget). A holoviews
DynamicMap re-render cost 100-400 ms of the kernel's thread per frame here, and its browser
side echoed every frame back to the kernel; the in-place update costs a few ms and nothing
comes back but pan/zoom (``RangesUpdate``) and click (``Tap``) events.
Frames arrive on the controller's view thread and are painted on the kernel's IOLoop: the
Explorer is the controller's :class:`~tsexplore.controller.View`. The variable shown is
exactly the selection it was given (``ds.temp.sel(lat=slice(...))``): the one resolver
(:func:`tsexplore.resolve.resolve`) finds the source and the selection over it.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..controller import Frame, PlaneGeometry, Profile, ViewController, ViewState, resolve
from ..engine import get_engine
from ..errors import ConfigError, TsExploreError
from ..resolve import Resolved, fallback_source, try_resolve
from ._axes import AxisMap
from ._kernel import Dispatcher, bokeh_widget
from .planes import watch

CMAPS = ("viridis", "magma", "cividis", "coolwarm", "RdBu_r", "gray", "turbo")
NAN_COLOUR = "#d9d9d9"
#: seconds the status line waits after a paint (each update re-lays out the notebook)
INFO_DELAY = 0.25


def palette(name: str) -> list[str]:
    """256 colours: index 0 for NaN, 1..255 along colormap ``name``."""
    from holoviews.plotting.util import process_cmap

    return [NAN_COLOUR, *process_cmap(name, 255)]


def _as_dataset(obj: Any) -> Any:
    import xarray as xr

    if isinstance(obj, xr.DataArray):
        return obj.to_dataset(name=obj.name or "data")
    if isinstance(obj, xr.Dataset):
        return obj
    raise TsExploreError(
        f"explore() takes an xarray Dataset or DataArray, got {type(obj).__name__}; "
        "open data with tse.open_dataset(...) first"
    )


def _selection_of(ds: Any, var: str) -> Resolved:
    """The source behind ``ds[var]`` and the selection over it (or a wrapper of its values)."""
    found = try_resolve(ds[var])
    if found is None:  # in memory, decoded or another backend: read it through the engine
        found = Resolved.whole(fallback_source(ds[var], var))
    return found


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
        view: dict[str, Any] | None = None,
        dispatch: Any = "auto",
    ) -> None:
        import ipywidgets as w

        self.ds = _as_dataset(obj)
        self.names = [n for n, v in self.ds.data_vars.items() if v.ndim >= 2]
        if not self.names:
            raise TsExploreError(f"no variable with 2 or more dims to show; got {list(self.ds.data_vars)}")
        var = var or self.names[0]
        if var not in self.names:
            raise ConfigError(f"var={var!r} is not one of the 2-D+ variables {self.names}")
        if cmap not in CMAPS:
            raise ConfigError(f"cmap={cmap!r} is not one of {CMAPS}")
        self.width, self.height, self.max_chunks = int(width), int(height), int(max_chunks)
        self.dispatch = Dispatcher() if dispatch == "auto" else Dispatcher(dispatch)
        self.controller: ViewController | None = None
        self._painted = -1
        self._info_pending = False
        self._info_frame: Frame | None = None
        self._paint_lock = threading.Lock()
        self._initial_view = dict(view or {})
        self._profile_thread: threading.Thread | None = None
        self.profile_values: np.ndarray | None = None
        self.painted_frames = 0
        self.stats_panel: Any = None

        self.var_picker = w.Dropdown(options=self.names, value=var, description="variable")
        dims = list(self.ds[var].dims)
        self.y_picker = w.Dropdown(options=dims, value=y or dims[-2], description="y")
        self.x_picker = w.Dropdown(options=dims, value=x or dims[-1], description="x")
        self.cmap_picker = w.Dropdown(options=list(CMAPS), value=cmap, description="colormap")
        self.clim_mode = w.ToggleButtons(
            options=["robust", "fixed"], value="fixed" if clim else "robust", description="range"
        )
        lo, hi = clim or (0.0, 1.0)
        self.clim_lo = w.FloatText(value=lo, description="min", layout=w.Layout(width="160px"))
        self.clim_hi = w.FloatText(value=hi, description="max", layout=w.Layout(width="160px"))
        self.info = w.HTML(value="")
        self.sliders: dict[str, Any] = {}
        self.readouts: dict[str, Any] = {}
        self.players: dict[str, Any] = {}
        self.slider_box = w.VBox()
        self.plot_box = w.Box()
        controls = w.VBox(
            [
                w.HBox([self.var_picker, self.y_picker, self.x_picker]),
                w.HBox([self.cmap_picker, self.clim_mode, self.clim_lo, self.clim_hi]),
                self.slider_box,
            ]
        )
        self.main = w.VBox([controls, self.plot_box, self.info])
        children = [self.main]
        if stats:
            from .stats_panel import StatsPanel

            self.stats_panel = StatsPanel(explorer=self)
            children.append(self.stats_panel.widget)
        self.widget = w.HBox(children)
        self.widget.add_class("tsexplore-explorer")

        self._observe_controls()
        self._build()

    def _observe_controls(self) -> None:
        self.var_picker.observe(self._on_var, "value")
        for picker in (self.y_picker, self.x_picker):
            picker.observe(self._on_dims, "value")
        self.cmap_picker.observe(self._on_cmap, "value")
        for ctl in (self.clim_mode, self.clim_lo, self.clim_hi):
            ctl.observe(self._on_clim, "value")

    # -- building --------------------------------------------------------------------------
    def _build(self) -> None:
        """(Re)build controller, sliders and plot for the current variable and x/y dims."""
        # without a kernel, paints run on the view thread: keep them out while building
        with self.dispatch.lock:
            self._build_locked()

    def _build_locked(self) -> None:
        import ipywidgets as w

        if self.controller is not None:
            self.controller.close()
        var, ydim, xdim = self.var_picker.value, self.y_picker.value, self.x_picker.value
        da = self.ds[var]
        self.da = da
        self.selection = _selection_of(self.ds, var)
        self.source = self.selection.source
        self.geometry = PlaneGeometry.of(self.selection, ydim, xdim)
        self.axes = {d: AxisMap.of(da, d) for d in da.dims}
        view = self._initial_view
        self._initial_view = {}
        indices = {d: int(view.get(d, 0)) for d in self.geometry.slider_dims}
        state = ViewState(
            indices=tuple(sorted(indices.items())),
            y_range=view.get("y_range"),
            x_range=view.get("x_range"),
            height=self.height,
            width=self.width,
        )
        self.controller = ViewController(
            self.selection,
            self.geometry,
            engine=get_engine(),
            view=self,
            state=state,
            max_chunks=self.max_chunks,
            clim=self._clim(),
        )
        watch(self.controller)
        # sliders: one per other dim, with play/pause, speed and the coordinate value
        rows = []
        self.sliders, self.readouts, self.players = {}, {}, {}
        for dim in self.geometry.slider_dims:
            n = int(da.sizes[dim])
            slider = w.IntSlider(value=indices[dim], min=0, max=n - 1, description=dim,
                                 continuous_update=True, layout=w.Layout(width="420px"))
            play = w.Play(value=indices[dim], min=0, max=n - 1, interval=200, description=f"play {dim}")
            w.jslink((play, "value"), (slider, "value"))
            speed = w.Dropdown(options=[("1 fps", 1000), ("5 fps", 200), ("10 fps", 100), ("25 fps", 40)],
                               value=200, layout=w.Layout(width="90px"))
            w.link((speed, "value"), (play, "interval"))
            readout = w.Label(value=self.axes[dim].label(indices[dim]))
            slider.observe(lambda ch, d=dim: self._on_index(d, ch["new"]), "value")
            self.sliders[dim], self.readouts[dim], self.players[dim] = slider, readout, play
            rows.append(w.HBox([slider, play, speed, readout]))
        self.slider_box.children = rows
        self._build_plot(resolve(state, self.geometry, max_chunks=self.max_chunks))
        self.controller.update()

    def _clim(self) -> tuple[float, float] | None:
        if self.clim_mode.value == "robust":
            return None
        lo, hi = float(self.clim_lo.value), float(self.clim_hi.value)
        if not hi > lo:
            raise ConfigError(f"the colour range needs max > min, got min={lo} max={hi}")
        return (lo, hi)

    # -- the bokeh plot (kernel thread) --------------------------------------------------------
    def _build_plot(self, req: Any) -> None:
        """A bokeh image figure (initial view's extent) and a profile figure in one BokehModel."""
        from bokeh import events
        from bokeh.layouts import row
        from bokeh.models import ColumnDataSource, LinearColorMapper, Range1d
        from bokeh.plotting import figure
        geom = self.geometry
        ay, ax = self.axes[geom.ydim], self.axes[geom.xdim]
        (y0, y1), (x0, x1) = req.region
        (left, right), (bottom, top) = ax.edges(x0, x1, 1), ay.edges(y0, y1, 1)
        xlabel = f"{geom.xdim} ({ax.units})" if ax.units else geom.xdim
        ylabel = f"{geom.ydim} ({ay.units})" if ay.units else geom.ydim
        self.image_source = ColumnDataSource(
            {"image": [np.zeros((1, 1), np.uint8)], "x": [left], "y": [bottom],
             "dw": [right - left], "dh": [top - bottom]})
        self.color_mapper = LinearColorMapper(palette=palette(self.cmap_picker.value), low=0, high=255)
        fig: Any = figure(
            title=self._title(None), frame_width=self.width, frame_height=self.height,
            x_range=Range1d(start=left, end=right), y_range=Range1d(start=bottom, end=top),
            x_axis_label=xlabel, y_axis_label=ylabel,
            tools="pan,wheel_zoom,box_zoom,reset,save", active_drag="pan", active_scroll="wheel_zoom",
        )
        fig.image("image", "x", "y", "dw", "dh", source=self.image_source,
                  color_mapper=self.color_mapper)  # type: ignore[call-arg]
        # pan/zoom reaches the kernel as one RangesUpdate event, not as four range changes
        fig.x_range.syncable = fig.y_range.syncable = False
        fig.on_event(events.RangesUpdate, self._on_ranges_event)
        fig.on_event(events.Tap, self._on_tap_event)
        self.figure = fig
        self.profile_source = ColumnDataSource({"x": np.zeros(0), "y": np.zeros(0)})
        pdim = self.profile_dim
        prof: Any = figure(
            title="click the image for a profile" if pdim else "no slider dim",
            frame_width=260, frame_height=self.height // 2, tools="pan,wheel_zoom,reset,save",
            x_axis_label=f"{pdim} index" if pdim else "index", y_axis_label=self.var_picker.value,
        )
        prof.line("x", "y", source=self.profile_source, line_width=2)
        prof.x_range.syncable = prof.y_range.syncable = False  # auto-ranged in the browser
        self.profile_figure = prof
        previous: Any = getattr(self, "plot_widget", None)
        if previous is not None:
            previous.close()  # the previous variable's / dims' plot
        self.plot_widget = bokeh_widget(row(fig, prof))
        self.plot_box.children = [self.plot_widget]

    def _title(self, frame: Frame | None) -> str:
        var = self.var_picker.value
        if frame is None:
            return f"{var} (loading)"
        parts = [f"{d}={frame.request.state.index(d)} ({self.axes[d].label(frame.request.state.index(d))})"
                 for d in self.geometry.slider_dims]
        return " · ".join([var, *parts])

    def _image_data(self, frame: Frame) -> dict[str, list[Any]]:
        """The image source's columns for ``frame``: row 0 at the lowest y coordinate, column 0
        at the lowest x coordinate (bokeh's ``image`` glyph draws row 0 at the bottom)."""
        geom = self.geometry
        ay, ax = self.axes[geom.ydim], self.axes[geom.xdim]
        img = frame.image
        (y0, y1), (x0, x1) = frame.request.region
        sy, sx = frame.request.step
        (left, right), (bottom, top) = ax.edges(x0, x1, sx), ay.edges(y0, y1, sy)
        img = img[::-1] if ay.dc < 0 else img
        img = img[:, ::-1] if ax.dc < 0 else img
        return {"image": [np.ascontiguousarray(img, dtype=np.uint8)], "x": [left], "y": [bottom],
                "dw": [right - left], "dh": [top - bottom]}

    @property
    def profile_dim(self) -> str | None:
        dims = self.geometry.slider_dims
        return dims[0] if dims else None

    # -- events ----------------------------------------------------------------------------
    def _on_index(self, dim: str, value: int) -> None:
        self.readouts[dim].value = self.axes[dim].label(int(value))
        assert self.controller is not None
        self.controller.update(indices={dim: int(value)})

    def _on_ranges_event(self, event: Any) -> None:
        """Bokeh ``RangesUpdate`` (pan, zoom, reset in the browser)."""
        self.set_ranges((event.x0, event.x1), (event.y0, event.y1))

    def set_ranges(self, x_range: Any = None, y_range: Any = None) -> None:
        """Show the coordinate ranges ``x_range``/``y_range`` (what a pan or zoom sends)."""
        if self.controller is None or x_range is None or y_range is None:
            return
        geom = self.geometry
        xr_ = self.axes[geom.xdim].index_range(*x_range)
        yr_ = self.axes[geom.ydim].index_range(*y_range)
        if (xr_, yr_) != (self.controller.state.x_range, self.controller.state.y_range):
            self.controller.update(x_range=xr_, y_range=yr_)

    def _on_var(self, change: Any) -> None:
        dims = list(self.ds[change["new"]].dims)
        with self.y_picker.hold_trait_notifications(), self.x_picker.hold_trait_notifications():
            self.y_picker.unobserve(self._on_dims, "value")
            self.x_picker.unobserve(self._on_dims, "value")
            self.y_picker.options, self.x_picker.options = dims, dims
            self.y_picker.value, self.x_picker.value = dims[-2], dims[-1]
            self.y_picker.observe(self._on_dims, "value")
            self.x_picker.observe(self._on_dims, "value")
        self._build()

    def _on_dims(self, change: Any) -> None:
        other = self.x_picker if change["owner"] is self.y_picker else self.y_picker
        if other.value == change["new"]:  # picking the other axis' dim swaps the two
            other.unobserve(self._on_dims, "value")
            other.value = change["old"]
            other.observe(self._on_dims, "value")
        self._build()

    def _on_cmap(self, change: Any) -> None:
        self.color_mapper.palette = palette(change["new"])

    def _on_clim(self, change: Any) -> None:
        try:
            clim = self._clim()
        except ConfigError as exc:
            self.info.value = f"<span style='color:#b00'>{exc}</span>"
            return
        assert self.controller is not None
        self.controller.clim = clim
        self.controller.refresh()

    # -- the controller's View (called on its threads) --------------------------------------
    def show_frame(self, frame: Frame) -> None:
        self.dispatch(self._paint, frame)

    def show_error(self, exc: BaseException) -> None:
        self.dispatch(self._show_error, exc)

    def show_profile(self, profile: Profile) -> None:
        geom = self.geometry
        point = dict(profile.point)
        title = f"{self.var_picker.value} at {geom.ydim}={point[geom.ydim]}, {geom.xdim}={point[geom.xdim]}"
        if profile.done:
            self.profile_values = profile.values
        self.dispatch(self._send_profile, self.controller, profile, title if profile.done else title + " …")

    def _show_error(self, exc: BaseException) -> None:
        self.info.value = f"<span style='color:#b00'>read failed: {type(exc).__name__}: {exc}</span>"

    def _paint(self, frame: Frame) -> None:
        """Show ``frame`` unless a newer one is already on screen (kernel thread)."""
        with self._paint_lock:  # held for the whole paint (about 1 ms): newest always wins
            if frame.generation <= self._painted or self.controller is None:
                return
            with self.plot_widget.batch():  # image and title in one patch: one paint
                self.image_source.data = self._image_data(frame)
                self.figure.title.text = self._title(frame)
            self._painted = frame.generation
        self.painted_frames += 1
        self._info_frame = frame
        if self.dispatch.loop is None:
            self._show_info()
        elif not self._info_pending:  # the text line waits until the slider rests
            self._info_pending = True
            self.dispatch.loop.call_later(INFO_DELAY, self._show_info)

    def _show_info(self) -> None:
        """The status line under the plot for the last painted frame (kernel thread)."""
        self._info_pending = False
        frame = self._info_frame
        if frame is None or frame.generation != self._painted:
            return
        (y0, y1), (x0, x1) = frame.request.region
        ny, nx = frame.image.shape
        lo, hi = frame.clim
        self.info.value = (
            f"<code>gen {frame.generation}: {ny}×{nx} px of y[{y0}:{y1}:{frame.request.step[0]}] "
            f"x[{x0}:{x1}:{frame.request.step[1]}], {len(frame.request.chunks)} chunks, "
            f"{frame.elapsed * 1e3:.0f} ms, colour range [{lo:.4g}, {hi:.4g}]</code>"
        )

    @property
    def painted_generation(self) -> int:
        return self._painted

    # -- click -> profile ----------------------------------------------------------------------
    def _on_tap_event(self, event: Any) -> None:
        """Bokeh ``Tap`` on the image: the profile through the clicked pixel."""
        self._on_tap(event.x, event.y)

    def _on_tap(self, x: Any = None, y: Any = None) -> None:
        if x is None or y is None or self.profile_dim is None:
            return
        geom = self.geometry
        ix = int(round(self.axes[geom.xdim].to_index(x)))
        iy = int(round(self.axes[geom.ydim].to_index(y)))
        self.profile_at(iy, ix)

    def profile_at(self, iy: int, ix: int) -> threading.Thread | None:
        """Stream the profile through pixel ``(iy, ix)`` along the first slider dim."""
        geom = self.geometry
        ny, nx = geom.shape[geom.axis(geom.ydim)], geom.shape[geom.axis(geom.xdim)]
        dim = self.profile_dim
        if dim is None or not (0 <= iy < ny and 0 <= ix < nx) or self.controller is None:
            return None
        point = dict(self.controller.state.indices)
        point.update({geom.ydim: iy, geom.xdim: ix})
        self._profile_thread = self.controller.profile_at(point, dim)
        return self._profile_thread

    def _send_profile(self, controller: Any, profile: Profile, title: str) -> None:
        """Paint ``profile`` unless a newer one (or another variable) came since (kernel thread)."""
        current = self.controller
        if current is None or controller is not current or profile.generation != current.profile_generation:
            return
        self.profile_source.data = {"x": np.arange(profile.values.size), "y": profile.values}
        self.profile_figure.title.text = title

    # -- lifetime --------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the view thread, the profile thread and the stats timer; close the widgets."""
        if self.controller is not None:
            self.controller.close()
        if self.stats_panel is not None:
            self.stats_panel.close()
        self.plot_widget.close()
        self.widget.close()

    def __enter__(self) -> Explorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def __repr__(self) -> str:
        return f"<Explorer {self.var_picker.value} {self.controller!r}>"


def explore(obj: Any, var: str | None = None, **kwargs: Any) -> Explorer:
    """An :class:`Explorer` on a Dataset or DataArray (``ds.tse.explore()`` calls this)."""
    try:
        import bokeh  # noqa: F401
        import holoviews  # noqa: F401 - colormaps
        import ipywidgets  # noqa: F401
        import jupyter_bokeh  # noqa: F401
    except ImportError as exc:
        from ..errors import missing_dependency

        raise missing_dependency(exc.name or "ipywidgets", "lab", "the Explorer") from exc
    return Explorer(obj, var, **kwargs)
