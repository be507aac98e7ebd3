"""Notebooks that look the same without the internet: every resource from the installed packages.

holoviews' ``hv.extension('bokeh', inline=True)`` embeds BokehJS and Panel's JavaScript, but
the plots Panel renders still link four stylesheets on ``cdn.holoviz.org`` (its theme, layout and
loading CSS): on a cluster with no internet the browser asks for them and the plots lose their
styling. :func:`extension` loads the extension inline with plot updates through ipywidgets
(the comms that apply every update in JupyterLab and Voila) and adds a Panel preprocessing hook
that replaces each such link by the stylesheet itself, read from the installed Panel.
"""

from __future__ import annotations

from typing import Any


def _inline_stylesheets(_viewable: Any, root: Any) -> None:
    """Panel hook: every stylesheet link into Panel's CDN folder becomes the file's text."""
    from bokeh.models.ui import UIElement
    from panel.io.notebook import patch_inline_stylesheets

    for model in root.select({"type": UIElement}):
        patch_inline_stylesheets(model)


def inline_stylesheets() -> None:
    """Make Panel (and so holoviews' bokeh plots) inline its stylesheets (once per process)."""
    from panel.viewable import Viewable

    if _inline_stylesheets not in Viewable._preprocessing_hooks:
        Viewable._preprocessing_hooks.append(_inline_stylesheets)


def extension(*backends: str, **kwargs: Any) -> None:
    """``hv.extension(*backends)`` (default ``"bokeh"``) for notebooks that work offline:
    JavaScript and stylesheets inline from the installed packages, updates through ipywidgets.
    Other keyword arguments go to ``hv.extension``."""
    import holoviews as hv

    kwargs.setdefault("inline", True)
    kwargs.setdefault("comms", "ipywidgets")
    hv.extension(*(backends or ("bokeh",)), **kwargs)
    inline_stylesheets()
