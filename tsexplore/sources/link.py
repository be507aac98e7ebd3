"""The link model: one per byte store (and per source that reads for itself).

It learns, from the requests and reads that go through it, what the engine needs to schedule
and to choose how to read:

- **read latency** (:attr:`LinkModel.read_latency`): a moving average of one chunk read, from
  its start to its value (the first read replaces the starting guess, so a 100 ms store is
  known at once); the prefetcher sizes its look-ahead with it;
- **how many reads in flight** (:meth:`LinkModel.concurrency`), two rules, the smaller wins:
  *latency*: about 20 ms of work in flight per 2.5 ms of a read's latency, so a 100 ms store
  gets 80 reads at once where a 5 ms one gets 4; *link*: twice the bandwidth-delay product in
  requests of the usual size, plus four (``2 x bandwidth x latency floor / bytes per request +
  4``). The bandwidth is the bytes delivered per second of *busy* time (some request in
  flight) over windows of a second and sixteen requests or more; the estimate is the best
  recent window, halving over ten seconds without one as good, so idle time between a player's
  bursts does not lower it. The latency floor is the least latency of the requests of the last
  30 seconds. More requests would only queue on a full link without moving more bytes. Before
  the first window the cap starts at four and grows by two per completed request, as a TCP
  slow start does, so a burst does not open with a hundred requests that all arrive late;
- **ranges or the whole object** (:meth:`LinkModel.ranges_pay`): a part of a chunk costs a
  round trip per range read (two when the frame's head must be read first) where the whole
  frame costs one, and its bytes; and **which ranges to merge** (:meth:`LinkModel.gap`: a gap
  costs less than a request below the bandwidth-delay product).

Pure arithmetic under a lock, no I/O.
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
#: a read's latency assumed before one was measured
FIRST_LATENCY = 0.005
#: requests at least this large measure the bandwidth one by one (before a window closed)
LARGE_REQUEST = 1 << 18


class LinkModel:
    """Latency, bandwidth and bytes per request of one store's reads (see the module)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: (time, latency) pairs with increasing latency: the front is the window's least
        self._floor: deque[tuple[float, float]] = deque()
        self.read_latency = FIRST_LATENCY
        self._reads_seen = 0
        self.bytes_per_read = 0.0
        self.bandwidth = 0.0  # bytes/s over busy windows; 0 until one was measured
        self._bw_at = 0.0
        self._one_by_one = 0.0  # bytes/s of large requests, one at a time
        self.completed = 0
        self.in_flight = 0
        self._busy = 0.0  # seconds with a request in flight, before _busy_since
        self._busy_since = 0.0
        self._window = (0.0, 0, 0)  # busy seconds at its start, bytes, requests

    # -- what the store and the pipeline feed it ----------------------------------------------
    def read_done(self, seconds: float) -> None:
        """A chunk read took ``seconds`` from its start to its value."""
        with self._lock:
            self._reads_seen += 1
            if self._reads_seen == 1:
                self.read_latency = seconds
            else:
                self.read_latency = 0.8 * self.read_latency + 0.2 * seconds

    def start(self, now: float | None = None) -> float:
        """A request starts; returns its start time."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if not self.in_flight:
                self._busy_since = now
            self.in_flight += 1
        return now

    def record(self, nbytes: int, seconds: float, now: float | None = None) -> None:
        """A request that :meth:`start` noted delivered ``nbytes`` in ``seconds`` (0 bytes
        when it failed: every start is recorded)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            floor = self._floor
            while floor and floor[-1][1] >= seconds:
                floor.pop()
            floor.append((now, seconds))
            self.bytes_per_read = (0.9 * self.bytes_per_read + 0.1 * nbytes
                                   if self.bytes_per_read else float(nbytes))
            if nbytes >= LARGE_REQUEST:
                least = floor[0][1]
                rate = nbytes / max(1e-4, seconds - least if seconds > least else seconds)
                self._one_by_one = rate if not self._one_by_one else 0.7 * self._one_by_one + 0.3 * rate
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

    # -- what the engine asks ---------------------------------------------------------------------
    def _busy_now(self, now: float) -> float:
        return self._busy + (now - self._busy_since if self.in_flight else 0.0)

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
        """The least latency of recent requests (what one costs when nothing queues); 0
        before one was measured."""
        with self._lock:
            return self._floor_now(time.monotonic())

    def delivered(self) -> float:
        """Bytes per second the link delivers (0: not measured yet)."""
        with self._lock:
            return self._decayed(time.monotonic()) or self._one_by_one

    def concurrency(self, now: float | None = None) -> int:
        """Requests (read slots) to keep in flight."""
        now = time.monotonic() if now is None else now
        with self._lock:
            want = math.ceil(self.read_latency / PER_READ)
            floor = self._floor_now(now)
            bandwidth = self._decayed(now)
            if bandwidth > 0 and floor > 0 and self.bytes_per_read > 0:
                cap = math.ceil(GAIN * bandwidth * floor / self.bytes_per_read) + LOWEST
            else:  # slow start: each completed request lets two more go
                cap = LOWEST + math.ceil(GAIN * self.completed)
        return int(min(HIGHEST, max(LOWEST, min(want, cap))))

    def ranges_pay(self, whole: int, needed: int, head_known: bool) -> bool:
        """Whether fetching ``needed`` bytes by range (after a head, unless known) beats
        fetching the ``whole`` object. Unmeasured: ranges first (they measure the latency),
        then a whole object (it measures the bandwidth)."""
        latency, bandwidth = self.latency_floor, self.delivered()
        if not latency:
            return True
        if not bandwidth:
            return False
        trips = 1 if head_known else 2
        return trips * latency + needed / bandwidth < latency + whole / bandwidth

    def gap(self, default: int) -> int:
        """Ranges closer than this many bytes are fetched as one: below the bandwidth-delay
        product a gap costs less than another request (``default`` until both are known)."""
        latency, bandwidth = self.latency_floor, self.delivered()
        if not latency or not bandwidth:
            return default
        return int(min(1 << 24, max(default, latency * bandwidth)))

    def __repr__(self) -> str:
        return (f"<LinkModel read {self.read_latency * 1e3:.1f} ms, "
                f"floor {self.latency_floor * 1e3:.1f} ms, "
                f"bandwidth {self.delivered() / 1e6:.1f} MB/s, "
                f"bytes/request {self.bytes_per_read / 1e6:.2f} MB>")
