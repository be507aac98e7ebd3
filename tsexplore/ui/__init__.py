"""The Jupyter UI: the Explorer and the live StatsPanel (ipywidgets + holoviews/bokeh).

The only package that imports ipywidgets, holoviews, bokeh, panel or IPython. In a notebook,
load the plotting extension once with
``hv.extension('bokeh', inline=True, comms='ipywidgets')``.
"""

from .explorer import Explorer, explore
from .stats_panel import StatsPanel, stats_panel

__all__ = ["Explorer", "StatsPanel", "explore", "stats_panel"]
