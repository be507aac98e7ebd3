"""Statistics of a region along the slider dim, as the Explorer shows them.

:class:`RoiHandle` is what ``ex.roi(y=slice(...), x=slice(...))`` returns (and what a
shift-drag on the image makes): ``.result(timeout)`` waits for the complete statistics and
returns them as an ``xarray.Dataset`` (``mean``, ``min``, ``max`` along the slider dim, its
coordinate kept, and the channel dim with a composite); ``.dataset`` is the same object while
it fills in, and the plot beside the image (:class:`RoiPlot`, bokeh) draws it.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import numpy as np

from ..controller.roi import Region, RoiStats
from ..errors import ConfigError, TsExploreError

STATS = ("mean", "min", "max")


def roi_dataset(stats: RoiStats, da: Any, channel: str | None) -> Any:
    """``stats`` as a Dataset with ``da``'s coordinates along the slider (and channel) dim."""
    import xarray as xr

    dims = (stats.dim,) if channel is None else (stats.dim, channel)
    coords = {d: da[d] for d in dims if d in da.coords}
    (y0, y1), (x0, x1) = stats.region
    attrs = {"y": [y0, y1], "x": [x0, x1], "chunks": stats.chunks, "total_chunks": stats.total,
             "complete": int(stats.done)}
    data = {name: xr.DataArray(getattr(stats, name), dims=dims, attrs=dict(da.attrs)) for name in STATS}
    return xr.Dataset(data, coords=coords, attrs=attrs)


class RoiHandle:
    """One region's statistics along the slider dim, streaming (see the module docstring)."""

    def __init__(self, explorer: Any, generation: int, region: Region, dim: str) -> None:
        self.explorer, self.generation, self.region, self.dim = explorer, generation, region, dim
        self.stats: RoiStats | None = None
        self._done = threading.Event()
        self._cond = threading.Condition()

    def _update(self, stats: RoiStats) -> None:
        with self._cond:
            if stats.generation != self.generation or (self.stats is not None and stats.chunks < self.stats.chunks):
                return
            self.stats = stats
            self._cond.notify_all()
        if stats.done:
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def progress(self) -> float:
        """Fraction of the region's chunks read."""
        return 0.0 if self.stats is None else self.stats.progress

    @property
    def superseded(self) -> bool:
        """A newer region was asked for: this one stopped (unless it was complete)."""
        ctl = self.explorer.controller
        return ctl is None or ctl.roi_generation != self.generation

    @property
    def dataset(self) -> Any:
        """The statistics so far as a Dataset (NaN where not read yet), or None."""
        stats = self.stats
        return None if stats is None else roi_dataset(stats, self.explorer.da, self.explorer.geometry.channel)

    def result(self, timeout: float = 60.0) -> Any:
        """Wait (at most ``timeout`` seconds) for the complete statistics: an
        ``xarray.Dataset`` with ``mean``, ``min`` and ``max`` along the slider dim."""
        deadline = time.monotonic() + timeout
        while not self._done.wait(0.05):
            if self.superseded:
                raise TsExploreError("a newer region was asked for; this one was stopped "
                                     "(call ex.roi(...) again, or use the newest handle: ex.roi_handle)")
            if self.explorer._closed:
                raise TsExploreError("the Explorer was closed before the region's statistics were complete")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the region's statistics were not complete within {timeout} s "
                                   f"({self.progress:.0%} of its chunks read)")
        return self.dataset

    def cancel(self) -> None:
        """Stop streaming (a newer region does this too)."""
        ctl = self.explorer.controller
        if ctl is not None and ctl.roi_generation == self.generation:
            ctl.stop_roi()

    def __repr__(self) -> str:
        (y0, y1), (x0, x1) = self.region
        state = "complete" if self.done else f"{self.progress:.0%}"
        return f"<RoiHandle y[{y0}:{y1}] x[{x0}:{x1}] along {self.dim}: {state}>"


