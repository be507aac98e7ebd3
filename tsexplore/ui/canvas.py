"""The image canvas: an anywidget that paints ``uint8`` colour-index frames in the browser.

The kernel sends each frame as one binary buffer at screen resolution (one byte per pixel,
0 = NaN, or a lossless PNG/WebP when the link is slow) with the part of the array it covers
(``extent``: edges in index coordinates, pixel ``i`` spans ``[i - 0.5, i + 0.5]``) and the
range its values were quantised over. The browser applies the 256-colour table, so colormap
and display-range changes (``cmap``, ``clim``) repaint without a kernel round trip. At most
one frame is in flight: the browser acks each frame and the newest waiting one goes out on the
ack (:class:`~tsexplore.ui._frames.FrameFlow`). Pan and zoom move the picture in the browser at
once and report the new region (``viewport``); a click reports a pixel; an optional slider
with a play button lives in the browser too (``slider``). A label layer (integer ids,
:meth:`ImageCanvas.show_labels`) is coloured and blended in the browser; colour bars
(``colorbar``), a crosshair (``crosshair``) and the page's theme (reported as ``theme``) are
drawn there too. The JavaScript is ``static/theme.js`` and ``static/canvas.js``, one module (no
build step, nothing fetched from a CDN); ``tsexplore.ui._render`` paints the same pixels in
the kernel.

>>> canvas = ImageCanvas(shape=(ny, nx))
>>> canvas.show_plane(data)                      # colour-mapped over its 2-98 % range
>>> canvas.observe(lambda ch: print(ch["new"]), "viewport")
"""

from __future__ import annotations

import functools
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import anywidget
import numpy as np
import traitlets as t

from ..errors import ConfigError
from ..sources import buffers
from ._axes import AxisMap
from ._frames import (
    ENCODINGS,
    CodecCosts,
    EncodedFrame,
    Extent,
    FrameFlow,
    Range,
    choose_encoding,
    compact_labels,
    decode_payload,
    encode_indices,
    fit_view,
    to_indices,
)
from ._kernel import Dispatcher
from .theme import LIGHT, esm, parse_theme

STATIC = Path(__file__).parent / "static"
CMAPS = ("viridis", "magma", "cividis", "coolwarm", "RdBu_r", "gray", "turbo")
NAN_RGBA = (217, 217, 217, 255)
MODES = ("replace", "tile", "base")
#: what each further frame of a message (``more``: tiles that travel together) says of itself
PART_KEYS = ("gen", "shape", "extent", "clim", "encoding", "label", "index", "mode", "info", "final",
             "channels", "clims", "hist", "at")
#: the plot's place on the canvas (CSS pixels): margins around the plot box, and the width
#: each colour bar takes on the right (``canvas.js`` and ``_render`` lay it out by these)
MARGINS = {"left": 58, "right": 14, "top": 24, "bottom": 40, "colorbar": 84}

#: the colours of a composite's channels, in order (then white)
CHANNEL_COLORS = ("#00ff00", "#ff00ff", "#00ffff", "#ffff00", "#ff0000", "#0000ff", "#ff8000", "#ffffff")
#: the largest coordinate label list sent for a non-uniform axis (readouts and ticks)
MAX_LABELS = 20_000


def palette_rgba(name: str) -> np.ndarray:
    """A (256, 4) ``uint8`` RGBA table: index 0 for NaN, 1..255 along colormap ``name``."""
    from holoviews.plotting.util import process_cmap

    colours = process_cmap(name, 255)
    out = np.empty((256, 4), np.uint8)
    out[0] = NAN_RGBA
    for i, c in enumerate(colours, start=1):
        c = c.lstrip("#")
        out[i] = (int(c[0:2], 16), int(c[2:4], 16), int(c[4:6], 16), 255)
    return out


@functools.cache
def _palette_table(cmaps: tuple[str, ...]) -> bytes:
    """The RGBA tables of ``cmaps``, one after the other (made once per process)."""
    return np.concatenate([palette_rgba(c) for c in cmaps]).tobytes()


