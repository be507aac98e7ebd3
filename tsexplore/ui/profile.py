"""The profile along the first slider dim through a clicked pixel: its plot (bokeh) and the
Explorer's part that streams it (:class:`ProfilePanel`)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..controller import Profile


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



class ProfilePanel:
    """The Explorer's profile: a placeholder until the first click (a bokeh plot costs ~0.1 s
    to build, so an Explorer paints its image sooner), then the plot of the newest profile
    (``explorer.controller``, ``.geometry``, ``.dispatch``)."""

    def __init__(self, explorer: Any, box: Any) -> None:
        self.ex, self.box = explorer, box
        self.plot: ProfilePlot | None = None
        self.thread: threading.Thread | None = None
        self.values: np.ndarray | None = None

    def reset(self) -> None:
        """A placeholder the size of the plot (a new variable or new dims)."""
        import ipywidgets as w

        self.close()
        dim = self.ex.profile_dim
        text = f"click the image for a profile along {dim}" if dim else "no other dim to profile along"
        self.box.children = [w.HTML(f"<b>{text}</b>", layout=w.Layout(
            width=f"{self.ex.profile_width}px", height=f"{self.ex._profile_height}px"))]

    def at(self, iy: int, ix: int) -> threading.Thread | None:
        """Stream the profile through pixel ``(iy, ix)`` along the first slider dim."""
        ex = self.ex
        geom, ctl, dim = ex.geometry, ex.controller, ex.profile_dim
        ny, nx = geom.shape[geom.axis(geom.ydim)], geom.shape[geom.axis(geom.xdim)]
        if dim is None or not (0 <= iy < ny and 0 <= ix < nx) or ctl is None:
            return None
        point = dict(ctl.state.indices)
        point.update({geom.ydim: iy, geom.xdim: ix})
        self.thread = ctl.profile_at(point, dim)
        return self.thread

    def update(self, profile: Profile, build: int) -> None:
        """A profile from the controller's thread."""
        ex = self.ex
        geom, point = ex.geometry, dict(profile.point)
        title = f"{ex.var_picker.value} at {geom.ydim}={point[geom.ydim]}, {geom.xdim}={point[geom.xdim]}"
        if profile.done:
            self.values = profile.values
        ex.dispatch(self._send, build, profile, title if profile.done else title + " …")

    def _send(self, build: int, profile: Profile, title: str) -> None:
        """Plot ``profile`` unless a newer one (or another variable) came since (kernel thread)."""
        ex = self.ex
        ctl = ex.controller
        if build != ex._builds or ctl is None or profile.generation != ctl.profile_generation:
            return
        if self.plot is None:
            self.plot = ProfilePlot(ex.profile_dim, ex.var_picker.value, ex._profile_height, ex.profile_width)
            ex.themed.add(self.plot.widget)
            self.box.children = [self.plot.widget]
        self.plot.show(profile.values, title)

    def close(self) -> None:
        if self.plot is not None:
            self.ex.themed.discard(self.plot.widget)
            self.plot.close()
            self.plot = None
