"""ChunkCache: decoded chunks and stored (encoded) bytes under one byte budget, LRU with pins.

Two tiers share one least-recently-used order and one budget:

- the **decoded** tier: decoded chunks, and decoded parts of chunks, by their key
  (:meth:`get`, :meth:`put`, ``key in cache``, :meth:`keys`, ``len(cache)``);
- the **encoded** tier: what a store holds for a chunk -- its stored bytes, the header and
  block table of a blosc frame, a shard's index -- by any hashable key of the caller's
  (:meth:`get_encoded`, :meth:`put_encoded`); a frame held here decodes any of its parts
  without reading the store again.

The lock guards only the dictionary and the counters; it is never held while reading or
decoding. Anything larger than the whole budget is returned to its caller but not kept.
``bytes_now`` (both tiers) never exceeds ``budget`` (checked by the 8-thread hammer test),
and ``high_water`` records the largest ``bytes_now`` ever seen. Memory held outside the cache
for the same budget (the recycled buffers: :mod:`tsexplore.sources.buffers`) is given up
first: ``outside`` (``trim(to)``) is asked to hold at most what a new entry leaves.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError


class _Encoded:
    """The cache's own key of an encoded entry (never equal to a decoded key)."""

    __slots__ = ("key", "_hash")

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self._hash = hash(("tsexplore-encoded", key))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Encoded) and other.key == self.key


class _Stored:
    """An encoded value and the bytes it is counted for."""

    __slots__ = ("value", "nbytes")

    def __init__(self, value: Any, nbytes: int) -> None:
        self.value = value
        self.nbytes = nbytes


def _size(value: Any) -> int:
    return int(value.nbytes)


