"""The StatsPanel: live bokeh plots fed from engine snapshots on a timer.

Every ``interval`` seconds (default 0.25) :meth:`StatsPanel.tick` takes ``tse.stats()``,
streams one row into the plots' ``ColumnDataSource`` (hit ratio over the last second, MB/s read, queue
depth per priority, reads in flight, latency p50/p95) and sends the chunk map of the current
plane (cached / in flight / not loaded / absent from the store); a row or a chunk map equal to
the last one is not sent (an idle engine costs the browser no redraws). In a kernel the timer is a tornado PeriodicCallback
on the kernel's IOLoop, so the panel keeps moving while a computation runs in a background
thread (it pauses while a cell itself is busy); outside a kernel (and with
``timer="thread"``) it is a ``tsexplore-stats-*`` thread.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from typing import Any

import numpy as np

from ..engine import current_engine, snapshot
from ..errors import ConfigError
from ._kernel import Timer, bokeh_widget
from .planes import chunk_states, live_controllers

COLUMNS = (
    "t", "hit_ratio", "read_mbs", "q_visible", "q_planned", "q_speculative",
    "in_flight", "p50_ms", "p95_ms",
)
# not loaded, in flight, cached, absent (the store lacks the chunk: it reads as the fill value)
STATE_COLOURS = ["#eeeeee", "#ff9900", "#2c7fb8", "#b39ddb"]
_ids = itertools.count(1)


class StatsPanel:
    """Live engine statistics; ``explorer=`` ties the chunk map to an Explorer's plane."""

    def __init__(
        self,
        *,
        interval: float = 0.25,
        history: int = 240,
        explorer: Any = None,
        timer: str = "auto",
        width: int = 300,
        themed: Any = None,
    ) -> None:
        import ipywidgets as w

        from .theme import ThemedPlots, ThemeProbe

        self.id = next(_ids)
        self.explorer = explorer
        self.interval = float(interval)
        self.history_length = int(history)
        self.t0 = time.monotonic()
        self.ticks = 0
        self.last: Any = None
        self.chunk_counts = np.zeros(len(STATE_COLOURS), dtype=np.int64)
        self._window: deque[Any] = deque(maxlen=max(2, int(round(1.0 / self.interval)) + 1))
        self._hit_ratio = float("nan")
        self._last_values: list[float] | None = None  # the last row streamed, without its time
        self._held: dict[str, float] | None = None  # the newest row equal to it, not streamed
        self._map: tuple[np.ndarray, Any] | None = None  # the chunk map's states and window
        layout = self._figures(width)
        self.width = int(width)
        self.numbers = w.HTML(value="<code>waiting for the first snapshot…</code>",
                              layout=w.Layout(max_width="100%"))
        self.numbers.add_class("tsexplore-stats-numbers")
        self.plot_widget = bokeh_widget(layout)
        # in the page's theme: the Explorer's (its canvas reports it), or a probe's of its own
        parts = [w.HTML("<b>tsexplore engine</b>"), self.numbers, self.plot_widget]
        self.probe: Any = None
        if themed is None:
            themed = ThemedPlots()
            self.probe = ThemeProbe()
            self.probe.on_theme(themed.set)
            parts.append(self.probe)
        self.themed = themed
        themed.add(self.plot_widget)
        self.widget = w.VBox(parts, layout=w.Layout(min_width=f"{self.width + 20}px"))
        self.widget.add_class("tsexplore-stats")
        self.tick()
        if timer not in ("auto", "thread"):
            raise ConfigError(f"timer must be 'auto' or 'thread', got {timer!r}")
        self._timer = Timer(self.tick, self.interval, f"tsexplore-stats-{self.id}",
                            loop=None if timer == "thread" else "auto")

    # -- data ------------------------------------------------------------------------------
    def _controller(self) -> Any:
        if self.explorer is not None:
            return self.explorer.controller
        live = live_controllers()
        return live[-1] if live else None

    def _figures(self, width: int) -> Any:
        """Bokeh figures fed by ``ColumnDataSource.stream`` (about 1 ms per tick; a holoviews
        DynamicMap re-render cost 250-400 ms of the kernel's thread per tick here), in a row
        that wraps: one column beside an image, side by side across a wider cell."""
        from bokeh.layouts import row
        from bokeh.models import ColumnDataSource, LinearColorMapper
        from bokeh.plotting import figure

        self.source = ColumnDataSource({c: [] for c in COLUMNS})
        figs = []
        series = [
            ("hit ratio (last 1 s)", [("hit_ratio", "hit ratio")]),
            ("read MB/s", [("read_mbs", "MB/s")]),
            ("queue depth / in flight", [("q_visible", "visible"), ("q_planned", "planned"),
                                         ("q_speculative", "speculative"), ("in_flight", "in flight")]),
            ("read latency (ms)", [("p50_ms", "p50"), ("p95_ms", "p95")]),
        ]
        colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"]
        for title, cols in series:
            fig: Any = figure(title=title, width=width, height=130, toolbar_location=None,
                         x_axis_label="s")
            for (col, label), colour in zip(cols, colours):
                extra = {"legend_label": label} if len(cols) > 1 else {}
                fig.line("t", col, source=self.source, line_width=2, color=colour, **extra)
            if len(cols) > 1:
                fig.legend.location = "top_left"
                fig.legend.label_text_font_size = "8pt"
            figs.append(fig)
        figs[0].y_range.start, figs[0].y_range.end = 0, 1.05
        self.chunk_source = ColumnDataSource(
            {"image": [np.zeros((1, 1), np.uint8)], "x": [0], "y": [0], "dw": [1], "dh": [1]}
        )
        self.chunk_fig: Any = figure(title="chunk map", width=width, height=width, toolbar_location=None,
                                x_axis_label="x chunk", y_axis_label="y chunk", match_aspect=True)
        mapper = LinearColorMapper(palette=STATE_COLOURS, low=0, high=len(STATE_COLOURS) - 1)
        self.chunk_fig.image("image", "x", "y", "dw", "dh", source=self.chunk_source,
                             color_mapper=mapper)  # type: ignore[call-arg]
        self.figures = [*figs, self.chunk_fig]
        for fig in self.figures:  # auto-ranged in the browser: keep those changes there
            fig.x_range.syncable = fig.y_range.syncable = False
        return row(*self.figures, sizing_mode="stretch_width", styles={"flex-wrap": "wrap", "gap": "4px 12px"})

    def tick(self) -> Any:
        """Take one snapshot and push it to the plots (called by the timer)."""
        snap = snapshot()  # never starts an engine
        now = time.monotonic() - self.t0
        self._window.append(snap)
        first = self._window[0]
        requests = snap.requests - first.requests
        if requests > 0:
            self._hit_ratio = (snap.hits - first.hits) / requests
        q = snap.queued
        row = {
            "t": now, "hit_ratio": self._hit_ratio, "read_mbs": snap.read_rate / 1e6,
            "q_visible": q.get("visible", 0), "q_planned": q.get("planned", 0),
            "q_speculative": q.get("speculative", 0), "in_flight": snap.in_flight,
            "p50_ms": snap.latency_p50 * 1e3, "p95_ms": snap.latency_p95 * 1e3,
        }
        self._push(row)
        ctl = self._controller()
        if ctl is not None and not ctl.closed:
            states, window = chunk_states(current_engine(), ctl)  # never starts an engine
            counts = np.bincount(states.ravel(), minlength=len(STATE_COLOURS))
            title = f"{counts[2]} cached · {counts[1]} in flight · {counts[0]} not loaded"
            if counts[3]:
                title += f" · {counts[3]} absent"
            gy0, gy1, gx0, gx1 = window
            if self._map is None or self._map[1] != window or not np.array_equal(self._map[0], states):
                self._map = (states, window)  # a new picture only when a chunk's state changed
                self.chunk_source.data = {"image": [states], "x": [gx0], "y": [gy0],
                                          "dw": [gx1 - gx0], "dh": [gy1 - gy0]}
            self.chunk_fig.title.text = title
            self.chunk_counts = counts
        self.numbers.value = (
            # short lines, wrapped at the panel's width rather than clipped on the right
            f"<code style='white-space:pre-wrap; overflow-wrap:anywhere; font-size:11px; "
            f"display:block'>"
            f"hits {snap.hits}  misses {snap.misses}  joined {snap.joined}\n"
            f"hit ratio {snap.hit_ratio:.0%}\n"
            f"reads {snap.reads}  prefetch {snap.prefetch_reads}  cancelled {snap.cancelled}\n"
            f"read {snap.bytes_read / 1e6:.1f} MB at {snap.read_rate / 1e6:.1f} MB/s\n"
            f"store requests {snap.store_requests}  ranges {snap.range_requests}"
            f"  shard indexes {snap.index_reads}  retries {snap.retries}\n"
            f"queued v/p/s {q.get('visible', 0)}/{q.get('planned', 0)}/{q.get('speculative', 0)}"
            f"  in flight {snap.in_flight}\n"
            f"latency p50 {snap.latency_p50 * 1e3:.1f} ms  p95 {snap.latency_p95 * 1e3:.1f} ms\n"
            f"cache {snap.cache_bytes / 1e6:.0f}/{snap.cache_budget / 1e6:.0f} MB"
            f"{self._roi_line(ctl)}</code>"
        )
        self.last = snap
        self.ticks += 1
        return snap

    def _push(self, row: dict[str, float]) -> None:
        """Stream ``row`` to the plots, unless it says what the last one said: an idle engine
        draws nothing once its rates have decayed (each streamed row re-renders every plot in the
        browser, 4 times a second per panel). The last of a run of equal rows is streamed with the next new one,
        so a value that held stays flat on the plot up to where it changed."""
        # to the thousandth (of MB/s, ms, a ratio): the read rate decays exponentially and
        # never reaches 0; below that the plot shows no change
        values = [round(row[c], 3) for c in COLUMNS if c != "t"]
        if self._last_values is not None and all(
            a == b or (a != a and b != b) for a, b in zip(values, self._last_values)  # NaN too
        ):
            self._held = row
            return
        rows = [self._held, row] if self._held is not None else [row]
        self.source.stream({c: [float(r[c]) for r in rows] for c in COLUMNS},
                           rollover=self.history_length)
        self._held, self._last_values = None, values

    @staticmethod
    def _roi_line(ctl: Any) -> str:
        """The region statistics' own stream (PLANNED reads, below the visible ones)."""
        stats = getattr(ctl, "roi_stats", None) if ctl is not None else None
        if stats is None:
            return ""
        (y0, y1), (x0, x1) = stats.region
        state = "complete" if stats.done else f"{stats.progress:.0%}"
        return (f"\nregion y[{y0}:{y1}] x[{x0}:{x1}] along {stats.dim}: {stats.chunks}/{stats.total}"
                f" chunks (planned reads), {state}")

    @property
    def history(self) -> dict[str, np.ndarray]:
        """The rows currently held by the plots, column by column."""
        data = self.source.data
        return {c: np.asarray(data[c]) for c in COLUMNS}

    # -- lifetime --------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._timer.running

    def close(self) -> None:
        """Stop the timer and close the widgets."""
        self._timer.stop()
        self.themed.discard(self.plot_widget)
        if self.probe is not None:
            self.probe.close()
        self.widget.close()

    def __enter__(self) -> StatsPanel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def __repr__(self) -> str:
        return f"<StatsPanel ticks={self.ticks} interval={self.interval}s last={self.last!r}>"


def stats_panel(**kwargs: Any) -> StatsPanel:
    """The StatsPanel on its own (``tse.stats_panel()``)."""
    try:
        import holoviews  # noqa: F401
        import ipywidgets  # noqa: F401
    except ImportError as exc:
        from ..errors import missing_dependency

        raise missing_dependency(exc.name or "ipywidgets", "lab", "the StatsPanel") from exc
    return StatsPanel(**kwargs)
