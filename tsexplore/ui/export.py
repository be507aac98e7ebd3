"""Pictures of an Explorer: a snapshot (PNG), a movie along a dim (GIF or MP4), and the PNG a
saved notebook keeps of it.

Everything is rendered in the kernel by :func:`~tsexplore.ui._render.render_canvas`: the
picture's pixels are the browser's (same arithmetic), the text is Pillow's.

- :func:`snapshot`: the PNG of what the canvas shows now (orthogonal planes side by side as
  on screen).
- :func:`movie`: one frame per step of a dim, each read through the engine at the view on
  screen, coloured as the view colours it, written by imageio (``.gif`` by Pillow, ``.mp4``
  by imageio-ffmpeg), with a progress bar.
- :class:`Poster`: the canvas's ``poster`` (a PNG of the picture, in the widget's saved
  state) kept up to date a moment after the picture stops changing, and the PNG in the
  Explorer's mimebundle, so nbconvert and GitHub show the image without a kernel.
"""

from __future__ import annotations

import base64
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, missing_dependency
from ._render import render_canvas, to_png

#: movie containers by suffix, and what writes them
MOVIE_FORMATS = {".gif": "pillow", ".mp4": "ffmpeg"}
#: seconds without a new final frame before the poster is made again
POSTER_QUIET = 1.0
#: the canvas's traits that change its picture without a new frame
POSTER_TRAITS = ("cmap", "clim", "channel_on", "channel_clims", "channel_colors", "label_opacity", "crosshair",
                 "roi_box", "theme")
#: the longest the notebook's PNG waits for the first picture when the Explorer is displayed
FIRST_PICTURE_TIMEOUT = 2.0


def compose(images: list[list[np.ndarray | None]], background: Any, gap: int = 8) -> np.ndarray:
    """RGBA images in rows and columns (None: an empty cell), each cell as large as the largest
    in its row and column, ``gap`` pixels apart, on ``background``."""
    heights = [max((im.shape[0] for im in row if im is not None), default=0) for row in images]
    ncols = max(len(row) for row in images)
    widths = [max((im.shape[1] for row in images if c < len(row) and (im := row[c]) is not None), default=0)
              for c in range(ncols)]
    out = np.empty((sum(heights) + gap * (len(heights) - 1), sum(widths) + gap * (ncols - 1), 4), np.uint8)
    out[:] = background
    y = 0
    for r, row in enumerate(images):
        x = 0
        for c in range(ncols):
            im = row[c] if c < len(row) else None
            if im is not None:
                out[y:y + im.shape[0], x:x + im.shape[1]] = im
            x += widths[c] + gap
        y += heights[r] + gap
    return out


def snapshot_rgba(explorer: Any, scale: float = 1.0) -> np.ndarray:
    """What the Explorer's canvas shows (with orthogonal planes: the three, laid out as on
    screen), as RGBA."""
    main = render_canvas(explorer.canvas, scale)
    ortho = getattr(explorer, "ortho", None)
    if ortho is None:
        return main
    side = {name: render_canvas(p.canvas, scale) for name, p in ortho.planes.items()}
    bg = tuple(explorer.canvas.theme["bg"][:3]) + (255,)
    return compose([[main, side.get("zy")], [side.get("zx"), None]], bg)


def snapshot(explorer: Any, path: Any = None, scale: float = 1.0, settle: float = 10.0) -> bytes:
    """The PNG bytes of what the Explorer shows, once its picture shows the current view
    (waited for up to ``settle`` seconds); written to ``path`` too when given."""
    explorer.settle(settle)
    png = to_png(snapshot_rgba(explorer, scale))
    if path is not None:
        Path(path).write_bytes(png)
    return png


