"""Kernel-side frame logic of the image canvas: pure NumPy (+ Pillow), no widget import.

- colour indices: :func:`to_indices` maps a float plane to ``uint8`` indices over a range
  (1..255, 0 = NaN; :func:`tsexplore.controller.to_uint8`), :func:`frame_extent` says which
  part of the array (edges, in index coordinates) a strided frame covers;
- colour tables: :func:`compose_lut` is what the browser does when the display range differs
  from the range a frame was quantised over (the reference for the browser test);
- the view box: :func:`fit_view` widens a data region to the screen's aspect (square pixels);
- encoding: :func:`encode_indices` sends raw bytes or a *lossless* PNG/WebP made by Pillow.
  JPEG is never used: it is lossy on colour indices, so it would show wrong colours;
- the link: :class:`LinkEstimator` learns the kernel -> browser latency and bandwidth from
  ack timing and :func:`choose_encoding` picks the encoding with the lowest predicted time;
- flow: :class:`FrameFlow` keeps at most one frame in flight and the newest one pending.
"""

from __future__ import annotations

import io
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

from ..controller import robust_range, to_uint8
from ..errors import ConfigError

Range = tuple[float, float]
Extent = tuple[Range, Range]  # ((y_lo, y_hi), (x_lo, x_hi)): edges in index coordinates

#: lossless encodings only (a lossy codec on colour indices paints wrong colours)
ENCODINGS = ("raw", "png", "webp")
#: what to assume about a compressed encoding before it was ever measured
PRIOR_RATIO = {"png": 0.5, "webp": 0.4}
PRIOR_ENCODE_S_PER_BYTE = {"png": 15e-9, "webp": 40e-9}
DECODE_S_PER_BYTE = 3e-9  # the browser's image decode, per raw byte (createImageBitmap)
#: big frames timed before the bandwidth is estimated
MIN_BANDWIDTH_SAMPLES = 3
#: frames smaller than this always travel raw
MIN_COMPRESS_BYTES = 256 * 1024
#: the latency assumed at most while only frames of one size were timed (seconds)
UNKNOWN_LATENCY_MAX = 0.03


def to_indices(plane: np.ndarray, clim: Range | None = None) -> tuple[np.ndarray, Range]:
    """``uint8`` colour indices of ``plane`` (1..255 over ``clim``, 0 = NaN) and the range.

    ``clim=None`` takes the 2-98 % percentiles of the finite values (``robust_range``).
    """
    data = np.asarray(plane)
    if data.ndim != 2:
        raise ConfigError(f"a frame is a 2-D plane, got shape {data.shape}")
    rng = robust_range(data) if clim is None else (float(clim[0]), float(clim[1]))
    if not rng[1] > rng[0]:
        raise ConfigError(f"the colour range needs max > min, got {rng}")
    return np.ascontiguousarray(to_uint8(data, rng)), rng


def frame_extent(start: int, stop: int, step: int = 1) -> Range:
    """Edges (index coordinates, pixel ``i`` spans ``[i - 0.5, i + 0.5]``) of the samples
    ``range(start, stop, step)`` drawn ``step`` array pixels wide each."""
    n = len(range(start, stop, step))
    return (start - 0.5, start + n * step - 0.5)


def value_of_index(index: np.ndarray | int, clim: Range) -> np.ndarray:
    """The value at the centre of colour index ``index`` quantised over ``clim`` (NaN for 0)."""
    i = np.asarray(index, dtype=np.float64)
    lo, hi = float(clim[0]), float(clim[1])
    out = lo + (i - 1.0) * (hi - lo) / 254.0
    return np.where(i == 0, np.nan, out)


def compose_lut(palette: np.ndarray, frame_clim: Range, display_clim: Range | None) -> np.ndarray:
    """The 256-entry RGBA table that shows indices quantised over ``frame_clim`` in the
    colours of ``display_clim`` (``None`` or equal: ``palette`` itself). Index 0 (NaN) keeps
    ``palette[0]``. This is what ``canvas.js`` computes; the browser test checks against it."""
    pal = np.asarray(palette, dtype=np.uint8)
    if pal.shape != (256, 4):
        raise ConfigError(f"a palette is 256 RGBA colours, got shape {pal.shape}")
    if display_clim is None or tuple(map(float, display_clim)) == tuple(map(float, frame_clim)):
        return pal.copy()
    lo, hi = float(display_clim[0]), float(display_clim[1])
    v = value_of_index(np.arange(1, 256), frame_clim)
    j = np.clip((v - lo) * (254.0 / (hi - lo)), 0, 254)
    idx = np.concatenate([[0], np.floor(j + 0.5).astype(np.int64) + 1])
    return pal[idx]


