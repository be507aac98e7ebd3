"""Linked views: two or more Explorers side by side, their slider, pan and zoom in step.

``tse.explore(a, b, ...)`` (or ``ex.link(other)``) makes one :class:`LinkedViews`. Every
Explorer reads through the one process-wide engine; a move in one (its slider, a pan or a
zoom in the browser, or from code) is applied to the others: the slider of a dim they share
goes to the same index (clipped to its size), and a pan or zoom shows the same region (index
edges) in the others whose plane has the same shape. To see one variable at two times side by
side, give two selections of it that start at different times::

    tse.explore(ds.temp, ds.temp.isel(time=slice(10, None)))   # time t and t + 10, in step
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import ConfigError


class LinkedViews:
    """Explorers whose views move together; ``widget`` shows them side by side."""

    def __init__(self, explorers: Sequence[Any]) -> None:
        import ipywidgets as w

        self.explorers = list(explorers)
        if len(self.explorers) < 2:
            raise ConfigError(f"linked views need two or more Explorers, got {len(self.explorers)}")
        self._following = False
        for ex in self.explorers:
            ex.followers.append(self._follow)
        self.widget = w.Box([ex.widget for ex in self.explorers],
                            layout=w.Layout(display="flex", flex_flow="row wrap", align_items="flex-start"))
        self.widget.add_class("tsexplore-linked")

    def _follow(self, source: Any, changes: dict[str, Any]) -> None:
        """``source`` changed its view by ``changes``: the others do the same."""
        if self._following:
            return
        self._following = True
        try:
            for ex in self.explorers:
                if ex is not source and ex.controller is not None and not ex._closed:
                    self._apply(source, ex, changes)
        finally:
            self._following = False

    @staticmethod
    def _apply(source: Any, ex: Any, changes: dict[str, Any]) -> None:
        for dim, value in dict(changes.get("indices", {})).items():
            slider = ex.sliders.get(dim)
            if slider is not None:
                slider.value = max(slider.min, min(slider.max, int(value)))
        if "y_range" in changes or "x_range" in changes:
            gs, g = source.geometry, ex.geometry
            same = (gs.shape[gs.axis(gs.ydim)], gs.shape[gs.axis(gs.xdim)]) == \
                (g.shape[g.axis(g.ydim)], g.shape[g.axis(g.xdim)])
            if same:
                s = source.controller.state
                ex.set_view(s.y_range, s.x_range)

    def __getitem__(self, k: int) -> Any:
        return self.explorers[k]

    def __len__(self) -> int:
        return len(self.explorers)

    def close(self) -> None:
        """Close every Explorer."""
        for ex in self.explorers:
            ex.close()
        self.widget.close()

    def __enter__(self) -> LinkedViews:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def __repr__(self) -> str:
        return f"<LinkedViews of {len(self.explorers)}: {', '.join(ex.var_picker.value for ex in self.explorers)}>"


def link(*explorers: Any) -> LinkedViews:
    """Link Explorers (their slider, pan and zoom move together)."""
    return LinkedViews(explorers)