class ChunkCache:
    """An LRU of decoded chunks and encoded bytes bounded by ``budget`` bytes."""

    def __init__(self, budget: int, outside: Callable[[int], object] | None = None) -> None:
        #: ``outside(to)``: memory counted in the same budget, trimmed to ``to`` bytes to make room
        self.outside = outside
        self._lock = threading.Lock()
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self._pins: dict[Hashable, int] = {}
        self._budget = 0
        self.bytes_now = 0
        self.encoded_bytes = 0
        self.encoded_entries = 0
        self.high_water = 0
        self.evictions = 0
        self.pinned_bytes = 0
        self.resize(budget)

    # -- budget ---------------------------------------------------------------------------
    @property
    def budget(self) -> int:
        return self._budget

    def resize(self, budget: int) -> None:
        """Change the byte budget; evicts least recently used entries (pinned ones too) to
        fit before it returns, so ``bytes_now <= budget`` holds at every moment."""
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

    @property
    def decoded_bytes(self) -> int:
        """Bytes of the decoded tier."""
        return self.bytes_now - self.encoded_bytes

    # -- the decoded tier -------------------------------------------------------------------
    def get(self, key: Hashable) -> np.ndarray | None:
        return self.get_many((key,))[0]

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
        return self._keep(key, value, value.nbytes)

    def _keep(self, key: Hashable, value: Any, size: int) -> bool:
        if self.outside is not None:  # what the budget holds outside the cache goes first
            self.outside(self._budget - self.bytes_now - size)
        with self._lock:
            self._pop_locked(key)
            if size > self._budget:
                return False
            if not self._evict_to(self._budget - size, protect_pins=True):
                return False
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
            self._data[key] = value
            self.bytes_now += size
            if isinstance(key, _Encoded):
                self.encoded_bytes += size
                self.encoded_entries += 1
            elif key in self._pins:
                self.pinned_bytes += size
            self.high_water = max(self.high_water, self.bytes_now)
            return True

    def _pop_locked(self, key: Hashable) -> Any:
        """Remove ``key`` (lock held); its value or None."""
        old = self._data.pop(key, None)
        if old is None:
            return None
        self.bytes_now -= old.nbytes
        if isinstance(key, _Encoded):
            self.encoded_bytes -= old.nbytes
            self.encoded_entries -= 1
        elif key in self._pins:
            self.pinned_bytes -= old.nbytes
        return old

    def _evict_to(self, target: int, *, protect_pins: bool) -> bool:
        """Evict LRU entries until ``bytes_now <= target``; lock must be held."""
        if self.bytes_now <= target:
            return True
        for key in list(self._data):
            if self.bytes_now <= target:
                break
            if protect_pins and key in self._pins:
                continue
            self._pop_locked(key)
            self.evictions += 1
        return self.bytes_now <= target

    def discard(self, keys: Iterable[Hashable]) -> None:
        with self._lock:
            for key in keys:
                self._pop_locked(key)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.bytes_now = 0
            self.encoded_bytes = 0
            self.encoded_entries = 0
            self.pinned_bytes = 0

    # -- the encoded tier -------------------------------------------------------------------
    def put_encoded(self, key: Hashable, value: Any, nbytes: int | None = None) -> bool:
        """Keep stored bytes (or a parsed header, a shard index: any object, counted as
        ``nbytes``; default ``len(value)``) under ``key``; returns whether they were kept."""
        size = len(value) if nbytes is None else int(nbytes)
        return self._keep(_Encoded(key), _Stored(value, size), size)

    def get_encoded(self, key: Hashable) -> Any:
        """What :meth:`put_encoded` kept under ``key``, or None."""
        wrapped = _Encoded(key)
        with self._lock:
            entry = self._data.get(wrapped)
            if entry is None:
                return None
            self._data.move_to_end(wrapped)
            return entry.value

    def has_encoded(self, key: Hashable) -> bool:
        """Whether the encoded tier holds ``key`` (its place in the LRU is unchanged)."""
        with self._lock:
            return _Encoded(key) in self._data

    def discard_encoded(self, keys: Iterable[Hashable]) -> None:
        self.discard(_Encoded(key) for key in keys)

    # -- pins -----------------------------------------------------------------------------
    def pin(self, keys: Iterable[Hashable]) -> None:
        """Protect ``keys`` from eviction (counted: pin twice, unpin twice)."""
        with self._lock:
            for key in keys:
                n = self._pins.get(key, 0)
                self._pins[key] = n + 1
                if n == 0 and key in self._data:
                    self.pinned_bytes += _size(self._data[key])

    def unpin(self, keys: Iterable[Hashable]) -> None:
        with self._lock:
            for key in keys:
                n = self._pins.get(key, 0)
                if n <= 1:
                    self._pins.pop(key, None)
                    if n == 1 and key in self._data:
                        self.pinned_bytes -= _size(self._data[key])
                else:
                    self._pins[key] = n - 1

    def is_pinned(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._pins

    # -- introspection --------------------------------------------------------------------
    def usage(self) -> tuple[int, int]:
        """``(bytes_now, budget)`` read together (a resize changes both under the lock)."""
        with self._lock:
            return self.bytes_now, self._budget

    def keys(self) -> list[Hashable]:
        """Keys of the decoded tier."""
        with self._lock:
            return [k for k in self._data if not isinstance(k, _Encoded)]

    def encoded_keys(self) -> list[Hashable]:
        """Keys of the encoded tier (as given to :meth:`put_encoded`)."""
        with self._lock:
            return [k.key for k in self._data if isinstance(k, _Encoded)]

    def __len__(self) -> int:
        """Entries of the decoded tier."""
        with self._lock:
            return len(self._data) - self.encoded_entries

    def __repr__(self) -> str:
        return (
            f"<ChunkCache {len(self)} chunks, {self.bytes_now / 1e6:.1f}/"
            f"{self._budget / 1e6:.1f} MB ({self.encoded_entries} encoded, "
            f"{self.encoded_bytes / 1e6:.1f} MB), high water {self.high_water / 1e6:.1f} MB, "
            f"{self.evictions} evictions>"
        )
