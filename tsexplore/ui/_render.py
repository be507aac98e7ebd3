"""The image canvas's picture rendered in the kernel: what ``canvas.js`` paints, as an RGBA array.

``ex.snapshot()``, ``ex.movie()`` and the PNG a notebook keeps of the Explorer are made here,
without a browser. The plot area is the browser's arithmetic exactly (pure NumPy, float64 as
JavaScript's numbers): every screen pixel takes the layer pixel under its centre
(:func:`centres`, :func:`lookup`), the colour tables are those the browser applies
(:func:`~tsexplore.ui._frames.compose_lut`, :func:`~tsexplore.ui._frames.composite_rgba`), label
ids are blended over it in their colours (:func:`label_rgba`) and each colour bar shows its
table over the range in use (:func:`bar_pixels`) -- so those pixels equal the canvas's. The
text (ticks, axis names, title) is drawn by Pillow in its own font, where the browser uses the
page's: the same words in the same places, not the same glyphs.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError
from ._frames import Extent, Range, channel_ramp, compose_lut, composite_rgba

RGBA = tuple[int, int, int, int]


# -- the arithmetic canvas.js shares -----------------------------------------------------------


def centres(a: float, b: float, n: int, reverse: bool = False) -> np.ndarray:
    """Where screen pixel ``k`` of ``n`` spanning ``[a, b]`` samples: its centre (from ``b``
    down with ``reverse``: rows of an image whose y grows upwards)."""
    k = np.arange(n, dtype=np.float64)
    return b - (k + 0.5) / n * (b - a) if reverse else a + (k + 0.5) / n * (b - a)


def lookup(pos: np.ndarray, e0: float, e1: float, n: int) -> np.ndarray:
    """The pixel of a layer of ``n`` pixels over ``[e0, e1)`` under each position (-1 outside)."""
    inside = (pos >= e0) & (pos < e1)
    k = np.floor((pos - e0) / (e1 - e0) * n)
    return np.where(inside, np.minimum(n - 1, np.where(inside, k, 0)), -1).astype(np.intp)


def label_rgba(ids: Any) -> np.ndarray:
    """Each label id's colour (RGBA ``uint8``, opaque): from a 32-bit integer hash of the id,
    so an id keeps its colour in every frame and every view (``canvas.js``: ``labelColour``)."""
    h = np.asarray(ids, dtype=np.uint64) & 0xFFFFFFFF
    h = ((h ^ (h >> 16)) * 0x45D9F3B) & 0xFFFFFFFF
    h = ((h ^ (h >> 16)) * 0x45D9F3B) & 0xFFFFFFFF
    h = h ^ (h >> 16)
    out = np.empty((*h.shape, 4), np.uint8)
    for k in range(3):
        out[..., k] = 48 + (((h >> (8 * k)) & 255) * 207 >> 8)
    out[..., 3] = 255
    return out


def bar_pixels(table: np.ndarray, rows: int, width: int) -> np.ndarray:
    """A colour bar ``rows`` high: row ``r`` (top first) shows ``table[1 + round((1 - (r +
    0.5) / rows) * 254)]`` -- the top of the range at the top."""
    t = 1 - (np.arange(rows, dtype=np.float64) + 0.5) / rows
    colours = np.asarray(table, np.uint8)[1 + np.floor(t * 254 + 0.5).astype(np.intp)]
    return np.repeat(colours[:, None, :], width, axis=1)


def jround(x: float) -> int:
    """``Math.round``: halves go up (Python's ``round`` goes to even)."""
    return math.floor(x + 0.5)


def blend(under: np.ndarray, colour: np.ndarray, alpha: int) -> np.ndarray:
    """``colour`` over ``under`` at ``alpha`` / 255 (integer arithmetic, as the browser's)."""
    a = int(alpha)
    return ((under.astype(np.int64) * (255 - a) + colour.astype(np.int64) * a + 127) // 255).astype(np.uint8)


# -- what is drawn -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Look:
    """How the canvas colours its frames: a colormap's table and display range, or a
    composite's channels (colours, display ranges, which are on, RGB(A))."""

    palette: np.ndarray  # (256, 4) uint8
    clim: Range | None = None
    channel_colors: tuple[str, ...] = ()
    channel_clims: tuple[Range | None, ...] = ()
    channel_on: tuple[bool, ...] = ()
    rgb: bool = False

    def colour(self, meta: dict[str, Any], indices: np.ndarray) -> np.ndarray:
        """The RGBA (``uint8``, row 0 = lowest y index) of one frame's indices."""
        if int(meta.get("channels") or 1) > 1:
            clims = [tuple(c) for c in (meta.get("clims") or [meta["clim"]])]
            return composite_rgba(indices, list(self.channel_colors), clims,  # type: ignore[arg-type]
                                  list(self.channel_clims), list(self.channel_on) or None, self.rgb)
        lut = compose_lut(self.palette, tuple(meta["clim"]), self.clim)  # type: ignore[arg-type]
        return lut[np.asarray(indices, np.uint8)]


def plot_pixels(layers: list[tuple[dict[str, Any], np.ndarray]], look: Look, view: Extent, size: tuple[int, int],
                background: RGBA, lower: bool = True, labels: tuple[dict[str, Any], np.ndarray] | None = None,
                opacity: float = 0.5) -> np.ndarray:
    """The plot area, ``size`` = (rows, columns) screen pixels showing ``view`` (index edges):
    the layers (``(meta, indices)``, base first) placed by their extents, then ``labels``
    (``(meta, ids)``) blended over them. Returns ``(rows, columns, 4)`` ``uint8``."""
    (vy0, vy1), (vx0, vx1) = view
    H, W = int(size[0]), int(size[1])
    out = np.empty((H, W, 4), np.uint8)
    out[:] = background
    xs, ys = centres(vx0, vx1, W), centres(vy0, vy1, H, reverse=lower)
    for meta, idx in layers:
        rgba = look.colour(meta, idx)
        h, w = rgba.shape[:2]
        (y0, y1), (x0, x1) = meta["extent"]
        cols, rows = lookup(xs, x0, x1, w), lookup(ys, y0, y1, h)
        r_in, c_in = np.flatnonzero(rows >= 0), np.flatnonzero(cols >= 0)
        if r_in.size and c_in.size:
            out[np.ix_(r_in, c_in)] = rgba[np.ix_(rows[r_in], cols[c_in])]
    a = math.floor(float(opacity) * 255 + 0.5)
    if labels is not None and a > 0:
        meta, ids = labels
        h, w = ids.shape
        (y0, y1), (x0, x1) = meta["extent"]
        cols, rows = lookup(xs, x0, x1, w), lookup(ys, y0, y1, h)
        r_in, c_in = np.flatnonzero(rows >= 0), np.flatnonzero(cols >= 0)
        if r_in.size and c_in.size:
            under = out[np.ix_(r_in, c_in)]
            shown = ids[np.ix_(rows[r_in], cols[c_in])]
            mixed = blend(under, label_rgba(shown), a)
            under[shown != 0] = mixed[shown != 0]
            out[np.ix_(r_in, c_in)] = under
    return out


# -- ticks and numbers, as canvas.js writes them ---------------------------------------------------


def nice_step(span: float, n: float) -> float:
    raw = abs(span) / max(1.0, n)
    p = 10.0 ** math.floor(math.log10(raw or 1.0))
    f = raw / p
    return (1 if f < 1.5 else 2 if f < 3.5 else 5 if f < 7.5 else 10) * p


def fmt(v: float) -> str:
    """A number as ``canvas.js``'s ``fmt`` writes it (6 significant digits)."""
    if not math.isfinite(v):
        return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
    a = abs(v)
    if a != 0 and (a >= 1e6 or a < 1e-4):
        mant, exp = f"{v:.2e}".split("e")
        return f"{mant}e{'+' if int(exp) >= 0 else '-'}{abs(int(exp))}"
    text = repr(float(f"{v:.6g}"))
    return text[:-2] if text.endswith(".0") else text


def axis_ticks(axis: dict[str, Any], lo: float, hi: float, n: float) -> list[tuple[float, str]]:
    """``(index position, label)`` ticks of an axis spec over the visible index edges."""
    out: list[tuple[float, str]] = []
    size = int(axis.get("size") or 1)
    first, last = max(-0.5, lo), min(size - 0.5, hi)
    if not last > first:
        return out
    labels = axis.get("labels")
    if labels:
        istep = max(1, jround(nice_step(last - first, n)))
        i = math.ceil(first / istep) * istep
        while i <= last:
            if 0 <= i < size:
                out.append((float(i), str(labels[i])))
            i += istep
        return out
    c0, dc = float(axis.get("c0", 0.0)), float(axis.get("dc", 1.0))
    ca, cb = c0 + first * dc, c0 + last * dc
    cl, ch = min(ca, cb), max(ca, cb)
    step = nice_step(ch - cl, n)
    t = math.ceil(cl / step) * step
    while t <= ch + step * 1e-9:
        out.append(((t - c0) / dc, fmt(0.0 if abs(t) < step * 1e-9 else t)))
        t += step
    return out


def value_ticks(lo: float, hi: float, n: float) -> list[tuple[float, str]]:
    """``(value, label)`` ticks of a colour bar over ``[lo, hi]``."""
    out: list[tuple[float, str]] = []
    if not hi > lo:
        return out
    step = nice_step(hi - lo, n)
    t = math.ceil(lo / step) * step
    while t <= hi + step * 1e-9:
        out.append((t, fmt(0.0 if abs(t) < step * 1e-9 else float(f"{t:.12g}"))))
        t += step
    return out


# -- the whole canvas ------------------------------------------------------------------------------


def _font(size: float) -> Any:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError):  # Pillow without FreeType: its bitmap font
        return ImageFont.load_default()


def canvas_size(canvas: Any, nbars: int) -> tuple[int, int]:
    """The canvas's size in CSS pixels, ``(height, width)`` (``canvas.js``: ``size``)."""
    m = canvas.margins
    return (int(canvas.height + m["top"] + m["bottom"]),
            int(canvas.width + m["left"] + m["right"] + nbars * m["colorbar"]))


def canvas_look(canvas: Any) -> Look:
    from .canvas import palette_rgba

    cmap = canvas.cmap if canvas.cmap in canvas.palette_names else canvas.palette_names[0]
    return Look(palette_rgba(cmap), None if canvas.clim is None else tuple(canvas.clim),
                tuple(canvas.channel_colors), tuple(None if c is None else tuple(c) for c in canvas.channel_clims),
                tuple(bool(b) for b in canvas.channel_on), bool(canvas.rgb))


#: ``render_canvas``'s default: the canvas's own label layer
CANVAS_LABELS: Any = object()


def render_canvas(canvas: Any, scale: float = 1.0, *, picture: list[tuple[dict[str, Any], np.ndarray]] | None = None,
                  labels: Any = CANVAS_LABELS) -> np.ndarray:
    """What ``canvas`` (an :class:`~tsexplore.ui.canvas.ImageCanvas`) shows, ``(rows, columns,
    4)`` ``uint8`` at ``scale`` device pixels per CSS pixel: its picture and labels in the
    view on screen, its colour bars, axes, ticks and title in the page's theme. ``picture``
    (``(meta, indices)`` as :meth:`~tsexplore.ui.canvas.ImageCanvas.picture` gives them) and
    ``labels`` (``(meta, ids)`` or None) replace the canvas's own (a movie's frames)."""
    from PIL import Image, ImageDraw

    if not scale > 0:
        raise ConfigError(f"scale must be > 0, got {scale!r}")
    theme = canvas.theme
    bg, fg, fg2 = (tuple(int(v) for v in theme[k]) for k in ("bg", "fg", "fg2"))
    bg = (bg[0], bg[1], bg[2], 255)
    picture = canvas.picture() if picture is None else picture
    last = picture[-1][0] if picture else None
    m = canvas.margins
    bars = canvas.bars
    ch, cw = canvas_size(canvas, len(bars))
    W, H = jround(cw * scale), jround(ch * scale)
    w, h = int(canvas.width), int(canvas.height)
    pw, ph = max(1, jround(w * scale)), max(1, jround(h * scale))
    look = canvas_look(canvas)
    view = canvas.current_view()
    labels = canvas.label_layer() if labels is CANVAS_LABELS else labels
    if labels is not None and last is not None and None not in (labels[0].get("at"), last.get("at")) \
            and labels[0]["at"] != last["at"]:
        labels = None  # the labels of another slider position are not shown with this image
    out = np.empty((H, W, 4), np.uint8)
    out[:] = bg
    left, top = jround(m["left"] * scale), jround(m["top"] * scale)
    out[top:top + ph, left:left + pw] = plot_pixels(picture, look, view, (ph, pw), bg, canvas.y_origin == "lower",
                                                    labels, canvas.label_opacity)
    clims = _ranges_in_use(canvas, last)
    nch = int(last.get("channels") or 1) if last else 1
    bw = max(1, jround(12 * scale))
    for j, k in enumerate(bars):
        colours = list(canvas.channel_colors)
        table = channel_ramp(colours[k] if k < len(colours) else "#ffffff") if nch > 1 else look.palette
        x0 = jround((m["left"] + w + 12 + j * m["colorbar"]) * scale)
        out[top:top + ph, x0:x0 + bw] = bar_pixels(table, ph, bw)
    base = Image.fromarray(out, "RGBA")
    layer = Image.new("RGBA", base.size, (0, 0, 0, 0))
    g = ImageDraw.Draw(layer)
    s = float(scale)
    font, title_font = _font(11 * s), _font(12 * s)
    line = max(1, round(s))

    def px(x: float) -> float:  # an index position's screen x / y (CSS px), then scaled
        (vy0, vy1), (vx0, vx1) = view
        return (m["left"] + (x - vx0) / (vx1 - vx0) * w) * s

    def py(y: float) -> float:
        (vy0, vy1), _ = view
        f = (vy1 - y) if canvas.y_origin == "lower" else (y - vy0)
        return (m["top"] + f / (vy1 - vy0) * h) * s

    cross = canvas.crosshair or {}
    for key, horizontal in (("x", False), ("y", True)):
        if cross.get(key) is not None:
            at = (py if horizontal else px)(float(cross[key]))
            box = [left, at, left + pw - 1, at] if horizontal else [at, top, at, top + ph - 1]
            g.line(box, fill=(255, 221, 0, 230), width=line)
    roi = canvas.roi_box or {}
    if roi.get("x") and roi.get("y"):
        xa, xb = px(roi["x"][0]), px(roi["x"][1])
        ya, yb = py(roi["y"][0]), py(roi["y"][1])
        g.rectangle([xa, min(ya, yb), xb, max(ya, yb)], outline=(255, 221, 0, 255), width=line)
    g.rectangle([left - line, top - line, left + pw, top + ph], outline=fg2, width=line)
    (vy0, vy1), (vx0, vx1) = view
    for pos, text in axis_ticks(canvas.x_axis, vx0, vx1, max(2.0, w / 90)):
        x = px(pos)
        if left <= x <= left + pw:
            g.line([x, top + ph, x, top + ph + 4 * s], fill=fg2, width=line)
            g.text((x, top + ph + 6 * s), text, fill=fg, font=font, anchor="mt")
    for pos, text in axis_ticks(canvas.y_axis, vy0, vy1, max(2.0, h / 60)):
        y = py(pos)
        if top <= y <= top + ph:
            g.line([left - 4 * s, y, left - 1, y], fill=fg2, width=line)
            g.text((left - 6 * s, y), text, fill=fg, font=font, anchor="rm")
    g.text(((m["left"] + w / 2) * s, (m["top"] + h + m["bottom"]) * s), _axis_name(canvas.x_axis), fill=fg,
           font=font, anchor="md")
    _vertical_text(layer, _axis_name(canvas.y_axis), (12 * s, (m["top"] + h / 2) * s), fg, font)
    names = list(canvas.channel_names)
    va = canvas.value_axis or {}
    for j, k in enumerate(bars):
        x = (m["left"] + w + 12 + j * m["colorbar"]) * s
        g.rectangle([x - line, top - line, x + bw, top + ph], outline=fg2, width=line)
        rng = clims[k] if k < len(clims) else None
        if rng is not None and rng[1] > rng[0]:
            for val, text in value_ticks(rng[0], rng[1], max(2.0, h / 50)):
                y = (m["top"] + (1 - (val - rng[0]) / (rng[1] - rng[0])) * h) * s
                g.line([x + bw, y, x + bw + 4 * s, y], fill=fg2, width=line)
                g.text((x + 18 * s, y), text, fill=fg, font=font, anchor="lm")
        name = (names[k] if k < len(names) else str(k)) if nch > 1 else str(va.get("label", ""))
        units = str(va.get("units", ""))
        label = (f"{name} ({units})" if name else units) if units else name
        _vertical_text(layer, label, (x + (m["colorbar"] - 8) * s, (m["top"] + h / 2) * s), fg, font)
    title = (last or {}).get("label") or canvas.title or ""
    g.text((m["left"] * s, m["top"] / 2 * s), title, fill=fg, font=title_font, anchor="lm")
    return np.asarray(Image.alpha_composite(base, layer))


def _ranges_in_use(canvas: Any, last: dict[str, Any] | None) -> list[Range | None]:
    """The display range of each channel: set in the browser or the kernel, else the frame's."""
    if last is None:
        return []
    frame = [tuple(c) for c in (last.get("clims") or [last["clim"]])]
    if len(frame) > 1:
        shown = list(canvas.channel_clims) + [None] * len(frame)
        return [tuple(shown[k]) if shown[k] is not None else frame[k] for k in range(len(frame))]  # type: ignore[misc]
    return [tuple(canvas.clim) if canvas.clim is not None else frame[0]]  # type: ignore[list-item]


def _axis_name(axis: dict[str, Any]) -> str:
    units = axis.get("units")
    return f"{axis.get('dim', '')} ({units})" if units else str(axis.get("dim", ""))


def _vertical_text(layer: Any, text: str, centre: tuple[float, float], fill: Any, font: Any) -> None:
    """``text`` turned a quarter left, centred on ``centre`` (how the y axis' name is written)."""
    from PIL import Image, ImageDraw

    if not text:
        return
    box = ImageDraw.Draw(layer).textbbox((0, 0), text, font=font)
    tw, th = int(box[2] - box[0]) + 2, int(box[3] - box[1]) + 2
    piece = Image.new("RGBA", (tw, th), (0, 0, 0, 0))
    ImageDraw.Draw(piece).text((1 - box[0], 1 - box[1]), text, fill=fill, font=font)
    piece = piece.rotate(90, expand=True)
    layer.alpha_composite(piece, (max(0, round(centre[0] - piece.width / 2)), max(0, round(centre[1] - piece.height / 2))))


def to_png(rgba: np.ndarray) -> bytes:
    """``rgba`` (``(rows, columns, 4)`` ``uint8``) as PNG bytes."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(rgba), "RGBA").save(buf, format="PNG")
    return buf.getvalue()


def from_png(data: bytes) -> np.ndarray:
    """PNG bytes back as an RGBA array."""
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(data)).convert("RGBA"))
