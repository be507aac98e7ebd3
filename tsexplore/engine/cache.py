"""ChunkCache: decoded chunks under one byte budget, LRU with pins, thread-safe.

The lock guards only the dictionary and the counters; it is never held while reading or
decoding. A chunk larger than the whole budget is returned to its caller but not kept.
``bytes_now`` never exceeds ``budget`` (checked by the 8-thread hammer test), and
``high_water`` records the largest ``bytes_now`` ever seen.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence

import numpy as np

from ..errors import ConfigError


class ChunkCache:
    """An LRU of decoded chunks bounded by ``budget`` bytes."""

    def __init__(self, budget: int) -> None:
        self._lock = threading.Lock()
        self._data: OrderedDict[Hashable, np.ndarray] = OrderedDict()
        self._pins: dict[Hashable, int] = {}
        self._budget = 0
        self.bytes_now = 0
        self.high_water = 0
        self.evictions = 0
        self.pinned_bytes = 0
        self.resize(budget)

    # -- budget ---------------------------------------------------------------------------
    @property
    def budget(self) -> int:
        return self._budget

    def resize(self, budget: int) -> None:
        """Change the byte budget; evicts least recently used chunks to fit."""
        budget = int(budget)
        if budget < 0:
            raise ConfigError(f"cache budget must be >= 0 bytes, got {budget}")
        with self._lock:
            self._budget = budget
            self._evict_to(budget, protect_pins=False)

    @property
    def headroom(self) -> int:
        """Bytes that may be filled without evicting anything pinned."""
        with self._lock:
            return self._budget - self.pinned_bytes

    # -- access ---------------------------------------------------------------------------
    def get(self, key: Hashable) -> np.ndarray | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def get_many(self, keys: Sequence[Hashable]) -> list[np.ndarray | None]:
        """Look several keys up under one lock acquisition (None where absent)."""
        with self._lock:
            data = self._data
            out = []
            for key in keys:
                value = data.get(key)
                if value is not None:
                    data.move_to_end(key)
                out.append(value)
            return out

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._data

    def put(self, key: Hashable, value: np.ndarray) -> bool:
        """Keep ``value`` under ``key`` if it fits; returns whether it was kept."""
        size = value.nbytes
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self.bytes_now -= old.nbytes
                if key in self._pins:
                    self.pinned_bytes -= old.nbytes
            if size > self._budget:
                return False
            if not self._evict_to(self._budget - size, protect_pins=True):
                return False
            value.flags.writeable = False
            self._data[key] = value
            self.bytes_now += size
            if key in self._pins:
                self.pinned_bytes += size
            self.high_water = max(self.high_water, self.bytes_now)
            return True

    def _evict_to(self, target: int, *, protect_pins: bool) -> bool:
        """Evict LRU chunks until ``bytes_now <= target``; lock must be held."""
        if self.bytes_now <= target:
            return True
        for key in list(self._data):
            if self.bytes_now <= target:
                break
            if protect_pins and key in self._pins:
                continue
            value = self._data.pop(key)
            self.bytes_now -= value.nbytes
            if key in self._pins:
                self.pinned_bytes -= value.nbytes
            self.evictions += 1
        return self.bytes_now <= target

    def discard(self, keys: Iterable[Hashable]) -> None:
        with self._lock:
            for key in keys:
                value = self._data.pop(key, None)
                if value is not None:
                    self.bytes_now -= value.nbytes
                    if key in self._pins:
                        self.pinned_bytes -= value.nbytes

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.bytes_now = 0
            self.pinned_bytes = 0

    # -- pins -----------------------------------------------------------------------------
    def pin(self, keys: Iterable[Hashable]) -> None:
        """Protect ``keys`` from eviction (counted: pin twice, unpin twice)."""
        with self._lock:
            for key in keys:
                n = self._pins.get(key, 0)
                self._pins[key] = n + 1
                if n == 0 and key in self._data:
                    self.pinned_bytes += self._data[key].nbytes

    def unpin(self, keys: Iterable[Hashable]) -> None:
        with self._lock:
            for key in keys:
                n = self._pins.get(key, 0)
                if n <= 1:
                    self._pins.pop(key, None)
                    if n == 1 and key in self._data:
                        self.pinned_bytes -= self._data[key].nbytes
                else:
                    self._pins[key] = n - 1

    def is_pinned(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._pins

    # -- introspection --------------------------------------------------------------------
    def keys(self) -> list[Hashable]:
        with self._lock:
            return list(self._data)

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    def __repr__(self) -> str:
        return (
            f"<ChunkCache {len(self)} chunks, {self.bytes_now / 1e6:.1f}/"
            f"{self._budget / 1e6:.1f} MB, high water {self.high_water / 1e6:.1f} MB, "
            f"{self.evictions} evictions>"
        )
