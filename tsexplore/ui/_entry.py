"""``tsexplore.ui.explore``: one Explorer, or several linked (:mod:`.linked`)."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from .explorer import Explorer
from .linked import LinkedViews


def explore(*objs: Any, var: str | None = None, **kwargs: Any) -> Any:
    """An :class:`~tsexplore.ui.Explorer` on a Dataset or DataArray (``ds.tse.explore()``
    calls this); with several objects, one Explorer each, linked (:class:`LinkedViews`; only
    the first shows the StatsPanel). ``var`` may also be the second positional argument."""
    try:
        import anywidget  # noqa: F401
        import bokeh  # noqa: F401
        import holoviews  # noqa: F401 - colormaps
        import ipywidgets  # noqa: F401
        import jupyter_bokeh  # noqa: F401
    except ImportError as exc:
        from ..errors import missing_dependency

        raise missing_dependency(exc.name or "ipywidgets", "lab", "the Explorer") from exc
    found = list(objs)
    if len(found) == 2 and isinstance(found[1], str):  # explore(ds, "temp")
        var = found.pop()
    if not found:
        raise ConfigError("explore() needs a Dataset or DataArray (or several, for linked views)")
    if len(found) == 1:
        return Explorer(found[0], var, **kwargs)
    stats = kwargs.pop("stats", True)
    return LinkedViews([Explorer(o, var, stats=stats and k == 0, **kwargs) for k, o in enumerate(found)])
