"""The page's theme, as the widgets' browser side reports it, and bokeh plots that follow it.

The image canvas (``static/canvas.js``) and :class:`ThemeProbe` (an empty anywidget, for bokeh
plots with no canvas beside them) read the page's colours where they sit -- JupyterLab's
``--jp-*`` variables, VS Code's ``--vscode-*``, else the OS's ``prefers-color-scheme``
(``static/canvas.css``) -- and send them to the kernel now and after every theme change, as a
dict: ``fg``, ``fg2`` (text, secondary text), ``bg``, ``bg2`` (background, panel background),
``border`` (RGBA lists) and ``dark``. :func:`bokeh_theme` turns it into a bokeh ``Theme`` in
the same colours; :class:`ThemedPlots` keeps a set of bokeh widgets in the theme reported
last (a theme change re-colours them live: one patch each).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anywidget
import traitlets as t

STATIC = Path(__file__).parent / "static"
#: the theme assumed until a browser reports one (JupyterLab Light's colours)
LIGHT = {"fg": [0, 0, 0, 222], "fg2": [0, 0, 0, 138], "bg": [255, 255, 255, 255],
         "bg2": [238, 238, 238, 255], "border": [189, 189, 189, 255], "dark": False}


def esm(*names: str) -> str:
    """The ES module made of ``static/theme.js`` and then ``names`` (one module: no imports)."""
    return "\n".join((STATIC / n).read_text(encoding="utf-8") for n in ("theme.js", *names))


def parse_theme(content: dict[str, Any]) -> dict[str, Any]:
    """A theme message from the browser as a theme dict (unknown keys dropped)."""
    return {k: (bool(content[k]) if k == "dark" else [int(v) for v in content[k]][:4])
            for k in LIGHT if k in content}


def opaque(colour: Any, under: Any) -> str:
    """``colour`` (RGBA 0..255) over ``under`` as ``#rrggbb``."""
    a = colour[3] / 255 if len(colour) > 3 else 1.0
    rgb = [round(colour[k] * a + under[k] * (1 - a)) for k in range(3)]
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def bokeh_theme(theme: dict[str, Any]) -> Any:
    """A bokeh ``Theme`` in ``theme``'s colours: background, text, axes, grid, legend."""
    from bokeh.themes import Theme

    bg = theme["bg"]
    fg, fg2, border = opaque(theme["fg"], bg), opaque(theme["fg2"], bg), opaque(theme["border"], bg)
    back = opaque(bg, bg)
    return Theme(json={"attrs": {
        "Plot": {"background_fill_color": back, "border_fill_color": back, "outline_line_color": border},
        "Axis": {"axis_line_color": fg2, "major_tick_line_color": fg2, "minor_tick_line_color": fg2,
                 "major_label_text_color": fg, "axis_label_text_color": fg},
        "Title": {"text_color": fg},
        "Grid": {"grid_line_color": border, "grid_line_alpha": 0.6},
        "Legend": {"background_fill_color": back, "background_fill_alpha": 0.8, "label_text_color": fg,
                   "border_line_color": border},
        "ColorBar": {"background_fill_color": back, "major_label_text_color": fg, "title_text_color": fg},
    }})


class ThemedPlots:
    """Bokeh widgets (``bokeh_widget``s) kept in the page's theme: :meth:`add` puts one in the
    current theme, :meth:`set` changes it for all (kernel thread)."""

    def __init__(self) -> None:
        self.theme: dict[str, Any] = dict(LIGHT)
        self._widgets: list[Any] = []
        self._lock = threading.Lock()

    def add(self, widget: Any) -> Any:
        with self._lock:
            self._widgets.append(widget)
        if self.theme != LIGHT:
            self._apply(widget)
        return widget

    def discard(self, widget: Any) -> None:
        with self._lock:
            if widget in self._widgets:
                self._widgets.remove(widget)

    def set(self, theme: dict[str, Any]) -> None:
        theme = {**LIGHT, **theme}
        if theme == self.theme:
            return
        self.theme = theme
        with self._lock:
            widgets = list(self._widgets)
        for widget in widgets:
            self._apply(widget)

    def _apply(self, widget: Any) -> None:
        doc = widget._model.document if hasattr(widget, "_model") else None
        if doc is None:
            return
        batch = getattr(widget, "batch", None)
        if batch is None:
            doc.theme = bokeh_theme(self.theme)
            return
        with batch():
            doc.theme = bokeh_theme(self.theme)


class ThemeProbe(anywidget.AnyWidget):  # type: ignore[misc]
    """An empty widget that reports the page's theme where it is shown (``theme``, kernel
    side); ``on_theme(fn)`` calls ``fn(theme)`` after each change."""

    _esm = esm("theme_probe.js")
    _css = STATIC / "canvas.css"
    theme = t.Dict(LIGHT)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.on_msg(self._on_browser)

    def _on_browser(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        if content.get("type") == "theme":
            self.theme = parse_theme(content)

    def on_theme(self, fn: Any) -> None:
        self.observe(lambda ch: fn(ch["new"]), "theme")
