"""The Explorer's colour: the colour range of each channel (fixed, or the frame's robust
range), the robust / fixed toggle, and the composite's channels on the canvas.

The range fields and the histogram's handles the user sees are in the canvas (filled from
each frame: no message of their own); :class:`~tsexplore.ui._parts.RangeField` is their
kernel side (``ex.clim_lo``, ``ex.clim_hi``). A range picked in the browser is already shown
there; it is fixed here, and the frame is quantised again only when its indices cannot show
it (:func:`~tsexplore.ui._parts.indices_allow`).
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from ._axes import AxisMap
from ._parts import RangeField, indices_allow, range_toggle
from .canvas import CHANNEL_COLORS

Range = tuple[float, float]


class ExplorerColour:
    """Colour ranges and channels of one Explorer (``explorer.controller``, ``.canvas``)."""

    def __init__(self, explorer: Any, w: Any, clim: Range | None) -> None:
        self.ex = explorer
        self.clim_arg = None if clim is None else (float(clim[0]), float(clim[1]))
        self.mode = range_toggle(w, "fixed" if clim else "robust")
        #: the fixed colour range of each channel (None: robust)
        self.fixed: list[Range | None] = []
        self._setting_mode = False
        #: each channel's range from a saved view, taken by the first :meth:`reset`
        self.restored: list[Range | None] | None = None
        self.lo = RangeField("min", lambda: self.in_use()[0], lambda v: self.set(lo=v))
        self.hi = RangeField("max", lambda: self.in_use()[1], lambda v: self.set(hi=v))
        self.mode.observe(self._on_mode, "value")

    def reset(self, geometry: Any, da: Any) -> None:
        """A new plane (variable, dims): one range per channel; the channels on the canvas."""
        fixed = None
        if self.mode.value == "fixed":  # a new variable keeps a range fixed before
            fixed = next((r for r in self.fixed if r is not None), self.clim_arg)
        self.fixed = [fixed] * geometry.channels
        if self.restored is not None:  # a saved view's ranges, channel by channel
            given, self.restored = self.restored, None
            self.fixed = [given[k] if k < len(given) else None for k in range(geometry.channels)]
            self._setting_mode = True
            try:
                self.mode.value = "fixed" if any(r is not None for r in self.fixed) else "robust"
            finally:
                self._setting_mode = False
        c = self.ex.canvas
        if geometry.channel is None:
            c.channel_names, c.channel_colors, c.channel_on, c.channel_clims, c.rgb = [], [], [], [], False
            return
        n = geometry.channels
        axis = AxisMap.of(da, geometry.channel)
        c.channel_names = list("RGBA"[:n]) if geometry.rgb else [axis.label(k) for k in range(n)]
        c.channel_colors = [CHANNEL_COLORS[k % len(CHANNEL_COLORS)] for k in range(n)]
        c.channel_on = [True] * n
        c.channel_clims = [list(r) if r is not None else None for r in self.fixed]
        c.rgb = bool(geometry.rgb)

    def clim(self) -> Any:
        """What the controller quantises over: one range (None: robust), or one per channel."""
        if len(self.fixed) <= 1:
            return self.fixed[0] if self.fixed else None
        return tuple(self.fixed) if any(r is not None for r in self.fixed) else None

    def in_use(self, channel: int = 0) -> Range:
        """The range channel ``channel`` is shown with now: its fixed range, else the range of
        the frame on screen (robust)."""
        if channel < len(self.fixed) and self.fixed[channel] is not None:
            return self.fixed[channel]  # type: ignore[return-value]
        ctl = self.ex.controller
        frame = ctl.frame if ctl is not None else None
        if frame is None:
            return (0.0, 1.0)
        return frame.channel_clims[min(channel, len(frame.channel_clims) - 1)]  # type: ignore[no-any-return]

    def set(self, lo: float | None = None, hi: float | None = None, channel: int = 0) -> None:
        """Fix the range of ``channel`` (a bound not given keeps the one in use)."""
        cur = self.in_use(channel)
        rng = (float(cur[0] if lo is None else lo), float(cur[1] if hi is None else hi))
        if not rng[1] > rng[0]:
            self.ex.info.value = (f"<span style='color:#b00'>the colour range needs max > min, got "
                                  f"min={rng[0]} max={rng[1]}</span>")
            return
        self._fix(channel, rng)

    def picked(self, channel: int, clim: Range) -> None:
        """A range picked in the browser (a histogram handle, a range field)."""
        if 0 <= channel < len(self.fixed) and clim[1] > clim[0]:
            self._fix(channel, clim)

    def _fix(self, channel: int, rng: Range) -> None:
        if not 0 <= channel < len(self.fixed):
            raise ConfigError(f"channel {channel} is not one of 0..{len(self.fixed) - 1}")
        ctl = self.ex.controller
        frame = ctl.frame if ctl is not None else None
        was = frame.channel_clims[channel] if frame is not None else None
        self.fixed[channel] = rng
        if self.mode.value != "fixed":
            self._setting_mode = True
            try:
                self.mode.value = "fixed"
            finally:
                self._setting_mode = False
        self.apply(requantise=was is None or not indices_allow(was, rng))

    def _on_mode(self, change: Any) -> None:
        if self._setting_mode:
            return
        if change["new"] == "robust":
            self.fixed = [None] * len(self.fixed)
            self.apply(requantise=True)
        else:  # fixed where it is now
            self.fixed = [self.in_use(k) for k in range(len(self.fixed))]
            self.apply(requantise=False)

    def apply(self, requantise: bool) -> None:
        """Send the display ranges to the browser (recoloured there at once) and read again
        when the frame's indices cannot show them."""
        ctl = self.ex.controller
        assert ctl is not None
        ctl.clim = self.clim()
        shown = [None if r is None else [float(r[0]), float(r[1])] for r in self.fixed]
        if self.ex.geometry.channel is None:
            self.ex.canvas.clim = shown[0]
        else:
            self.ex.canvas.channel_clims = shown
        if requantise:
            ctl.refresh()  # quantised again over the new range
        ortho = getattr(self.ex, "ortho", None)
        if ortho is not None:
            ortho.recolour(requantise)

    # -- channels --------------------------------------------------------------------------
    @property
    def channels(self) -> list[str]:
        return list(self.ex.canvas.channel_names)

    def show_channel(self, channel: int | str, on: bool = True) -> None:
        names = self.channels
        k = names.index(channel) if isinstance(channel, str) and channel in names else channel
        flags = list(self.ex.canvas.channel_on)
        if not isinstance(k, int) or not 0 <= k < len(flags):
            raise ConfigError(f"channel {channel!r} is not one of {names}")
        flags[k] = bool(on)
        self.ex.canvas.channel_on = flags