class Poster:
    """Keeps ``canvas.poster`` a PNG of the picture: made on the kernel's loop
    :data:`POSTER_QUIET` seconds after the last final frame (never while frames come), so the
    widget state a notebook saves holds the picture. Without a kernel loop it does nothing
    (the mimebundle's PNG is made when the Explorer is displayed)."""

    def __init__(self, explorer: Any, loop: Any) -> None:
        self.explorer, self.loop = explorer, loop
        self._handle: Any = None
        self._lock = threading.Lock()
        self.made = 0

    def changed(self) -> None:
        """A final frame was painted (any thread)."""
        if self.loop is not None:
            self.loop.add_callback(self._schedule)

    def _schedule(self) -> None:
        if self._handle is not None:
            self.loop.remove_timeout(self._handle)
        self._handle = self.loop.call_later(POSTER_QUIET, self._make)

    def _make(self) -> None:
        self._handle = None
        ex = self.explorer
        if ex._closed:
            return
        try:
            ex.canvas.poster = snapshot(ex, settle=0.0)
            self.made += 1
        except Exception:  # noqa: BLE001 - a poster is a nicety; the view goes on
            pass

    def close(self) -> None:
        if self.loop is not None and self._handle is not None:
            self.loop.add_callback(self.loop.remove_timeout, self._handle)


def mimebundle(explorer: Any, bundle: dict[str, Any], timeout: float = FIRST_PICTURE_TIMEOUT) -> dict[str, Any]:
    """``bundle`` (the widget's) with an ``image/png`` of the first complete picture (waited
    for up to ``timeout`` seconds): what nbconvert and GitHub show of the Explorer."""
    try:
        png = snapshot(explorer, settle=timeout)
    except Exception:  # noqa: BLE001 - no picture yet: the widget alone
        return bundle
    explorer.canvas.poster = png
    return {**bundle, "image/png": base64.b64encode(png).decode("ascii")}


def movie(explorer: Any, path: Any, dim: str | None = None, *, fps: float = 10.0, start: int = 0,
          stop: int | None = None, step: int = 1, scale: float = 1.0, progress: bool = True,
          timeout: float = 120.0) -> Path:
    """Render the frames of ``dim`` (default: the first slider dim) from ``start`` to ``stop``
    every ``step`` at the view on screen into ``path``: ``.gif`` or ``.mp4`` at ``fps``
    frames per second. Each frame is read through the engine (its own reads: the view is not
    disturbed) and rendered as the canvas would show it. Returns the path."""
    path = Path(path)
    fmt = MOVIE_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ConfigError(f"a movie is written as {' or '.join(MOVIE_FORMATS)}; got {path.name!r}")
    if not fps > 0:
        raise ConfigError(f"fps must be > 0, got {fps!r}")
    g = explorer.geometry
    dim = dim or (g.slider_dims[0] if g.slider_dims else None)
    if dim is None or dim not in g.slider_dims:
        raise ConfigError(f"dim={dim!r} is not a slider dim of this view; it has {list(g.slider_dims)}")
    n = g.shape[g.axis(dim)]
    indices = list(range(n))[slice(start, stop, step)]
    if not indices:
        raise ConfigError(f"no frames: {dim} has {n} steps and start={start}, stop={stop}, step={step}")
    writer = _writer(path, fmt, fps)
    bar = _progress(len(indices), f"movie {path.name}", progress)
    try:
        for i in indices:
            picture, labels = explorer._render_frame({dim: i}, timeout)
            image = render_canvas(explorer.canvas, scale, picture=picture, labels=labels)
            writer.append_data(_even(image[..., :3]) if fmt == "ffmpeg" else image[..., :3])
            if bar is not None:
                bar.update(1)
    finally:
        writer.close()
        if bar is not None:
            bar.close()
    return path


def _writer(path: Path, fmt: str, fps: float) -> Any:
    import imageio.v2 as iio

    if fmt == "pillow":
        return iio.get_writer(path, mode="I", format="GIF", duration=1000.0 / fps, loop=0)
    try:
        import imageio_ffmpeg  # noqa: F401
    except ImportError as exc:
        raise missing_dependency("imageio-ffmpeg", "lab", "writing MP4 movies (or write a .gif)") from exc
    return iio.get_writer(path, format="FFMPEG", mode="I", fps=fps, codec="libx264", quality=8,
                          pixelformat="yuv420p", macro_block_size=1)


def _even(rgb: np.ndarray) -> np.ndarray:
    """``rgb`` padded by its edge to an even height and width (what yuv420p video needs)."""
    h, w = rgb.shape[:2]
    return np.pad(rgb, ((0, h % 2), (0, w % 2), (0, 0)), mode="edge") if (h % 2 or w % 2) else rgb


def _progress(total: int, desc: str, show: bool) -> Any:
    if not show:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="frame", leave=True)