class RoiPlot:
    """Mean, min and max of the region along the slider dim (bokeh lines); a composite gets one
    small plot per channel, in its colour, one above the other on a shared x axis (each channel
    on its own y scale: their intensities differ)."""

    def __init__(self, dim: str, var: str, height: int, width: int = 300,
                 channels: list[str] | None = None, colours: list[str] | None = None) -> None:
        from bokeh.layouts import column
        from bokeh.models import ColumnDataSource
        from bokeh.plotting import figure

        from ._kernel import bokeh_widget

        self.channels = list(channels or [])
        names = self.channels or [""]
        cols = ["x", *[f"{stat}_{k}" for k in range(len(names)) for stat in STATS]]
        self.source = ColumnDataSource({c: np.zeros(0) for c in cols})
        each = height if not self.channels else max(110, height // len(names) + 30)
        self.figures: list[Any] = []
        for k, name in enumerate(names):
            colour = (colours or [])[k] if k < len(colours or []) else "#1f77b4"
            last = k == len(names) - 1
            shared = {"x_range": self.figures[0].x_range} if self.figures else {}
            fig: Any = figure(title=f"{name} · shift-drag a region for its statistics" if name else
                              "shift-drag a region for its statistics", width=width, height=each,
                              tools="pan,wheel_zoom,reset,save", x_axis_label=f"{dim} index" if last else None,
                              y_axis_label=name or var, **shared)
            if not self.channels:
                fig.line("x", "mean_0", source=self.source, line_width=2, legend_label="mean")
                fig.line("x", "min_0", source=self.source, line_width=1, color="#2ca02c", legend_label="min")
                fig.line("x", "max_0", source=self.source, line_width=1, color="#d62728", legend_label="max")
                fig.legend.location = "top_left"
                fig.legend.label_text_font_size = "8pt"
            else:
                fig.varea("x", f"min_{k}", f"max_{k}", source=self.source, color=colour, alpha=0.25)
                fig.line("x", f"mean_{k}", source=self.source, line_width=2, color=colour)
                if not last:
                    fig.xaxis.major_label_text_font_size = "0pt"
            fig.title.text_font_size = "9pt"
            fig.y_range.syncable = False
            self.figures.append(fig)
        self.figures[0].x_range.syncable = False
        self.figure = self.figures[0]
        self.widget = bokeh_widget(column(*self.figures) if self.channels else self.figures[0])

    def show(self, ds: Any, title: str) -> None:
        """Draw ``ds`` (a :func:`roi_dataset`)."""
        n = ds.sizes[next(iter(ds["mean"].dims))]
        data: dict[str, Any] = {"x": np.arange(n)}
        if not self.channels:
            data.update({f"{name}_0": ds[name].values for name in STATS})
        else:
            for k in range(len(self.channels)):
                data.update({f"{name}_{k}": ds[name].values[:, k] for name in STATS})
        with self.widget.batch():
            self.source.data = data
            for k, fig in enumerate(self.figures):
                fig.title.text = f"{self.channels[k]} · {title}" if self.channels else title

    def close(self) -> None:
        self.widget.close()


class RoiPanel:
    """The Explorer's region statistics: the newest handle, its plot beside the image and the
    region drawn on it (``explorer.controller``, ``.canvas``, ``.dispatch``)."""

    def __init__(self, explorer: Any, box: Any) -> None:
        self.ex = explorer
        self.box = box
        self.plot: RoiPlot | None = None
        self.handle: RoiHandle | None = None
        self._lock = threading.Lock()

    def start(self, y: Any = None, x: Any = None, *, dim: str | None = None, **by_dim: Any) -> RoiHandle:
        """See :meth:`Explorer.roi <tsexplore.ui.Explorer.roi>`."""
        ex = self.ex
        g, ctl = ex.geometry, ex.controller
        if ctl is None:
            raise TsExploreError("the Explorer is not built yet")
        ysel, xsel = by_dim.pop(g.ydim, y), by_dim.pop(g.xdim, x)
        if by_dim:
            raise ConfigError(f"roi() takes the shown dims {g.ydim!r} and {g.xdim!r} (or y=, x=), "
                              f"got {sorted(by_dim)}")
        dim = dim or ex.profile_dim
        if dim is None:
            raise ConfigError("this view has no slider dim to take statistics along")
        region = (bounds(ysel, g.shape[g.axis(g.ydim)], g.ydim), bounds(xsel, g.shape[g.axis(g.xdim)], g.xdim))
        with self._lock:
            ctl.roi(region, dim)
            handle = RoiHandle(ex, ctl.roi_generation, region, dim)
            self.handle = handle
            if ctl.roi_stats is not None:
                handle._update(ctl.roi_stats)
        (y0, y1), (x0, x1) = region
        ex.canvas.roi_box = {"y": [y0 - 0.5, y1 - 0.5], "x": [x0 - 0.5, x1 - 0.5]}
        return handle

    def dragged(self, box: dict[str, Any]) -> None:
        """A shift-drag in the browser (index edges): the pixels whose centres lie inside."""
        ylo, yhi = sorted(box["y"])
        xlo, xhi = sorted(box["x"])
        try:
            self.start(y=slice(max(0, math.ceil(ylo)), max(0, math.floor(yhi) + 1)),
                       x=slice(max(0, math.ceil(xlo)), max(0, math.floor(xhi) + 1)))
        except TsExploreError as exc:
            self.ex.info.value = f"<span style='color:#b00'>{exc}</span>"

    def update(self, stats: RoiStats, build: int) -> None:
        """Statistics from the controller's thread: to the handle, and to the plot (kernel thread)."""
        with self._lock:
            handle = self.handle
            if build != self.ex._builds or handle is None or handle.generation != stats.generation:
                return
            handle._update(stats)
        self.ex.dispatch(self._send, build, handle)

    def _send(self, build: int, handle: RoiHandle) -> None:
        ex = self.ex
        if build != ex._builds or handle is not self.handle or handle.stats is None:
            return
        g = ex.geometry
        if self.plot is None:
            self.plot = RoiPlot(handle.dim, ex.var_picker.value, ex._profile_height, ex.profile_width,
                                ex.channels or None, list(ex.canvas.channel_colors) or None)
            ex.themed.add(self.plot.widget)
            self.box.children = [self.plot.widget]
        (y0, y1), (x0, x1) = handle.region
        state = "" if handle.done else f" … {handle.progress:.0%}"
        self.plot.show(handle.dataset, f"{g.ydim}[{y0}:{y1}] {g.xdim}[{x0}:{x1}] along {handle.dim}{state}")

    def drop(self) -> None:
        """A new variable or new dims: the region's plot and box go."""
        self.close()
        self.box.children = []
        self.handle = None
        self.ex.canvas.roi_box = {}

    def close(self) -> None:
        if self.plot is not None:
            self.ex.themed.discard(self.plot.widget)
            self.plot.close()
            self.plot = None


def bounds(sel: Any, n: int, dim: str) -> tuple[int, int]:
    """An index slice (or None) of an axis of ``n`` as ``(start, stop)``."""
    if sel is None:
        return (0, n)
    if not isinstance(sel, slice) or sel.step not in (None, 1):
        raise ConfigError(f"roi() takes an index slice with step 1 for {dim!r} (as isel does), got {sel!r}")
    start, stop, _ = sel.indices(n)
    if stop <= start:
        raise ConfigError(f"the region's {dim!r} slice {sel!r} holds no pixel of 0..{n - 1}")
    return (start, stop)
