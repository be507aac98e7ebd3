"""The Explorer's smaller pieces (kernel side): its control rows, the canvas slider seen as a
slider, the profile plot (bokeh) and the "no pyramid" notice with its build button.

Layout: every block has its natural width (``flex: 0 0 auto``) inside rows that wrap, so at
any width nothing overlaps: a block that does not fit beside the others goes below them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ConfigError

#: the rows of controls and the blocks beside the image wrap instead of squeezing
WRAP = {"display": "flex", "flex_flow": "row wrap", "align_items": "flex-start"}
SPEEDS = [("1 fps", 1000), ("5 fps", 200), ("10 fps", 100), ("25 fps", 40)]


def block(w: Any, children: list[Any], kind: str = "VBox", **layout: Any) -> Any:
    """A box that keeps its natural size when its parent wraps."""
    layout.setdefault("margin", "0 16px 8px 0")
    return getattr(w, kind)(children, layout=w.Layout(flex="0 0 auto", **layout))


def row(w: Any, children: list[Any]) -> Any:
    """A row of controls that wraps onto more lines when narrower than its contents."""
    return w.Box(children, layout=w.Layout(**WRAP))


def dropdown(w: Any, description: str, options: list[Any], value: Any, width: str) -> Any:
    return w.Dropdown(options=options, value=value, description=description,
                      style={"description_width": "initial"},
                      layout=w.Layout(width=width, flex="0 0 auto"))


def range_toggle(w: Any, value: str) -> Any:
    """The robust / fixed colour-range toggle, its two buttons side by side."""
    return w.ToggleButtons(options=["robust", "fixed"], value=value, description="range",
                           style={"description_width": "initial", "button_width": "64px"},
                           layout=w.Layout(width="200px", flex="0 0 auto"))


class CanvasSlider:
    """The image canvas's own slider (in the browser) seen as an ipywidgets slider:
    ``value`` (get/set; set moves the browser's slider too), ``min``, ``max``, ``description``."""

    def __init__(self, canvas: Any, dim: str, size: int) -> None:
        self.canvas, self.description, self.min, self.max = canvas, dim, 0, int(size) - 1

    @property
    def value(self) -> int:
        return int(self.canvas.slider_value)

    @value.setter
    def value(self, value: int) -> None:
        v = int(value)
        if not self.min <= v <= self.max:
            raise ConfigError(f"{self.description}={v} is outside {self.min}..{self.max}")
        self.canvas.slider_value = v

    def __repr__(self) -> str:
        return f"<CanvasSlider {self.description}={self.value} of {self.min}..{self.max}>"


class ProfilePlot:
    """The profile along the first slider dim through a clicked pixel (a bokeh line)."""

    def __init__(self, dim: str | None, var: str, height: int, width: int = 300) -> None:
        from bokeh.models import ColumnDataSource
        from bokeh.plotting import figure

        from ._kernel import bokeh_widget

        self.source = ColumnDataSource({"x": np.zeros(0), "y": np.zeros(0)})
        fig: Any = figure(
            title="click the image for a profile" if dim else "no slider dim",
            width=width, height=height, tools="pan,wheel_zoom,reset,save",
            x_axis_label=f"{dim} index" if dim else "index", y_axis_label=var,
        )
        fig.line("x", "y", source=self.source, line_width=2)
        fig.x_range.syncable = fig.y_range.syncable = False  # auto-ranged in the browser
        self.figure = fig
        self.widget = bokeh_widget(fig)

    def show(self, values: np.ndarray, title: str) -> None:
        with self.widget.batch():  # line and title in one patch
            self.source.data = {"x": np.arange(values.size), "y": values}
            self.figure.title.text = title

    def close(self) -> None:
        self.widget.close()


class PyramidNotice:
    """Says when a zoomed-out view shows a subsample (no pyramid), and offers to build one.
    Its widgets are made the first time it is shown (most views never need it)."""

    def __init__(self, w: Any, can_build: bool, default_target: str) -> None:
        self.w, self.can_build, self._target = w, can_build, default_target
        self.box = w.VBox(layout=w.Layout(display="none", max_width="100%"))
        self.box.add_class("tsexplore-pyramid-notice")
        self.shown = False
        self.text: Any = None
        self.on_build: Any = None  # called by the build button

    def _make(self) -> None:
        w = self.w
        self.text = w.HTML(value="")
        self.path = w.Text(value=self._target, description="into", style={"description_width": "initial"},
                           layout=w.Layout(width="340px", flex="0 0 auto"))
        self.button = w.Button(description="build a pyramid", icon="layer-group",
                               layout=w.Layout(width="auto", flex="0 0 auto"))
        self.bar = w.FloatProgress(value=0.0, min=0.0, max=1.0, layout=w.Layout(width="160px", display="none"))
        self.controls = row(w, [self.path, self.button, self.bar] if self.can_build else [])
        self.box.children = [self.text, self.controls]
        if self.on_build is not None:
            self.button.on_click(lambda _b: self.on_build())

    @property
    def target(self) -> str:
        """Where the pyramid goes (the path box, once there is one)."""
        return self._target if self.text is None else str(self.path.value)

    @target.setter
    def target(self, value: str) -> None:
        self._target = value
        if self.text is not None:
            self.path.value = value

    def show(self, message: str | None) -> None:
        """Show ``message`` (None hides the notice)."""
        visible = message is not None
        if visible:
            if self.text is None:
                self._make()
            html = f"<span style='color:#8a5a00'>{message}</span>"
            if self.text.value != html:
                self.text.value = html
        if visible != self.shown:
            self.shown = visible
            self.box.layout.display = "flex" if visible else "none"

    def allow(self, can_build: bool) -> None:
        """Show the build controls only when a pyramid can be built."""
        if self.text is None:
            self._make()
        display = "flex" if can_build else "none"
        if self.controls.layout.display != display:
            self.controls.layout.display = display

    def building(self, busy: bool) -> None:
        if self.text is not None:
            self.button.disabled = busy

    def progress(self, fraction: float | None) -> None:
        """Show the build's progress (None: hide the bar)."""
        if self.text is None:
            self._make()
        if fraction is None:
            self.bar.layout.display = "none"
            return
        self.bar.layout.display = "inline-flex"
        self.bar.value = max(0.0, min(1.0, float(fraction)))
