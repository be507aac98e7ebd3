"""The Jupyter UI: the Explorer, its image canvas and the live StatsPanel.

The only package that imports ipywidgets, anywidget, holoviews, bokeh, panel or IPython. The
Explorer draws on :class:`ImageCanvas` (an anywidget: ``uint8`` frames coloured in the
browser); its profile plot and the StatsPanel are bokeh, so in a notebook load the plotting
extension once with :func:`extension` (``hv.extension('bokeh', inline=True, comms='ipywidgets')``
with every stylesheet inline too: the notebook works without the internet).
"""

from ._entry import explore
from .canvas import ImageCanvas
from .explorer import Explorer
from .linked import LinkedViews, link
from .resources import extension
from .roi import RoiHandle
from .stats_panel import StatsPanel, stats_panel

__all__ = ["Explorer", "ImageCanvas", "LinkedViews", "RoiHandle", "StatsPanel", "explore", "extension", "link",
           "stats_panel"]
