"""How many network reads to keep in flight: enough to hide the latency, no more than the
link carries.

Two rules, the smaller wins:

- **latency**: keep about 20 ms of work in flight per 2.5 ms of a read's latency (the
  moving average), so a 100 ms store gets 80 reads at once where a 5 ms one gets 4;
- **link**: twice the bandwidth-delay product, in requests of the usual size, plus four:
  ``2 x bandwidth x latency floor / bytes per request + 4``. The bandwidth is the bytes
  delivered per second of *busy* time (some request in flight) over windows of a second
  and sixteen requests or more; the estimate is the best recent window, halving
  over ten seconds without one as good, so idle time between a player's bursts does not
  lower it. The latency floor is the least latency of the requests of the last 30 seconds.
  More requests than that would only queue on a full link (each taking longer, and a read
  the user waits for behind them) without moving more bytes. Before the first window, the
  cap starts at four and grows by two per completed request -- it doubles each round trip,
  as a TCP slow start does -- so a burst does not open with a hundred requests that would
  all share the link and all arrive late.

:class:`LinkModel` is fed every finished network request (bytes, seconds) by the byte
stores (:func:`~tsexplore.sources.base.transfer_done`); the scheduler asks it for
``concurrency()`` (slots: a batch of inner chunks of one shard is one). Pure arithmetic
under a lock, no I/O.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque

#: reads in flight: at least, at most
LOWEST, HIGHEST = 4, 128
#: seconds of latency per read in flight (the latency rule)
PER_READ = 0.00125
#: seconds of requests looked at for the latency floor
FLOOR_SECONDS = 30.0
#: the bandwidth estimate halves over this many seconds without a sample as good
DECAY_SECONDS = 10.0
#: a rate window closes after this much busy time and this many requests
WINDOW_SECONDS, WINDOW_REQUESTS = 1.0, 16
GAIN = 2.0


class LinkModel:
    """Latency floor, delivered bandwidth and bytes per read of the asynchronous reads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: (time, latency) pairs with increasing latency: the front is the window's least
        self._floor: deque[tuple[float, float]] = deque()
        self.bytes_per_read = 0.0
        self.bandwidth = 0.0  # bytes/s; 0 until a window was measured
        self._bw_at = 0.0
        self.completed = 0
        self.in_flight = 0
        self._busy = 0.0  # seconds with a request in flight, before _busy_since
        self._busy_since = 0.0
        self._window = (0.0, 0, 0)  # busy seconds at its start, bytes, requests

    def _busy_now(self, now: float) -> float:
        return self._busy + (now - self._busy_since if self.in_flight else 0.0)

    def start(self, now: float | None = None) -> float:
        """A request starts; returns its start time (give it back to :meth:`record`)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if not self.in_flight:
                self._busy_since = now
            self.in_flight += 1
        return now

    def record(self, nbytes: int, seconds: float, now: float | None = None) -> None:
        """A request that :meth:`start` noted delivered ``nbytes`` in ``seconds``."""
        now = time.monotonic() if now is None else now
        with self._lock:
            floor = self._floor
            while floor and floor[-1][1] >= seconds:
                floor.pop()
            floor.append((now, seconds))
            self.bytes_per_read = (0.9 * self.bytes_per_read + 0.1 * nbytes
                                   if self.bytes_per_read else float(nbytes))
            self.completed += 1
            busy = self._busy_now(now)
            self.in_flight = max(0, self.in_flight - 1)
            if not self.in_flight:
                self._busy, self._busy_since = busy, now
            began, got, count = self._window
            got, count = got + nbytes, count + 1
            if busy - began >= WINDOW_SECONDS and count >= WINDOW_REQUESTS:
                rate = got / (busy - began)
                if rate >= self._decayed(now):
                    self.bandwidth, self._bw_at = rate, now
                self._window = (busy, 0, 0)
            else:
                self._window = (began, got, count)

    def _decayed(self, now: float) -> float:
        if not self.bandwidth:
            return 0.0
        return self.bandwidth * 0.5 ** ((now - self._bw_at) / DECAY_SECONDS)

    def _floor_now(self, now: float) -> float:
        floor = self._floor
        while len(floor) > 1 and floor[0][0] < now - FLOOR_SECONDS:
            floor.popleft()
        return floor[0][1] if floor else 0.0

    @property
    def latency_floor(self) -> float:
        """The least latency of recent requests (what one costs when nothing queues)."""
        with self._lock:
            return self._floor_now(time.monotonic())

    def concurrency(self, latency: float, now: float | None = None) -> int:
        """Requests (slots) to keep in flight, given the moving average ``latency`` of a read."""
        want = math.ceil(latency / PER_READ)
        now = time.monotonic() if now is None else now
        with self._lock:
            floor = self._floor_now(now)
            bandwidth = self._decayed(now)
            if bandwidth > 0 and floor > 0 and self.bytes_per_read > 0:
                cap = math.ceil(GAIN * bandwidth * floor / self.bytes_per_read) + LOWEST
            else:  # slow start: each completed request lets two more go
                cap = LOWEST + math.ceil(GAIN * self.completed)
        return int(min(HIGHEST, max(LOWEST, min(want, cap))))

    def __repr__(self) -> str:
        return (f"<LinkModel floor={self.latency_floor * 1e3:.1f} ms "
                f"bandwidth={self.bandwidth / 1e6:.1f} MB/s "
                f"bytes/read={self.bytes_per_read / 1e6:.2f} MB>")
