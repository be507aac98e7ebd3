"""The Explorer's smaller pieces (kernel side): its control rows, the canvas slider seen as a
slider, the colour range fields and the "no pyramid" notice with its build button.

Layout: every block has its natural width (``flex: 0 0 auto``) inside rows that wrap, so at
any width nothing overlaps: a block that does not fit beside the others goes below them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError, TsExploreError
from ..resolve import Resolved, fallback_source, try_resolve

#: the rows of controls and the blocks beside the image wrap instead of squeezing
WRAP = {"display": "flex", "flex_flow": "row wrap", "align_items": "flex-start"}
SPEEDS = [("1 fps", 1000), ("5 fps", 200), ("10 fps", 100), ("25 fps", 40)]
#: the display range may differ from a frame's quantisation range by this much before the
#: frame is quantised again (fewer distinct colours than 254 * this would show)
REQUANTISE_BELOW = 0.5


def as_dataset(obj: Any) -> Any:
    """``obj`` as a Dataset (a DataArray becomes one with a single variable)."""
    import xarray as xr

    if isinstance(obj, xr.DataArray):
        return obj.to_dataset(name=obj.name or "data")
    if isinstance(obj, xr.Dataset):
        return obj
    raise TsExploreError(
        f"explore() takes an xarray Dataset or DataArray, got {type(obj).__name__}; "
        "open data with tse.open_dataset(...) first"
    )


def selection_of(ds: Any, var: str) -> Resolved:
    """The source behind ``ds[var]`` and the selection over it (or a wrapper of its values)."""
    found = try_resolve(ds[var])
    if found is None:  # in memory, decoded or another backend: read it through the engine
        found = Resolved.whole(fallback_source(ds[var], var))
    return found


def channel_of(da: Any, channel: Any = "auto") -> tuple[str | None, bool]:
    """The dim of ``da`` shown as the channels of a composite, and whether they are RGB(A).

    ``channel="auto"``: a ``uint8`` array whose last dim has 3 or 4 values is RGB(A); else
    the first dim named c, channel, band or wavelength (see
    :data:`~tsexplore.controller.planning.CHANNEL_NAMES`) of at most 8 values; else none.
    ``channel=None``: none (a slider instead); a dim name: that dim."""
    from ..controller.planning import CHANNEL_NAMES, MAX_CHANNELS

    dims = list(da.dims)
    rgb_like = np.dtype(da.dtype) == np.uint8 and da.ndim >= 3 and int(da.shape[-1]) in (3, 4)
    if channel is None:
        return None, False
    if channel != "auto":
        if channel not in dims:
            raise ConfigError(f"channel={channel!r} is not a dim of {da.name!r}, which has {tuple(dims)}")
        return str(channel), rgb_like and channel == dims[-1]
    if rgb_like:
        return str(dims[-1]), True
    for d in dims:
        if str(d).lower() in CHANNEL_NAMES and int(da.sizes[d]) <= MAX_CHANNELS and da.ndim >= 3:
            return str(d), False
    return None, False


#: variable names taken for a label layer (integer ids over the image)
LABEL_NAMES = ("labels", "label", "seg", "segmentation", "segmentations", "mask", "masks")


def looks_like_labels(da: Any) -> bool:
    """Whether ``da`` says it is a segmentation: integer ids named like one, or attributes
    that say so (OME-NGFF's ``image-label``, ``segmentation``, or a name or description with
    "label" or "segmentation" in it)."""
    if np.dtype(da.dtype).kind not in "iu":
        return False
    if str(da.name).lower() in LABEL_NAMES or "image-label" in da.attrs or da.attrs.get("segmentation"):
        return True
    text = " ".join(str(da.attrs.get(k, "")) for k in ("long_name", "standard_name", "description")).lower()
    return "segmentation" in text or "label" in text.split()


def label_candidates(ds: Any, var: str, labels: Any) -> list[tuple[str, Any]]:
    """The label layers to try over ``ds[var]``, best first, as ``(name, dataset holding
    it)``: ``labels`` given (a variable's name or a DataArray), or with ``"auto"`` the other
    variables that look like labels (:func:`looks_like_labels`); none for None/False."""
    import xarray as xr

    if labels is None or labels is False:
        return []
    if isinstance(labels, str) and labels != "auto":
        if labels not in ds.data_vars:
            raise ConfigError(f"labels={labels!r} is not a variable; variables are {list(ds.data_vars)}")
        return [(labels, ds)]
    if isinstance(labels, xr.DataArray):
        name = str(labels.name or "labels")
        return [(name, labels.to_dataset(name=name))]
    if labels != "auto":
        raise ConfigError(f"labels= takes a variable's name, a DataArray, 'auto' or None, got {type(labels).__name__}")
    return [(str(n), ds) for n, v in ds.data_vars.items() if n != var and looks_like_labels(v)]


class RangeField:
    """A colour range bound (``ex.clim_lo``, ``ex.clim_hi``) seen as a field: ``value`` is the
    bound in use (a fixed range, or the frame's robust one); setting it fixes the range. The
    field the user sees is in the canvas (beside the histogram), filled from each frame."""

    def __init__(self, name: str, get: Callable[[], float], set_: Callable[[float], Any]) -> None:
        self.name, self._get, self._set = name, get, set_

    @property
    def value(self) -> float:
        return float(self._get())

    @value.setter
    def value(self, value: float) -> None:
        self._set(float(value))

    def __repr__(self) -> str:
        return f"<RangeField {self.name}={self.value:.6g}>"


def indices_allow(frame_clim: tuple[float, float], display: tuple[float, float]) -> bool:
    """Whether indices quantised over ``frame_clim`` show ``display`` without a new read:
    the display range lies inside the frame's and keeps at least half its colour steps."""
    (flo, fhi), (dlo, dhi) = frame_clim, display
    return flo <= dlo < dhi <= fhi and (dhi - dlo) >= REQUANTISE_BELOW * (fhi - flo)


def block(w: Any, children: list[Any], kind: str = "VBox", **layout: Any) -> Any:
    """A box that keeps its natural size when its parent wraps."""
    layout.setdefault("margin", "0 16px 8px 0")
    return getattr(w, kind)(children, layout=w.Layout(flex="0 0 auto", **layout))


def row(w: Any, children: list[Any]) -> Any:
    """A row of controls that wraps onto more lines when narrower than its contents."""
    return w.Box(children, layout=w.Layout(**WRAP))


def dropdown(w: Any, description: str, options: list[Any], value: Any, width: str) -> Any:
    return w.Dropdown(options=options, value=value, description=description,
                      style={"description_width": "initial"},
                      layout=w.Layout(width=width, flex="0 0 auto"))


def range_toggle(w: Any, value: str) -> Any:
    """The robust / fixed colour-range toggle, its two buttons side by side."""
    return w.ToggleButtons(options=["robust", "fixed"], value=value, description="range",
                           style={"description_width": "initial", "button_width": "64px"},
                           layout=w.Layout(width="200px", flex="0 0 auto"))


def position(state: Any) -> str:
    """A view's slider position as text (``"time=3,z=7"``): what pairs a frame with the label
    layer read for the same position."""
    return ",".join(f"{d}={i}" for d, i in state.indices)


def frame_info(frame: Any, nlevels: int) -> str:
    """The status line under the image for ``frame`` (a :class:`~tsexplore.controller.Frame`)."""
    req = frame.whole or frame.request
    level = f"level {req.level} of {nlevels}, " if nlevels > 1 else ""
    if not frame.final:
        return f"gen {frame.generation}: {level}{'overview' if frame.mode == 'base' else 'tiles'} …"
    (y0, y1), (x0, x1) = req.region
    ny, nx = req.out_shape
    ranges = ", ".join(f"[{lo:.4g}, {hi:.4g}]" for lo, hi in frame.channel_clims)
    tiles = " in tiles" if frame.mode == "tile" else ""
    return (f"gen {frame.generation}: {level}{ny}×{nx} px of y[{y0}:{y1}:{req.step[0]}] "
            f"x[{x0}:{x1}:{req.step[1]}], {len(req.chunks)} chunks{tiles}, {frame.elapsed * 1e3:.0f} ms, "
            f"colour range{'s' if len(frame.channel_clims) > 1 else ''} {ranges}")


def hover_text(frame: Any, iy: int, ix: int) -> str:
    """The value under the pointer at level-0 pixel ``(iy, ix)`` from ``frame`` (the complete
    frame on screen; nothing is read), or "" when it does not hold it at level 0."""
    if frame is None or frame.level != 0:
        return ""
    (y0, y1), (x0, x1) = frame.request.region
    sy, sx = frame.request.step
    if not (y0 <= iy < y1 and x0 <= ix < x1):
        return ""
    note = "" if (sy, sx) == (1, 1) else f" (nearest sample, every {sy}×{sx})"
    at = frame.data[..., (iy - y0) // sy, (ix - x0) // sx]
    if np.ndim(at):  # a composite: every channel's value
        return "values = " + ", ".join(f"{float(v):.6g}" for v in np.ravel(at)) + note
    return f"value = {float(at):.6g}{note}"


def slider_rows(canvas: Any, dims: Sequence[str], canvas_dim: str | None, sizes: dict[str, int],
                indices: dict[str, int], axes: dict[str, Any],
                on_index: Callable[[str, int], Any]) -> tuple[list[Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """One row per slider dim: ``canvas_dim`` uses the canvas's own slider (a speed picker
    here), the others an ipywidgets slider, play button, speed and coordinate readout.
    Returns ``(rows, sliders, readouts, players)``."""
    import ipywidgets as w

    rows: list[Any] = []
    sliders: dict[str, Any] = {}
    readouts: dict[str, Any] = {}
    players: dict[str, Any] = {}
    for dim in dims:
        n = sizes[dim]
        speed = w.Dropdown(options=SPEEDS, value=200, layout=w.Layout(width="90px"))
        if dim == canvas_dim:
            sliders[dim] = CanvasSlider(canvas, dim, n)
            speed.description = f"play {dim} at"
            speed.style = {"description_width": "initial"}
            speed.layout.width = "auto"
            speed.observe(lambda ch: setattr(canvas, "slider", {**canvas.slider, "interval": int(ch["new"])}),
                          "value")
            rows.append(row(w, [speed]))
            continue
        slider = w.IntSlider(value=indices[dim], min=0, max=n - 1, description=dim,
                             continuous_update=True, layout=w.Layout(width="360px"))
        play = w.Play(value=indices[dim], min=0, max=n - 1, interval=200, description=f"play {dim}")
        w.jslink((play, "value"), (slider, "value"))
        w.link((speed, "value"), (play, "interval"))
        readouts[dim] = w.Label(value=axes[dim].label(indices[dim]))
        slider.observe(lambda ch, d=dim: on_index(d, ch["new"]), "value")
        sliders[dim], players[dim] = slider, play
        rows.append(row(w, [slider, play, speed, readouts[dim]]))
    return rows, sliders, readouts, players


class CanvasSlider:
    """The image canvas's own slider (in the browser) seen as an ipywidgets slider:
    ``value`` (get/set; set moves the browser's slider too), ``min``, ``max``, ``description``."""

    def __init__(self, canvas: Any, dim: str, size: int) -> None:
        self.canvas, self.description, self.min, self.max = canvas, dim, 0, int(size) - 1

    @property
    def value(self) -> int:
        return int(self.canvas.slider_value)

    @value.setter
    def value(self, value: int) -> None:
        v = int(value)
        if not self.min <= v <= self.max:
            raise ConfigError(f"{self.description}={v} is outside {self.min}..{self.max}")
        self.canvas.slider_value = v

    def __repr__(self) -> str:
        return f"<CanvasSlider {self.description}={self.value} of {self.min}..{self.max}>"


class PyramidNotice:
    """Says when a zoomed-out view shows a subsample (no pyramid), and offers to build one.
    Its widgets are made the first time it is shown (most views never need it)."""

    def __init__(self, w: Any, can_build: bool, default_target: str) -> None:
        self.w, self.can_build, self._target = w, can_build, default_target
        self.box = w.VBox(layout=w.Layout(display="none", max_width="100%"))
        self.box.add_class("tsexplore-pyramid-notice")
        self.shown = False
        self.text: Any = None
        self.on_build: Any = None  # called by the build button

    def _make(self) -> None:
        w = self.w
        self.text = w.HTML(value="")
        self.path = w.Text(value=self._target, description="into", style={"description_width": "initial"},
                           layout=w.Layout(width="340px", flex="0 0 auto"))
        self.button = w.Button(description="build a pyramid", icon="layer-group",
                               layout=w.Layout(width="auto", flex="0 0 auto"))
        self.bar = w.FloatProgress(value=0.0, min=0.0, max=1.0, layout=w.Layout(width="160px", display="none"))
        self.controls = row(w, [self.path, self.button, self.bar] if self.can_build else [])
        self.box.children = [self.text, self.controls]
        if self.on_build is not None:
            self.button.on_click(lambda _b: self.on_build())

    @property
    def target(self) -> str:
        """Where the pyramid goes (the path box, once there is one)."""
        return self._target if self.text is None else str(self.path.value)

    @target.setter
    def target(self, value: str) -> None:
        self._target = value
        if self.text is not None:
            self.path.value = value

    def show(self, message: str | None) -> None:
        """Show ``message`` (None hides the notice)."""
        visible = message is not None
        if visible:
            if self.text is None:
                self._make()
            html = f"<span style='color:#8a5a00'>{message}</span>"
            if self.text.value != html:
                self.text.value = html
        if visible != self.shown:
            self.shown = visible
            self.box.layout.display = "flex" if visible else "none"

    def allow(self, can_build: bool) -> None:
        """Show the build controls only when a pyramid can be built."""
        if self.text is None:
            self._make()
        display = "flex" if can_build else "none"
        if self.controls.layout.display != display:
            self.controls.layout.display = display

    def building(self, busy: bool) -> None:
        if self.text is not None:
            self.button.disabled = busy

    def progress(self, fraction: float | None) -> None:
        """Show the build's progress (None: hide the bar)."""
        if self.text is None:
            self._make()
        if fraction is None:
            self.bar.layout.display = "none"
            return
        self.bar.layout.display = "inline-flex"
        self.bar.value = max(0.0, min(1.0, float(fraction)))
