"""A frame's colour: its robust range, its 8-bit colour indices and its 256-bin histogram.

Pure NumPy, run once per frame on the thread that makes it (the view thread, or the kernel's
thread for a cached slider move). A frame's passes run in *scratch* buffers that each thread
keeps from one frame to the next (:func:`scratch`): a fresh 4-8 MB temporary per pass costs
its page faults on every move (more than the arithmetic), and a frame with no NaN or
infinity (checked in one pass) skips the masks that handle them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from ..sources import buffers

Range = tuple[float, float]
HIST_BINS = 256
OUTSIDE = HIST_BINS + 8  # the float32 bin of values not counted
#: values a pass works on at once (a frame of up to 2048 x 2048 in one go; a bigger one in
#: blocks, so the scratch buffers stay bounded). Smaller blocks that fit the CPU's cache were
#: measured slower here: NumPy's per-call cost outweighs the memory traffic saved
BLOCK = 1 << 22

_local = threading.local()


def scratch(name: str, n: int, dtype: type) -> np.ndarray:
    """A 1-D buffer of ``n`` (at most :data:`BLOCK`) ``dtype`` values this thread reuses for
    ``name`` (uninitialised). Never handed out beyond the function that asked for it."""
    bufs: dict[str, np.ndarray] = _local.__dict__.setdefault("bufs", {})
    buf = bufs.get(name)
    if buf is None or buf.size < n or buf.dtype != dtype:
        buf = bufs[name] = np.empty(max(n, 1), dtype)
    return buf[:n]


def robust_range(data: np.ndarray, percentiles: tuple[float, float] = (2.0, 98.0)) -> Range:
    """Percentiles of the finite values of ``data`` (subsampled to <= 65536 values)."""
    flat = np.asarray(data).ravel()
    if flat.size > 65536:
        flat = flat[:: flat.size // 65536]
    flat = flat[np.isfinite(flat)]
    if flat.size == 0:
        return (0.0, 1.0)
    lo, hi = (float(v) for v in np.percentile(flat, percentiles))
    if hi <= lo:
        hi = lo + (abs(lo) * 1e-6 or 1.0)
    return (lo, hi)


def _offset_type(dtype: np.dtype) -> type[np.floating]:
    """The type ``value - lo`` is taken in: the data's own precision (float64 for float64 data
    and ints wider than float32 holds), then scaled in float32. In float32, values of 512.85
    with a range of 0.01 keep only a few of the 254 colour steps."""
    return np.float32 if np.result_type(dtype, np.float32) == np.float32 else np.float64


def to_uint8(data: np.ndarray, clim: Range) -> np.ndarray:
    """Map ``data`` to colour indices 1..255 over ``clim``; NaN (and inf) becomes 0."""
    lo, hi = float(clim[0]), float(clim[1])
    scale = np.float32(254.0 / (hi - lo) if hi > lo else 0.0)
    arr = np.asarray(data)
    flat = arr.reshape(-1)
    out = buffers.empty(flat.size)  # recycled (not malloc's): its size changes with each zoom
    with np.errstate(all="ignore"):
        for start in range(0, flat.size, BLOCK):
            part = flat[start:start + BLOCK]
            x = scratch("colour", part.size, np.float32)
            work = _offset_type(part.dtype)
            np.subtract(part, work(lo), out=x, dtype=work, casting="unsafe")
            x *= scale
            finite = bool(np.isfinite(np.add.reduce(x)))  # one pass: no NaN, no inf
            bad = None if finite else ~np.isfinite(x)
            np.clip(x, 0, 254, out=x)
            if bad is not None:
                x[bad] = -1
            x += np.float32(1.5)
            np.copyto(out[start:start + BLOCK], x, casting="unsafe")  # truncates, as astype does
    return out.reshape(arr.shape)


@dataclass(frozen=True)
class Histogram:
    """The histogram of one channel of a frame: ``counts`` of the finite values in
    :data:`HIST_BINS` equal bins over ``range`` (which holds both the values and the colour
    range, so both handles always lie on it)."""

    counts: np.ndarray = field(repr=False)
    range: Range

    def log_bytes(self) -> bytes:
        """What travels to the browser: ``round(255 * log1p(count) / log1p(max))`` per bin
        (``HIST_BINS`` bytes; the browser draws log counts)."""
        return log_counts(self.counts).tobytes()


def log_counts(counts: np.ndarray) -> np.ndarray:
    """Counts as ``uint8`` log heights: ``round(255 * log1p(c) / log1p(max(c)))``."""
    c = np.asarray(counts, dtype=np.float64)
    top = float(c.max()) if c.size else 0.0
    if top <= 0:
        return np.zeros(c.shape, np.uint8)
    return np.floor(255.0 * np.log1p(c) / np.log1p(top) + 0.5).astype(np.uint8)


def _span(flat: np.ndarray, clim: Range) -> tuple[Range, bool]:
    """:func:`histogram_range` and whether every value is finite (known from the plain
    min and max: NaN propagates through them, an infinity is one of them)."""
    lo, hi = float(clim[0]), float(clim[1])
    finite = False
    with np.errstate(all="ignore"):
        if flat.size:
            dmin, dmax = float(flat.min()), float(flat.max())
            finite = bool(np.isfinite(dmin) and np.isfinite(dmax))
            if not finite:
                some = flat[~np.isnan(flat)]  # an all-NaN frame (a projection just begun) has none
                dmin, dmax = (float(some.min()), float(some.max())) if some.size else (np.nan, np.nan)
        else:
            dmin, dmax = lo, hi
        if np.isinf(dmin) or np.isinf(dmax):  # infinities are not counted: the finite span
            kept = flat[np.isfinite(flat)]
            dmin, dmax = (float(kept.min()), float(kept.max())) if kept.size else (lo, hi)
    if np.isfinite(dmin):
        lo = min(lo, dmin)
    if np.isfinite(dmax):
        hi = max(hi, dmax)
    if not hi > lo:
        hi = lo + 1.0
    # HIST_BINS distinct edges even in float32 (NumPy makes a float32 frame's edges float32):
    # a near-constant frame's range (robust_range widens it by 1e-6) is widened to that
    least = 4.0 * HIST_BINS * float(np.spacing(np.float32(max(abs(lo), abs(hi)))))
    if hi - lo < least:
        hi = lo + least
    return (lo, hi), finite


def histogram_range(data: np.ndarray, clim: Range) -> Range:
    """The span a histogram covers: the finite values' min..max and the colour range."""
    return _span(np.asarray(data).ravel(), clim)[0]


