"""Engine statistics: counters, EWMA rates, latency percentiles, frozen snapshots.

Definitions (they matter for the UI and the tests):

- ``hits``: a requested chunk was served from the cache without waiting.
- ``misses``: a requested chunk was neither cached nor in flight, so a read was issued for it.
- ``joined``: a requested chunk was already being read; the request waited for that read.
- ``prefetch_reads``: reads issued speculatively or for a plan, before anyone asked.
- ``speculative_reads``: the prefetcher's guesses among them (SPECULATIVE reads);
  ``prefetch_used``: guesses a reader then asked for (``prefetch_used_ratio`` = used / guesses).
- ``reads``: every read started on a source (misses + prefetch reads + retries excluded).
- ``store_requests``: requests made to the store for chunk bytes (whole objects or byte
  ranges; retries excluded): inner chunks read together in one range count once.
- ``range_requests``: those of them that asked for a byte range (sharded stores).
- ``index_reads``: shard indexes read from the store (each is then kept in the cache).
- ``whole_object_fallbacks``: byte ranges served from the whole object, because the server
  ignores ``Range`` (a plain static server, e.g. Python's ``http.server``): it answered a
  range with the whole body (sliced here) or refused it (a whole GET, sliced here).
- ``batched``: reads that ran together with others of the same shard (one batch).
- ``views_ahead``: a reader's next views made ahead while it paused (:mod:`.ahead`);
  ``views_ahead_used``: those the reader then took.
- ``taken_over``: views of one whole chunk that a reader's steady step passes, handed over
  (from the cache, or from the read the reader waited for) instead of copied
  (:func:`~.array.read_selection`).
- ``part_reads``: reads that decoded only the blosc blocks a region of a chunk needs.
- ``encoded_hits``: reads answered from stored bytes held in the cache's encoded tier
  (decoded there, without reading the store).
- ``bytes_decoded``: bytes decoded (whole chunks, or the blocks of a part: the last one up to
  the part's end where it decodes by the fronts of its LZ4 streams);
  ``bytes_useful``: bytes handed to readers (selections, streamed chunks);
  ``decoded_ratio`` = decoded / useful (1.0: nothing decoded in vain).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields

import numpy as np


class _Rate:
    """An exponentially weighted rate (units per second) with time constant ``tau``."""

    __slots__ = ("tau", "value", "t")

    def __init__(self, tau: float = 1.0) -> None:
        self.tau = tau
        self.value = 0.0
        self.t = time.monotonic()

    def add(self, amount: float, now: float) -> None:
        self.value = self.read(now) + amount / self.tau
        self.t = now

    def read(self, now: float) -> float:
        return self.value * math.exp(-max(0.0, now - self.t) / self.tau)


@dataclass(frozen=True)
class StatsSnapshot:
    """A frozen copy of the engine's statistics at one instant."""

    time: float
    # the counters (COUNTERS), hits to bytes_useful
    hits: int = 0
    misses: int = 0
    joined: int = 0
    reads: int = 0
    prefetch_reads: int = 0
    speculative_reads: int = 0
    prefetch_used: int = 0
    part_reads: int = 0
    encoded_hits: int = 0
    evictions: int = 0
    cancelled: int = 0
    errors: int = 0
    retries: int = 0
    missing_filled: int = 0
    store_requests: int = 0
    range_requests: int = 0
    index_reads: int = 0
    whole_object_fallbacks: int = 0
    batched: int = 0
    views_ahead: int = 0
    views_ahead_used: int = 0
    taken_over: int = 0
    bytes_read: int = 0
    bytes_decoded: int = 0
    bytes_useful: int = 0
    read_rate: float = 0.0
    decode_rate: float = 0.0
    latency_p50: float = 0.0
    latency_p95: float = 0.0
    latency_p99: float = 0.0
    queued: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0
    concurrency: int = 0
    cache_bytes: int = 0
    cache_budget: int = 0
    cache_high_water: int = 0
    cache_chunks: int = 0
    cache_encoded_bytes: int = 0
    cache_encoded_entries: int = 0
    pinned_bytes: int = 0
    workers: int = 0

    @property
    def requests(self) -> int:
        return self.hits + self.misses + self.joined

    @property
    def hit_ratio(self) -> float:
        """Hits over all chunk requests (0 when there were none)."""
        total = self.requests
        return self.hits / total if total else 0.0

    @property
    def decoded_ratio(self) -> float:
        """Bytes decoded per byte handed to readers (0 when nothing was handed out)."""
        return self.bytes_decoded / self.bytes_useful if self.bytes_useful else 0.0

    @property
    def prefetch_used_ratio(self) -> float:
        """Share of the prefetcher's guesses that a reader then asked for (0 when none)."""
        return min(1.0, self.prefetch_used / self.speculative_reads) if self.speculative_reads else 0.0

    @property
    def queue_depth(self) -> int:
        return sum(self.queued.values())

    def as_dict(self) -> dict:
        d = asdict(self)
        d["hit_ratio"] = self.hit_ratio
        d["queue_depth"] = self.queue_depth
        d["decoded_ratio"] = self.decoded_ratio
        d["prefetch_used_ratio"] = self.prefetch_used_ratio
        return d

    def __sub__(self, other: StatsSnapshot) -> StatsSnapshot:
        """Counter differences between two snapshots (rates and gauges from ``self``)."""
        diffs = {name: getattr(self, name) - getattr(other, name) for name in COUNTERS}
        return StatsSnapshot(**{**asdict(self), **diffs})

    def __repr__(self) -> str:
        mb = 1e6
        q = " ".join(f"{k}={v}" for k, v in self.queued.items())
        return (
            f"<StatsSnapshot hits={self.hits} misses={self.misses} joined={self.joined} "
            f"hit_ratio={self.hit_ratio:.1%} reads={self.reads} "
            f"prefetch={self.prefetch_reads} (guesses {self.speculative_reads}, used "
            f"{self.prefetch_used}) part_reads={self.part_reads} encoded_hits={self.encoded_hits} "
            f"evictions={self.evictions} cancelled={self.cancelled} errors={self.errors} "
            f"retries={self.retries} views_ahead={self.views_ahead} (used {self.views_ahead_used}) "
            f"taken_over={self.taken_over}\n"
            f"  store requests={self.store_requests} (ranges {self.range_requests}, "
            f"shard indexes {self.index_reads}, batched reads {self.batched}, whole-object "
            f"fallbacks {self.whole_object_fallbacks})\n"
            f"  read {self.bytes_read / mb:.1f} MB ({self.read_rate / mb:.1f} MB/s), "
            f"decoded {self.bytes_decoded / mb:.1f} MB ({self.decode_rate / mb:.1f} MB/s, "
            f"{self.decoded_ratio:.2f} per useful byte); "
            f"latency p50={self.latency_p50 * 1e3:.1f} ms p95={self.latency_p95 * 1e3:.1f} ms "
            f"p99={self.latency_p99 * 1e3:.1f} ms\n"
            f"  queued [{q}] in_flight={self.in_flight}/{self.concurrency}; "
            f"cache {self.cache_bytes / mb:.1f}/{self.cache_budget / mb:.1f} MB "
            f"(high water {self.cache_high_water / mb:.1f} MB; decoded "
            f"{(self.cache_bytes - self.cache_encoded_bytes) / mb:.1f} MB in {self.cache_chunks}, "
            f"encoded {self.cache_encoded_bytes / mb:.1f} MB in {self.cache_encoded_entries})>"
        )