def axis_spec(axis: AxisMap | None = None, *, dim: str = "", size: int = 1) -> dict[str, Any]:
    """What the browser needs to label an axis: ``index i -> c0 + i * dc`` (units) when the
    coordinate is uniform, else the coordinate labels (up to :data:`MAX_LABELS` of them)."""
    if axis is None:
        return {"dim": dim, "size": int(size), "c0": 0.0, "dc": 1.0, "units": "", "labels": None}
    # AxisMap keeps c0 = 0, dc = 1 with the values as labels for a non-uniform coordinate
    nonuniform = axis.labels is not None and axis.c0 == 0.0 and axis.dc == 1.0
    labels = None
    if nonuniform and axis.size <= MAX_LABELS:
        labels = [axis.label(i) for i in range(axis.size)]
    return {"dim": axis.dim, "size": int(axis.size), "c0": float(axis.c0), "dc": float(axis.dc),
            "units": axis.units, "labels": labels}


def full_extent(shape: tuple[int, int]) -> Extent:
    """The extent of a whole ``(ny, nx)`` plane."""
    return ((-0.5, shape[0] - 0.5), (-0.5, shape[1] - 0.5))


class ImageCanvas(anywidget.AnyWidget):  # type: ignore[misc]
    """A zoomable image of colour indices, coloured in the browser; see the module docstring.

    Kernel side: :meth:`show` (indices), :meth:`show_plane` (a float plane), :meth:`set_view`,
    traits ``viewport`` / ``pixel`` / ``slider_value`` set from the browser (observe them),
    :meth:`on_pixel`, :meth:`on_index`, :meth:`on_hover`, :meth:`stats`.
    Encoding (kernel only): ``encoding`` = ``"raw"`` | ``"png"`` | ``"webp"`` | ``"auto"``
    (measured link). Acks: ``ack_policy="eager"`` (the browser acks each frame on arrival) or
    ``"lazy"`` (the ack rides on the browser's next message, e.g. a slider move, and is sent
    alone after ``lazy_ack_ms`` or when the kernel asks for it).
    """

    _esm = esm("canvas.js")
    _css = STATIC / "canvas.css"

    width = t.Int(560).tag(sync=True)
    height = t.Int(420).tag(sync=True)
    aspect = t.Enum(("equal", "auto"), "equal").tag(sync=True)
    cmap = t.Unicode("viridis").tag(sync=True)
    palette_names = t.List(t.Unicode()).tag(sync=True)
    palettes = t.Bytes(b"").tag(sync=True)
    clim = t.Any(None).tag(sync=True)  # display range [lo, hi]; None: each frame's own range
    x_axis = t.Dict().tag(sync=True)
    y_axis = t.Dict().tag(sync=True)
    y_origin = t.Enum(("lower", "upper"), "lower").tag(sync=True)
    title = t.Unicode("").tag(sync=True)
    view0 = t.Dict().tag(sync=True)  # the view a newly created browser state starts with ({}: all)
    slider = t.Dict().tag(sync=True)  # {} or {"dim", "size", "interval", "c0", "dc", "units", "labels"}
    hover_exact = t.Bool(False).tag(sync=True)
    lazy_ack_ms = t.Int(250).tag(sync=True)
    # channels (a composite): a colour, a toggle and a display range each ([lo, hi] or None:
    # the frame's own); ``rgb``: the channels are R, G, B (A) shown as they are
    channel_names = t.List(t.Unicode()).tag(sync=True)
    channel_colors = t.List(t.Unicode()).tag(sync=True)
    channel_on = t.List(t.Bool()).tag(sync=True)
    channel_clims = t.List(t.Any()).tag(sync=True)
    rgb = t.Bool(False).tag(sync=True)
    #: the region of the statistics along the slider ({"y": [lo, hi], "x": [lo, hi]} in index
    #: edges; {}: none), drawn on the image
    roi_box = t.Dict().tag(sync=True)
    #: the point of linked orthogonal planes ({"y": iy, "x": ix}, index coordinates; {}: none)
    crosshair = t.Dict().tag(sync=True)
    #: colour bars right of the plot (one per visible channel), labelled by ``value_axis``
    #: ({"label": name, "units": units})
    colorbar = t.Bool(False).tag(sync=True)
    value_axis = t.Dict().tag(sync=True)
    margins = t.Dict(MARGINS).tag(sync=True)
    #: how opaque the label layer is drawn over the image (0: hidden)
    label_opacity = t.Float(0.5).tag(sync=True)
    #: a PNG of the picture (the kernel's snapshot), shown until frames come: a notebook saved
    #: with its widget state shows it without a kernel
    poster = t.Bytes(b"").tag(sync=True)
    _tse_uid = t.Unicode("").tag(sync=True)  # one browser-side state per widget

    # kernel side only: set from the browser's messages; ``viewport["shape"]`` is the plane's
    # (ny, nx) the browser's view was made for (a view of a plane since replaced is stale)
    viewport = t.Dict()
    pixel = t.Dict()
    slider_value = t.Int(0)
    #: the page's colours where the canvas is shown (:mod:`.theme`; set by the browser)
    theme = t.Dict(LIGHT)
    encoding = t.Enum((*ENCODINGS, "auto"), "raw")
    ack_policy = t.Enum(("eager", "lazy"), "eager")

    def __init__(self, shape: tuple[int, int] | None = None, *, cmaps: tuple[str, ...] = CMAPS,
                 dispatch: Any = "auto", wait_ready: bool = False, **kwargs: Any) -> None:
        if "cmap" in kwargs and kwargs["cmap"] not in cmaps:
            raise ConfigError(f"cmap={kwargs['cmap']!r} is not one of {cmaps}")
        kwargs.setdefault("palette_names", list(cmaps))
        kwargs.setdefault("palettes", _palette_table(tuple(cmaps)))
        if shape is not None:
            kwargs.setdefault("y_axis", axis_spec(dim="y", size=int(shape[0])))
            kwargs.setdefault("x_axis", axis_spec(dim="x", size=int(shape[1])))
        kwargs.setdefault("_tse_uid", uuid.uuid4().hex)
        super().__init__(**kwargs)
        self.dispatch = Dispatcher() if dispatch == "auto" else Dispatcher(dispatch)
        self._home = threading.get_ident()  # the kernel's thread: comm sends are made there
        self.flow: FrameFlow[tuple[dict[str, Any], EncodedFrame]] = FrameFlow()
        self.costs = CodecCosts()
        self.by_encoding: Counter[str] = Counter()
        self._last_encoding = "raw"
        self._gen = 0
        self._lock = threading.Lock()
        self._base: tuple[dict[str, Any], EncodedFrame] | None = None
        self._frames: list[tuple[dict[str, Any], EncodedFrame]] = []
        self._labels: Any = None  # the label layer: (meta, indices, table of ids)
        self._poked = 0
        self._from_browser = False
        # with wait_ready, frames are only remembered until the browser's state exists (its
        # "ready"); then the picture goes in one message (no frame is sent twice)
        self._ready = not wait_ready
        self._pixel_callbacks: list[Callable[[dict[str, Any]], Any]] = []
        self._clim_callbacks: list[Callable[[int, Range], Any]] = []
        self._roi_callbacks: list[Callable[[dict[str, Any]], Any]] = []
        self._index_callbacks: list[Callable[[int], Any]] = []
        self._hover: Callable[[int, int], Any] | None = None
        self.messages_in: Counter[str] = Counter()
        self.on_msg(self._on_browser)
        self.observe(self._on_slider_value, "slider_value")

    # -- frames ------------------------------------------------------------------------------
    def show(self, indices: np.ndarray, extent: Extent | None = None, clim: Range = (0.0, 1.0), *,
             generation: int | None = None, label: str = "", index: int | None = None,
             mode: str = "replace", info: str = "", final: bool = True,
             clims: Any = None, hists: Any = (), at: str | None = None) -> int:
        """Paint ``indices`` (2-D ``uint8``, 0 = NaN) covering ``extent`` (edges in index
        coordinates; default: the whole plane). ``clim`` is the range the indices were
        quantised over (for the value readout and for display-range changes). Frames of an
        older ``generation`` than one painted are dropped in the browser; ``mode="tile"``
        adds to the picture of the same generation, ``"base"`` keeps the frame under the
        others (an overview). ``label`` is drawn as the title, ``info`` on the status line
        under the plot; ``index`` (the slider position the frame shows) and ``final`` (the
        last piece of its generation) travel with it (``tse-paint`` events, ``data-*``
        attributes); ``at`` (the slider position, as text) pairs the frame with the label
        layer of the same position. A ``(channels, y, x)`` stack is a composite (``clims``: each channel's
        range); ``hists`` (:class:`~tsexplore.controller.Histogram`, one per channel) travel
        with the frame as one more buffer of 256 log heights each. Callable from any thread;
        returns the generation."""
        if mode not in MODES:
            raise ConfigError(f"mode must be one of {MODES}, got {mode!r}")
        src = np.asarray(indices)
        # a copy (the caller may reuse its buffer) in a recycled buffer: a frame's size changes
        # with every pan and zoom, and fresh ones would leave their sizes in malloc's arenas
        arr: np.ndarray = buffers.empty(src.size).reshape(src.shape)
        np.copyto(arr, src, casting="unsafe")
        if arr.ndim not in (2, 3):
            raise ConfigError(f"a frame is a 2-D uint8 plane (or a stack of channels), got shape {np.shape(indices)}")
        nch = 1 if arr.ndim == 2 else int(arr.shape[0])
        if extent is None:
            extent = full_extent(arr.shape[-2:])  # type: ignore[arg-type]
        (y0, y1), (x0, x1) = extent
        lo, hi = float(clim[0]), float(clim[1])
        enc = self._pick_encoding(arr.size)
        frame = encode_indices(arr.reshape(-1, arr.shape[-1]), enc)  # channels travel stacked
        self.costs.record(frame)
        with self._lock:
            if generation is None:
                self._gen += 1
                generation = self._gen
            else:
                self._gen = max(self._gen, int(generation))
            meta = {"type": "frame", "gen": int(generation), "shape": list(arr.shape[-2:]),
                    "extent": [[float(y0), float(y1)], [float(x0), float(x1)]], "clim": [lo, hi],
                    "encoding": frame.encoding, "label": str(label),
                    "index": None if index is None else int(index), "mode": mode,
                    "info": str(info), "final": bool(final), "channels": nch,
                    "clims": [[float(a), float(b)] for a, b in clims] if clims is not None else None,
                    "hist": None, "at": at}
            if hists:
                meta["hist"] = {"ranges": [[float(h.range[0]), float(h.range[1])] for h in hists],
                                "max": [int(h.counts.max()) for h in hists]}
                frame = replace(frame, hist=b"".join(h.log_bytes() for h in hists))
            item = (meta, frame)
            self._remember(item)
            if not self._ready:
                return int(generation)
            out = self.flow.offer(item, frame.nbytes, queue=mode == "tile")
        if out is not None:
            self._call(self._transmit, *out)
        else:
            seq = self.flow.waiting_on_lazy_ack()
            if seq is not None and seq != self._poked:
                self._poked = seq
                self._call(self.send, {"type": "ack?"})
        return int(generation)

    def _call(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn`` now on the kernel's thread (a frame made in a comm handler goes out
        before the kernel's "idle"), else hand it to the kernel's loop."""
        if threading.get_ident() == self._home:
            fn(*args)
        else:
            self.dispatch(fn, *args)

    def show_plane(self, plane: np.ndarray, extent: Extent | None = None, clim: Range | None = None,
                   **kwargs: Any) -> Range:
        """Colour-map a float ``plane`` (over ``clim``, or its 2-98 % range) and :meth:`show`
        it; returns the range used."""
        indices, rng = to_indices(plane, clim)
        self.show(indices, extent, rng, **kwargs)
        return rng

    def picture(self) -> list[tuple[dict[str, Any], np.ndarray]]:
        """The current picture as a newly rendered view would get it: ``(meta, indices)`` of
        the base frame (if any), then of the frames (or tiles) of the newest generation."""
        with self._lock:
            items = ([self._base] if self._base is not None else []) + list(self._frames)
        out = []
        for meta, frame in items:
            idx = decode_payload(frame)
            n = int(meta.get("channels") or 1)
            out.append((dict(meta), idx.reshape(n, -1, idx.shape[-1]) if n > 1 else idx))
        return out

    def clear(self) -> None:
        """Remove the picture (and the label layer)."""
        with self._lock:
            self._base, self._frames, self._labels = None, [], None
        self._call(self.send, {"type": "clear"})

    # -- the label layer ----------------------------------------------------------------------
    def show_labels(self, ids: np.ndarray | None, extent: Extent | None = None, *, generation: int = 0,
                    at: str | None = None) -> None:
        """Draw integer label ``ids`` (2-D, 0 = no label) over the image, covering ``extent``
        (index edges; default: the whole plane), each id in a colour of its own
        (:func:`~tsexplore.ui._render.label_rgba`), ``label_opacity`` opaque; ``at`` pairs them
        with the frames of the same slider position. They travel as compact indices into a
        table of ``uint32`` ids and are coloured in the browser. ``None`` removes the layer.
        Callable from any thread."""
        if ids is None:
            with self._lock:
                self._labels = None
            self._call(self.send, {"type": "labels", "clear": True})
            return
        arr = np.asarray(ids)
        if arr.ndim != 2 or arr.dtype.kind not in "iub":
            raise ConfigError(f"labels are a 2-D plane of integer ids, got {arr.dtype} of shape {arr.shape}")
        if extent is None:
            extent = full_extent(arr.shape)  # type: ignore[arg-type]
        index, table = compact_labels(arr)
        (y0, y1), (x0, x1) = extent
        meta = {"type": "labels", "gen": int(generation), "shape": list(arr.shape),
                "extent": [[float(y0), float(y1)], [float(x0), float(x1)]], "dtype": str(index.dtype),
                "at": at}
        with self._lock:
            if self._labels is not None and self._labels[0]["gen"] > meta["gen"]:
                return
            self._labels = (meta, index, table)
            ready = self._ready
        if ready:
            self._call(self._send_labels)

    def _send_labels(self) -> None:
        with self._lock:
            item = self._labels
        if item is not None:
            meta, index, table = item
            self.send(meta, buffers=[np.ascontiguousarray(index).tobytes(), table.tobytes()])

    def label_layer(self) -> tuple[dict[str, Any], np.ndarray] | None:
        """The label layer as a newly rendered view gets it: ``(meta, ids)``, or None."""
        with self._lock:
            item = self._labels
        if item is None:
            return None
        meta, index, table = item
        return dict(meta), table[index]

    # -- what the browser shows ---------------------------------------------------------------
    def current_view(self) -> Extent:
        """The view on screen (index edges): the browser's last report when it was made for
        this plane, else the view the kernel set (fitted to square pixels as the browser
        fits it), else the whole plane."""
        ny, nx = int(self.y_axis.get("size", 1)), int(self.x_axis.get("size", 1))
        vp = self.viewport
        if vp and tuple(vp.get("shape", (ny, nx))) == (ny, nx):
            return (tuple(vp["y"]), tuple(vp["x"]))  # type: ignore[return-value]
        v0 = self.view0
        if v0.get("y") and v0.get("x"):
            return self.fitted(v0["y"], v0["x"])
        return self.fitted()

    @property
    def bars(self) -> list[int]:
        """The channels with a colour bar shown (``canvas.js``'s ``bars``)."""
        if not self.colorbar or self.rgb:
            return []
        with self._lock:
            last = self._frames[-1][0] if self._frames else (self._base[0] if self._base else None)
        n = int(last["channels"]) if last else max(1, len(self.channel_names))
        if n < 2:
            return [0]
        on = list(self.channel_on)
        return [k for k in range(n) if k >= len(on) or on[k]]

    @property
    def outer_width(self) -> int:
        """The canvas's width in CSS pixels: the plot, its margins and its colour bars."""
        m = self.margins
        n = len(self.channel_names) if self.channel_names and not self.rgb else 1
        bars = 0 if not self.colorbar or self.rgb else n
        return int(self.width + m["left"] + m["right"] + bars * m["colorbar"])

    def _remember(self, item: tuple[dict[str, Any], EncodedFrame]) -> None:
        """What a freshly rendered view needs: the base frame and the current picture."""
        meta = item[0]
        if meta["mode"] == "base":
            self._base = item
        elif meta["mode"] == "tile" and self._frames and self._frames[-1][0]["gen"] == meta["gen"]:
            self._frames = (self._frames + [item])[-256:]
        elif not self._frames or meta["gen"] >= self._frames[-1][0]["gen"]:
            self._frames = [item]

    def _pick_encoding(self, raw_nbytes: int) -> str:
        if self.encoding != "auto":
            return str(self.encoding)
        self._last_encoding = choose_encoding(raw_nbytes, self.flow.link, self.costs,
                                              current=self._last_encoding)
        return self._last_encoding

    def _transmit(self, seq: int, item: tuple[dict[str, Any], EncodedFrame]) -> None:
        """Send one frame (kernel thread), with the tiles of its picture waiting behind it."""
        parts = [item]
        meta = item[0]
        if meta["mode"] in ("base", "tile"):
            parts += self.flow.take_queued(seq, lambda it: it[0]["mode"] == "tile" and it[0]["gen"] == meta["gen"])
        self._send_parts(seq, parts)

    def _send_parts(self, seq: int, parts: list[tuple[dict[str, Any], EncodedFrame]]) -> None:
        """``parts`` as one message: the first frame's meta, the others' in ``more``."""
        lazy = self.ack_policy == "lazy" and not self.flow.has_pending
        self.flow.stamp(seq)
        metas = [dict(m) for m, _ in parts]
        buffers: list[Any] = [f.payload for _, f in parts]
        for m, (_, f) in zip(metas, parts):  # histograms after the frames, one buffer each
            if m.get("hist") is not None and f.hist:
                m["hist"] = dict(m["hist"], buffer=len(buffers))
                buffers.append(f.hist)
        content = dict(metas[0], seq=seq, ack="lazy" if lazy else "now")
        if len(parts) > 1:
            content["more"] = [{k: m[k] for k in PART_KEYS} for m in metas[1:]]
        self.send(content, buffers=buffers)
        for _, f in parts:
            self.by_encoding[f.encoding] += 1
        if lazy:
            self.flow.mark_lazy(seq)

    # -- the view ---------------------------------------------------------------------------------
    def set_view(self, y_range: Range | None = None, x_range: Range | None = None) -> None:
        """Show this region (edges in index coordinates; None: the whole axis). The browser
        widens it to square pixels and reports the result as ``viewport``."""
        ny, nx = int(self.y_axis.get("size", 1)), int(self.x_axis.get("size", 1))
        y = [float(v) for v in (y_range if y_range is not None else (-0.5, ny - 0.5))]
        x = [float(v) for v in (x_range if x_range is not None else (-0.5, nx - 0.5))]
        self._call(self._set_view, {"y": y, "x": x})

    def _set_view(self, view: dict[str, Any]) -> None:
        self.view0 = view  # where a browser view made later starts
        self.send({"type": "view", **view})

    def fitted(self, y_range: Range | None = None, x_range: Range | None = None) -> Extent:
        """The view the browser shows for ``set_view(y_range, x_range)``: widened about its
        centre to square pixels on the plot box when ``aspect="equal"``."""
        ny, nx = int(self.y_axis.get("size", 1)), int(self.x_axis.get("size", 1))
        y = tuple(map(float, y_range)) if y_range is not None else (-0.5, ny - 0.5)
        x = tuple(map(float, x_range)) if x_range is not None else (-0.5, nx - 0.5)
        extent = ((min(y), max(y)), (min(x), max(x)))
        return fit_view(extent, (self.height, self.width)) if self.aspect == "equal" else extent

    def set_axes(self, y: AxisMap | None = None, x: AxisMap | None = None) -> None:
        """Label the axes from the Explorer's coordinate maps."""
        with self.hold_sync():
            if y is not None:
                self.y_axis = axis_spec(y)
            if x is not None:
                self.x_axis = axis_spec(x)

    # -- browser messages (kernel thread) -----------------------------------------------------
    def _on_browser(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        kind = str(content.get("type"))
        self.messages_in[kind] += 1
        if "ack" in content:
            out = self.flow.ack(int(content["ack"]), float(content.get("held", 0.0)) / 1e3)
            if out is not None:
                self._transmit(*out)
        if kind == "ready":
            self._set_viewport(content)
            self._resend()
        elif kind == "viewport":
            self._set_viewport(content)
        elif kind == "pixel":
            self.pixel = {k: content.get(k) for k in ("iy", "ix", "y", "x")}
            for fn in list(self._pixel_callbacks):
                fn(dict(self.pixel))
        elif kind == "index":
            self._from_browser = True
            try:
                self.slider_value = int(content["value"])
            finally:
                self._from_browser = False
            for cb in list(self._index_callbacks):
                cb(self.slider_value)
        elif kind == "clim":
            lo, hi = (float(v) for v in content["clim"])
            for pick in list(self._clim_callbacks):
                pick(int(content.get("channel", 0)), (lo, hi))
        elif kind == "roi":
            box = {"y": [float(v) for v in content["y"]], "x": [float(v) for v in content["x"]]}
            for region in list(self._roi_callbacks):
                region(box)
        elif kind == "theme":
            self.theme = parse_theme(content)
        elif kind == "hover" and self._hover is not None:
            iy, ix = int(content["iy"]), int(content["ix"])
            self.send({"type": "hover", "iy": iy, "ix": ix, "text": str(self._hover(iy, ix))})

    def _set_viewport(self, content: dict[str, Any]) -> None:
        if "x" in content and "y" in content:
            vp = {"y": tuple(map(float, content["y"])), "x": tuple(map(float, content["x"])),
                  "height": int(content.get("height", self.height)), "width": int(content.get("width", self.width))}
            if "ny" in content and "nx" in content:  # the plane's size the browser knew then
                vp["shape"] = (int(content["ny"]), int(content["nx"]))
            self.viewport = vp

    def _resend(self) -> None:
        """A browser state of this model was made: send it the picture, in one message."""
        self._ready = True
        with self._lock:
            items = ([self._base] if self._base is not None else []) + list(self._frames)
        if items:
            seq, _ = self.flow.force(items[0], sum(f.nbytes for _, f in items))
            self._send_parts(seq, items)
        self._send_labels()

    def _on_slider_value(self, change: dict[str, Any]) -> None:
        if not self._from_browser:
            self._call(self.send, {"type": "index", "value": int(change["new"])})

    def on_pixel(self, fn: Callable[[dict[str, Any]], Any]) -> None:
        """Call ``fn({"iy", "ix", "y", "x"})`` on every click on the image."""
        self._pixel_callbacks.append(fn)

    def on_clim(self, fn: Callable[[int, Range], Any]) -> None:
        """Call ``fn(channel, (lo, hi))`` when a colour range is picked in the browser (a
        histogram handle dragged, a range field typed; it is already shown there)."""
        self._clim_callbacks.append(fn)

    def on_roi(self, fn: Callable[[dict[str, Any]], Any]) -> None:
        """Call ``fn({"y": [lo, hi], "x": [lo, hi]})`` (index edges) after a shift-drag."""
        self._roi_callbacks.append(fn)

    def on_index(self, fn: Callable[[int], Any]) -> None:
        """Call ``fn(value)`` when the browser's slider moves (not when the kernel sets it)."""
        self._index_callbacks.append(fn)

    def on_hover(self, fn: Callable[[int, int], Any] | None) -> None:
        """``fn(iy, ix) -> text``: the exact value readout under the pointer (asked for after
        the pointer rests 150 ms); None turns it off."""
        self._hover = fn
        self.hover_exact = fn is not None

    def stats(self) -> dict[str, Any]:
        """Frames sent, acked, dropped and lost; the measured link; encodings used."""
        return {"flow": self.flow.counts(), "link": self.flow.link.as_dict(),
                "by_encoding": dict(self.by_encoding), "messages_in": dict(self.messages_in)}

    def __repr__(self) -> str:
        c = self.flow.counts()
        return f"<ImageCanvas {self.height}x{self.width} px, {c['sent']} frames sent, {c['acked']} acked>"


def image_canvas(**kwargs: Any) -> ImageCanvas:
    """An :class:`ImageCanvas` (needs the ``lab`` extra: anywidget)."""
    return ImageCanvas(**kwargs)