def frame_histogram(data: np.ndarray, clim: Range) -> Histogram:
    """:data:`HIST_BINS` bins of the finite values of ``data`` over :func:`histogram_range`,
    equal to NumPy's ``np.histogram(finite, HIST_BINS, range)`` (bin ``k`` holds
    ``edge[k] <= v < edge[k + 1]``, the last one also ``v == hi``). Made in float32 after the
    offset is taken in the data's precision (a few
    passes over the frame, in scratch buffers); the values within rounding of an edge are
    placed again by NumPy itself (its edges are of the data's float type)."""
    flat = np.asarray(data).ravel()
    rng, finite = _span(flat, clim)
    lo, hi = rng
    if flat.dtype.kind in "iub" or flat.size < 4096:
        values = flat if flat.dtype.kind in "iub" or finite else flat[np.isfinite(flat)]
        return Histogram(np.histogram(values, HIST_BINS, rng)[0].astype(np.int64), rng)
    counts = np.zeros(OUTSIDE + 1, np.intp)
    scale = np.float32(HIST_BINS / (hi - lo))
    for start in range(0, flat.size, BLOCK):
        part = flat[start:start + BLOCK]
        n = part.size
        x = scratch("colour", n, np.float32)
        k = scratch("bins", n, np.intp)  # what bincount counts (any other type it copies first)
        frac = scratch("frac", n, np.float32)
        near, near2 = scratch("near", n, np.bool_), scratch("near2", n, np.bool_)
        with np.errstate(all="ignore"):
            work = _offset_type(part.dtype)
            np.subtract(part, work(lo), out=x, dtype=work, casting="unsafe")
            x *= scale
            if not finite:
                x[~np.isfinite(x)] = OUTSIDE  # NaN (and inf) are not counted
            np.copyto(k, x, casting="unsafe")  # truncates: the float32 bin
            np.copyto(frac, k, casting="unsafe")
            np.subtract(x, frac, out=frac)  # within float32 rounding of an edge: near 0 or 1
            np.less(frac, np.float32(1e-3), out=near)
            np.greater(frac, np.float32(1 - 1e-3), out=near2)
            np.logical_or(near, near2, out=near)
        counts += np.bincount(k, minlength=OUTSIDE + 1)
        at = np.flatnonzero(near)
        if at.size:  # placed again, exactly: out of the float32 bins, into NumPy's
            counts -= np.bincount(k[at], minlength=counts.size)
            v = part[at]
            counts[:HIST_BINS] += np.histogram(v if finite else v[np.isfinite(v)], HIST_BINS, rng)[0]
    return Histogram(counts[:HIST_BINS].astype(np.int64), rng)