def channel_ramp(colour: str) -> np.ndarray:
    """A channel's 256-entry RGBA table: index 0 (NaN) black, 1..255 from black to ``colour``
    (``"#rrggbb"``) -- what ``canvas.js``'s ``ramp`` computes."""
    c = np.array([int(colour[k:k + 2], 16) for k in (1, 3, 5)], dtype=np.float64)
    i = np.arange(256, dtype=np.float64)[:, None]
    out = np.empty((256, 4), np.uint8)
    out[:, :3] = np.floor(c * (i - 1) / 254 + 0.5).clip(0, 255)
    out[0, :3] = 0
    out[:, 3] = 255
    return out


def composite_rgba(indices: np.ndarray, colours: list[str], frame_clims: list[Range],
                   display_clims: list[Range | None] | None = None, on: list[bool] | None = None,
                   rgb: bool = False) -> np.ndarray:
    """What the browser paints for a ``(channels, y, x)`` stack of colour indices: the sum of
    each channel's colour (its ramp over its display range), clipped at 255, opaque; with
    ``rgb`` the channels are R, G, B (A) as they are. Row 0 = lowest y index. The browser
    test checks the canvas against this."""
    idx = np.asarray(indices, dtype=np.uint8)
    n = idx.shape[0]
    on = list(on) if on else [True] * n
    shown = [k < len(on) and on[k] for k in range(n)]
    out = np.zeros((*idx.shape[1:], 4), np.uint8)
    acc = np.zeros((*idx.shape[1:], 3), np.int64)
    if rgb:
        for k in range(min(n, 3)):
            if shown[k]:
                acc[..., k] = idx[k]
        out[..., 3] = idx[3] if n > 3 and shown[3] else 255
    else:
        display = list(display_clims or []) + [None] * n
        for k in range(n):
            if shown[k]:
                lut = compose_lut(channel_ramp(colours[k]), frame_clims[k], display[k])
                acc += lut[idx[k]][..., :3]
        out[..., 3] = 255
    out[..., :3] = np.minimum(acc, 255)
    return out


#: ids at most this large are compacted by counting (a table as long as the largest id);
#: larger ones by sorting
COMPACT_BY_COUNT = 1 << 20