#: the counters: the fields of a snapshot from ``hits`` to ``bytes_useful``
_NAMES = [f.name for f in fields(StatsSnapshot)]
COUNTERS = tuple(_NAMES[_NAMES.index("hits") : _NAMES.index("bytes_useful") + 1])


class Stats:
    """Thread-safe counters owned by the engine; ``snapshot()`` is cheap."""

    def __init__(self, latency_window: int = 2048) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(COUNTERS, 0)
        self._read_rate = _Rate()
        self._decode_rate = _Rate()
        self._latencies: deque[float] = deque(maxlen=latency_window)
        #: snapshots merged in from other processes (dask workers), keyed by worker name
        self._remote: dict[str, StatsSnapshot] = {}

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def add(self, pairs: Iterable[tuple[str, int]]) -> None:
        """Add each ``(counter, n)`` of ``pairs`` (one lock; nothing when there are none)."""
        pairs = list(pairs)
        if not pairs:
            return
        with self._lock:
            counts = self._counts
            for name, n in pairs:
                counts[name] += n

    def record_read(self, encoded: int, decoded: int, seconds: float) -> None:
        """One read: ``encoded`` bytes moved from the store, ``decoded`` bytes decoded."""
        now = time.monotonic()
        with self._lock:
            self._counts["bytes_read"] += encoded
            self._counts["bytes_decoded"] += decoded
            self._read_rate.add(encoded, now)
            self._decode_rate.add(decoded, now)
            self._latencies.append(seconds)

    def merge_remote(self, name: str, snap: StatsSnapshot) -> None:
        """Keep the newest snapshot of another process (a dask worker) for the totals."""
        with self._lock:
            self._remote[name] = snap

    def reset(self) -> None:
        with self._lock:
            self._counts = dict.fromkeys(COUNTERS, 0)
            self._latencies.clear()
            self._remote.clear()
            self._read_rate = _Rate()
            self._decode_rate = _Rate()

    def snapshot(self, **gauges: object) -> StatsSnapshot:
        now = time.monotonic()
        with self._lock:
            counts = dict(self._counts)
            lat = np.fromiter(self._latencies, float) if self._latencies else None
            read_rate = self._read_rate.read(now)
            decode_rate = self._decode_rate.read(now)
            remote = list(self._remote.values())
        for snap in remote:
            for name in COUNTERS:
                counts[name] += getattr(snap, name)
            read_rate += snap.read_rate
            decode_rate += snap.decode_rate
        p50 = p95 = p99 = 0.0
        if lat is not None:
            p50, p95, p99 = (float(x) for x in np.percentile(lat, [50, 95, 99]))
        return StatsSnapshot(
            time=time.time(),
            read_rate=read_rate,
            decode_rate=decode_rate,
            latency_p50=p50,
            latency_p95=p95,
            latency_p99=p99,
            workers=len(remote),
            **counts,  # type: ignore[arg-type]
            **gauges,  # type: ignore[arg-type]
        )
