"""Statistics of a region along the slider dim, as the Explorer shows them.

:class:`RoiHandle` is what ``ex.roi(y=slice(...), x=slice(...))`` returns (and what a
shift-drag on the image makes): ``.result(timeout)`` waits for the complete statistics and
returns them as an ``xarray.Dataset`` (``mean``, ``min``, ``max`` along the slider dim, its
coordinate kept, and the channel dim with a composite); ``.dataset`` is the same object while
it fills in, and the plot beside the image (:class:`RoiPlot`, bokeh) draws it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from ..controller.roi import Region, RoiStats
from ..errors import TsExploreError

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
            with ctl._cond:
                ctl._roi_gen += 1

    def __repr__(self) -> str:
        (y0, y1), (x0, x1) = self.region
        state = "complete" if self.done else f"{self.progress:.0%}"
        return f"<RoiHandle y[{y0}:{y1}] x[{x0}:{x1}] along {self.dim}: {state}>"


class RoiPlot:
    """Mean, min and max of the region along the slider dim (bokeh lines; a composite: the
    mean of each channel in its colour)."""

    def __init__(self, dim: str, var: str, height: int, width: int = 300,
                 channels: list[str] | None = None, colours: list[str] | None = None) -> None:
        from bokeh.models import ColumnDataSource
        from bokeh.plotting import figure

        from ._kernel import bokeh_widget

        self.channels = list(channels or [])
        cols = ["x", *STATS] if not self.channels else ["x", *[f"mean_{k}" for k in range(len(self.channels))]]
        self.source = ColumnDataSource({c: np.zeros(0) for c in cols})
        fig: Any = figure(title="shift-drag a region for its statistics", width=width, height=height,
                          tools="pan,wheel_zoom,reset,save", x_axis_label=f"{dim} index", y_axis_label=var)
        if not self.channels:
            fig.line("x", "mean", source=self.source, line_width=2, legend_label="mean")
            fig.line("x", "min", source=self.source, line_width=1, color="#2ca02c", legend_label="min")
            fig.line("x", "max", source=self.source, line_width=1, color="#d62728", legend_label="max")
        else:
            for k, name in enumerate(self.channels):
                colour = (colours or [])[k] if k < len(colours or []) else "#444444"
                fig.line("x", f"mean_{k}", source=self.source, line_width=2, color=colour,
                         legend_label=f"{name} mean")
        fig.legend.location = "top_left"
        fig.legend.label_text_font_size = "8pt"
        fig.x_range.syncable = fig.y_range.syncable = False
        self.figure = fig
        self.widget = bokeh_widget(fig)

    def show(self, ds: Any, title: str) -> None:
        """Draw ``ds`` (a :func:`roi_dataset`)."""
        n = ds.sizes[next(iter(ds["mean"].dims))]
        data: dict[str, Any] = {"x": np.arange(n)}
        if not self.channels:
            data.update({name: ds[name].values for name in STATS})
        else:
            data.update({f"mean_{k}": ds["mean"].values[:, k] for k in range(len(self.channels))})
        with self.widget.batch():
            self.source.data = data
            self.figure.title.text = title

    def close(self) -> None:
        self.widget.close()