def compact_labels(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A label plane as it travels: ``(index, table)``, ``table[index] == ids``; ``table`` the
    sorted distinct ids (``uint32``), ``index`` ``uint8`` / ``uint16`` / ``uint32``, the
    smallest that holds it (a view shows a few hundred labels: a byte per pixel)."""
    arr = np.asarray(ids)
    if arr.size and (arr.min() < 0 or int(arr.max()) > 0xFFFFFFFF):
        raise ConfigError(f"label ids must lie in 0..2**32-1, got {arr.min()}..{arr.max()}")
    flat = arr.ravel()
    top = int(flat.max()) if flat.size else 0
    if top < COMPACT_BY_COUNT:
        present = np.bincount(flat.astype(np.intp, copy=False), minlength=1) > 0
        table = np.flatnonzero(present).astype(np.uint32)
        lookup = np.cumsum(present) - 1
        index = lookup[flat]
    else:
        table, index = np.unique(flat, return_inverse=True)
        table = table.astype(np.uint32)
    kind = np.uint8 if table.size <= 256 else np.uint16 if table.size <= 65536 else np.uint32
    return index.astype(kind).reshape(arr.shape), table


def fit_view(extent: Extent, box: tuple[int, int]) -> Extent:
    """``extent`` widened (about its centre) so that a data pixel is square on a ``box``
    of (height, width) screen pixels; the view the canvas shows for a "reset"."""
    (y0, y1), (x0, x1) = extent
    h, w = max(1, int(box[0])), max(1, int(box[1]))
    dy, dx = y1 - y0, x1 - x0
    per_px = max(dy / h, dx / w)
    if abs(dy / h - dx / w) <= 1e-9 * per_px:  # square already: kept exactly (a saved view)
        return ((y0, y1), (x0, x1))
    cy, cx = (y0 + y1) / 2, (x0 + x1) / 2
    return ((cy - per_px * h / 2, cy + per_px * h / 2), (cx - per_px * w / 2, cx + per_px * w / 2))


# -- encoding -------------------------------------------------------------------------------


@dataclass(frozen=True)
class EncodedFrame:
    """A frame's bytes as they travel: ``encoding`` is one of :data:`ENCODINGS`."""

    encoding: str
    payload: bytes | memoryview = field(repr=False)
    shape: tuple[int, int]
    seconds: float = 0.0  # time spent encoding
    #: the frame's histograms (256 log heights per channel) travelling with it
    hist: bytes = field(default=b"", repr=False)

    @property
    def nbytes(self) -> int:
        return len(self.payload) if isinstance(self.payload, bytes) else self.payload.nbytes

    @property
    def raw_nbytes(self) -> int:
        return self.shape[0] * self.shape[1]


def encode_indices(indices: np.ndarray, encoding: str = "raw") -> EncodedFrame:
    """``indices`` (2-D ``uint8``) as ``encoding``: raw bytes, or lossless PNG / WebP by
    Pillow (an 8-bit grey PNG; a WebP keeps the index in each of R, G and B)."""
    if encoding not in ENCODINGS:
        raise ConfigError(f"encoding must be one of {ENCODINGS}, got {encoding!r}")
    arr = np.ascontiguousarray(indices, dtype=np.uint8)
    if arr.ndim != 2:
        raise ConfigError(f"a frame is a 2-D uint8 plane, got shape {arr.shape}")
    shape = (int(arr.shape[0]), int(arr.shape[1]))
    if encoding == "raw":
        return EncodedFrame("raw", memoryview(arr).cast("B"), shape)  # type: ignore[arg-type]
    from PIL import Image

    t0 = time.perf_counter()
    buf = io.BytesIO()
    img = Image.fromarray(arr, mode="L")
    if encoding == "png":
        img.save(buf, format="PNG", compress_level=1)
    else:
        img.convert("RGB").save(buf, format="WEBP", lossless=True, quality=0, method=0)
    return EncodedFrame(encoding, buf.getvalue(), shape, time.perf_counter() - t0)


def decode_payload(frame: EncodedFrame) -> np.ndarray:
    """The indices back from ``frame`` (what the browser does; for tests)."""
    if frame.encoding == "raw":
        return np.frombuffer(bytes(frame.payload), np.uint8).reshape(frame.shape)
    from PIL import Image

    img = Image.open(io.BytesIO(bytes(frame.payload)))
    arr = np.asarray(img)
    return arr if arr.ndim == 2 else arr[..., 0]


# -- the link -------------------------------------------------------------------------------


class LinkEstimator:
    """Kernel -> browser link speed learned from acks.

    ``record(nbytes, seconds)`` takes one frame: its size on the wire and the time from
    sending it to its ack arriving, less the time the browser held the ack. ``latency`` is
    the smallest such time of a small frame; before a small one was seen, frames of one size
    cannot tell latency from transfer time, so it is the fastest frame's time up to
    :data:`UNKNOWN_LATENCY_MAX` (a busy local link is not taken for a slow one, and a slow
    link, whose frames take longer than that, still is);
    ``bandwidth`` (bytes/s) is the largest ``nbytes / (seconds - latency)`` of the last
    ``window`` frames of at least ``min_bytes`` (what the link carried at best: a late ack on a
    busy machine is the machine, not the link) -- None until there are
    :data:`MIN_BANDWIDTH_SAMPLES` (one slow start is no measure of a link).
    """

    def __init__(self, window: int = 16, min_bytes: int = 16384) -> None:
        self.window = int(window)
        self.min_bytes = int(min_bytes)
        self._samples: deque[tuple[int, float]] = deque(maxlen=self.window)
        self._small: deque[float] = deque(maxlen=self.window)
        self.frames = 0
        self._bandwidth: tuple[int, float | None] = (-1, None)  # (frames, bandwidth) last made

    def record(self, nbytes: int, seconds: float) -> None:
        seconds = max(0.0, float(seconds))
        self.frames += 1
        if nbytes < self.min_bytes:
            self._small.append(seconds)
        self._samples.append((int(nbytes), seconds))

    @property
    def latency(self) -> float:
        if self._small:
            return min(self._small)
        if self._samples:  # no small frame yet: the fastest frame's time, up to a prior
            return min(min(s for _, s in self._samples), UNKNOWN_LATENCY_MAX)
        return 0.0

    @property
    def bandwidth(self) -> float | None:
        made, bw = self._bandwidth
        if made == self.frames:  # asked for on every frame, changed only by record()
            return bw
        lat = self.latency
        rates = [n / max(s - lat, 1e-4) for n, s in self._samples if n >= self.min_bytes]
        # what the link carried at best: on a busy machine most acks are late because the
        # kernel, the server or the browser waited for a core, not because of the link (the
        # median took a loaded local link for a slow one, and compressing then cost more)
        bw = float(max(rates)) if len(rates) >= MIN_BANDWIDTH_SAMPLES else None
        self._bandwidth = (self.frames, bw)
        return bw

    def predict(self, nbytes: int) -> float | None:
        """Seconds to move ``nbytes`` to the browser and hear back, or None (not measured)."""
        bw = self.bandwidth
        return None if bw is None else self.latency + nbytes / bw

    def as_dict(self) -> dict[str, Any]:
        bw = self.bandwidth
        return {"frames": self.frames, "latency_ms": self.latency * 1e3,
                "bandwidth_MBps": None if bw is None else bw / 1e6}


class CodecCosts:
    """What each compressed encoding was measured to cost: size ratio and encode time."""

    def __init__(self) -> None:
        self.ratio = dict(PRIOR_RATIO)
        self.encode_s_per_byte = dict(PRIOR_ENCODE_S_PER_BYTE)

    def record(self, frame: EncodedFrame) -> None:
        if frame.encoding == "raw" or frame.raw_nbytes == 0:
            return
        a = 0.5  # EWMA weight of the newest frame
        r, s = frame.nbytes / frame.raw_nbytes, frame.seconds / frame.raw_nbytes
        self.ratio[frame.encoding] = (1 - a) * self.ratio[frame.encoding] + a * r
        self.encode_s_per_byte[frame.encoding] = (1 - a) * self.encode_s_per_byte[frame.encoding] + a * s


def predicted_seconds(encoding: str, raw_nbytes: int, link: LinkEstimator, costs: CodecCosts) -> float | None:
    """Predicted seconds from starting to encode to the browser having the indices."""
    if encoding == "raw":
        return link.predict(raw_nbytes)
    sent = link.predict(int(raw_nbytes * costs.ratio[encoding]))
    if sent is None:
        return None
    return raw_nbytes * (costs.encode_s_per_byte[encoding] + DECODE_S_PER_BYTE) + sent


def choose_encoding(raw_nbytes: int, link: LinkEstimator, costs: CodecCosts,
                    allowed: tuple[str, ...] = ENCODINGS, current: str = "raw",
                    margin: float = 0.2) -> str:
    """The encoding of ``allowed`` with the lowest predicted time; raw until the link is
    measured, and for frames under :data:`MIN_COMPRESS_BYTES` (where compressing saves
    little on any link and a busy machine's jitter looks like a slow link). Leaving
    ``current`` needs a gain of more than ``margin`` (hysteresis)."""
    options = [e for e in allowed if e in ENCODINGS] or ["raw"]
    if raw_nbytes < MIN_COMPRESS_BYTES and "raw" in options:
        return "raw"
    times = {e: predicted_seconds(e, raw_nbytes, link, costs) for e in options}
    known = {e: t for e, t in times.items() if t is not None}
    if not known:
        return "raw" if "raw" in options else options[0]
    best = min(known, key=lambda e: known[e])
    cur = known.get(current)
    if cur is not None and best != current and known[best] > cur * (1 - margin):
        return current
    return best


# -- flow control ---------------------------------------------------------------------------

T = TypeVar("T")


@dataclass
class InFlight(Generic[T]):
    seq: int
    item: T
    sent_at: float
    nbytes: int
    lazy: bool = False


class FrameFlow(Generic[T]):
    """At most one frame in flight; the frames offered meanwhile wait for its ack.

    ``offer(item, nbytes)`` returns ``(seq, item)`` to send now, or None when a frame is in
    flight: the item then waits, and replaces (drops, counted in ``dropped``) what was
    waiting -- unless ``queue=True`` (a tile of a progressive picture), which waits behind
    it. ``ack(seq, held)`` ends the frame in flight, records its timing in ``link`` (``held``:
    seconds the browser kept the ack) and returns the next frame to send now, if any. A frame
    not acked within ``ack_timeout`` seconds counts as lost (the view was closed or hidden),
    so the flow never stalls. ``force`` sends at once whatever is in flight (a view was
    rendered afresh and needs the picture again).
    """

    def __init__(self, ack_timeout: float = 5.0, clock: Callable[[], float] = time.monotonic,
                 max_queue: int = 256) -> None:
        self.ack_timeout = float(ack_timeout)
        self.clock = clock
        self.max_queue = int(max_queue)
        self.link = LinkEstimator()
        self._lock = threading.Lock()
        self._seq = 0
        self.in_flight: InFlight[T] | None = None
        self.pending: deque[tuple[T, int]] = deque()
        self.sent = self.acked = self.dropped = self.lost = 0

    def _send(self, item: T, nbytes: int) -> tuple[int, T]:
        self._seq += 1
        self.sent += 1
        self.in_flight = InFlight(self._seq, item, self.clock(), nbytes)
        return self._seq, item

    def _expire(self) -> None:
        f = self.in_flight
        if f is not None and self.clock() - f.sent_at > self.ack_timeout:
            self.in_flight = None
            self.lost += 1

    def _next(self) -> tuple[int, T] | None:
        if self.in_flight is not None or not self.pending:
            return None
        item, nbytes = self.pending.popleft()
        return self._send(item, nbytes)

    def offer(self, item: T, nbytes: int = 0, queue: bool = False) -> tuple[int, T] | None:
        with self._lock:
            self._expire()
            if not queue:
                self.dropped += len(self.pending)
                self.pending.clear()
            elif len(self.pending) >= self.max_queue:
                self.pending.popleft()
                self.dropped += 1
            self.pending.append((item, int(nbytes)))
            return self._next()

    def poll(self) -> tuple[int, T] | None:
        """The next frame to send, when the one in flight has timed out meanwhile."""
        with self._lock:
            self._expire()
            return self._next()

    def force(self, item: T, nbytes: int = 0) -> tuple[int, T]:
        with self._lock:
            return self._send(item, int(nbytes))

    def take_queued(self, seq: int, match: Callable[[T], bool], limit: int = 64) -> list[T]:
        """The frames waiting at the front that ``match`` (at most ``limit``), taken to travel
        with frame ``seq`` (in flight) in one message: the tiles of a progressive picture go
        together instead of one round trip each."""
        with self._lock:
            f = self.in_flight
            out: list[T] = []
            if f is None or f.seq != seq:
                return out
            while self.pending and len(out) < limit and match(self.pending[0][0]):
                item, nbytes = self.pending.popleft()
                f.nbytes += nbytes
                out.append(item)
            return out

    def stamp(self, seq: int) -> None:
        """Frame ``seq`` leaves now (it was handed to the kernel's thread to send): its
        round trip is timed from here."""
        with self._lock:
            if self.in_flight is not None and self.in_flight.seq == seq:
                self.in_flight.sent_at = self.clock()

    def mark_lazy(self, seq: int) -> None:
        """The browser may hold the ack of frame ``seq`` (it piggybacks on its next message)."""
        with self._lock:
            if self.in_flight is not None and self.in_flight.seq == seq:
                self.in_flight.lazy = True

    def waiting_on_lazy_ack(self) -> int | None:
        """The seq of a lazily acked frame that a waiting frame needs, else None."""
        with self._lock:
            f = self.in_flight
            return f.seq if f is not None and f.lazy and self.pending else None

    @property
    def has_pending(self) -> bool:
        with self._lock:
            return bool(self.pending)

    def ack(self, seq: int, held: float = 0.0) -> tuple[int, T] | None:
        with self._lock:
            f = self.in_flight
            if f is None or int(seq) != f.seq:
                return None  # late, duplicate (a second view), or of a frame resent since
            self.acked += 1
            self.link.record(f.nbytes, self.clock() - f.sent_at - max(0.0, float(held)))
            self.in_flight = None
            return self._next()

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {"sent": self.sent, "acked": self.acked, "dropped": self.dropped,
                    "lost": self.lost, "pending": len(self.pending)}
