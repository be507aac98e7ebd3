"""ChunkCache: decoded chunks and stored (encoded) bytes under one byte budget, LRU with pins.

Two tiers share one least-recently-used order and one budget; the key says the tier:

- the **decoded** tier: decoded chunks and decoded parts of chunks, under their
  :class:`~.types.ChunkRequest` (whole, or :class:`~.types.Blocks`); ``len(cache)`` counts them;
- the **encoded** tier: what a store holds -- a chunk's stored bytes (a ``STORED`` request),
  a blosc frame's head, a shard's index (an :class:`~.types.AuxKey`) -- each counted for the
  bytes its writer gives; a frame held here decodes any of its parts without reading the
  store again.

The lock guards only the dictionary and the counters; it is never held while reading or
decoding. Anything larger than the whole budget is returned to its caller but not kept.
``bytes_now`` (both tiers) never exceeds ``budget`` (checked by the 8-thread hammer test),
and ``high_water`` records the largest ``bytes_now`` ever seen. Memory held outside the cache
for the same budget (the recycled buffers: :mod:`tsexplore.sources.buffers`) holds at most
what the cache leaves: after each new entry ``outside`` (``trim(to)``) is told what that is.
A full cache leaves ``reserve(budget, nbytes)`` bytes to that memory: it evicts down to
``budget - reserve`` to fit a new entry of ``nbytes``, so the buffers of what it evicts, and
the frames readers drop, are held for the next decode instead of unmapped; the decoders
would otherwise map fresh pages for every chunk while the cache stays full (browsing an
array larger than the budget).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError
from .types import STORED, AuxKey, ChunkRequest


def encoded(key: Hashable) -> bool:
    """Whether ``key`` belongs to the encoded tier."""
    return type(key) is AuxKey or (type(key) is ChunkRequest and key.part is STORED)


class _Held:
    """An encoded value and the bytes it is counted for."""

    __slots__ = ("value", "nbytes")

    def __init__(self, value: Any, nbytes: int) -> None:
        self.value = value
        self.nbytes = nbytes


class ChunkCache:
    """An LRU of decoded chunks and encoded bytes bounded by ``budget`` bytes."""

    def __init__(
        self, budget: int, outside: Callable[[int], object] | None = None,
        reserve: Callable[[int, int], int] | None = None,
    ) -> None:
        #: ``outside(to)``: memory counted in the same budget, trimmed to ``to`` bytes to make room
        self.outside = outside
        #: ``reserve(budget, nbytes)``: bytes of the budget a full cache leaves to ``outside``'s
        #: memory as it makes room for an entry of ``nbytes``
        self.reserve = reserve
        self._lock = threading.Lock()
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self._pins: dict[Hashable, int] = {}
        #: when each entry was put (``time.monotonic``): a release decided from an older
        #: view leaves an entry put since then (:meth:`discard`'s ``put_before``)
        self._put_at: dict[Hashable, float] = {}
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

    def _reserve(self, nbytes: int) -> int:
        return 0 if self.reserve is None else max(0, min(self._budget, int(self.reserve(self._budget, nbytes))))

    @property
    def headroom(self) -> int:
        """Bytes that may be filled without evicting anything pinned."""
        with self._lock:
            return self._budget - self.pinned_bytes

    @property
    def decoded_bytes(self) -> int:
        """Bytes of the decoded tier."""
        return self.bytes_now - self.encoded_bytes

    # -- entries ----------------------------------------------------------------------------
    def get(self, key: Hashable) -> Any:
        return self.get_many((key,))[0]

    def get_many(self, keys: Sequence[Hashable]) -> list[Any]:
        """Look several keys up under one lock acquisition (None where absent); each found
        becomes the most recently used."""
        with self._lock:
            data = self._data
            out = []
            for key in keys:
                value = data.get(key)
                if value is not None:
                    data.move_to_end(key)
                    if type(value) is _Held:
                        value = value.value
                out.append(value)
            return out

    def __contains__(self, key: Hashable) -> bool:
        """Whether ``key`` is held (its place in the LRU order is unchanged)."""
        with self._lock:
            return key in self._data

    def put(self, key: Hashable, value: Any, nbytes: int | None = None) -> bool:
        """Keep ``value`` under ``key`` if it fits; returns whether it was kept. Decoded
        values are arrays (counted for their ``nbytes``, made read-only); encoded ones are
        counted for ``nbytes`` (default ``len(value)``)."""
        if encoded(key):
            size = len(value) if nbytes is None else int(nbytes)
            value = _Held(value, size)
        else:
            size = value.nbytes
        reserve = self._reserve(size)
        with self._lock:
            self._pop_locked(key)
            if size > self._budget:
                return False
            # down to the reserve when evicting (pins permitting), within the budget at least
            self._evict_to(self._budget - reserve - size, protect_pins=True)
            if self.bytes_now > self._budget - size:
                return False
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
            self._data[key] = value
            self._put_at[key] = time.monotonic()
            self.bytes_now += size
            if type(value) is _Held:
                self.encoded_bytes += size
                self.encoded_entries += 1
            elif key in self._pins:
                self.pinned_bytes += size
            self.high_water = max(self.high_water, self.bytes_now)
            left = self._budget - self.bytes_now
        if self.outside is not None:  # the memory outside holds what the cache leaves
            self.outside(left)
        return True

    def _pop_locked(self, key: Hashable) -> Any:
        """Remove ``key`` (lock held); its value or None."""
        old = self._data.pop(key, None)
        if old is None:
            return None
        del self._put_at[key]
        self.bytes_now -= old.nbytes
        if type(old) is _Held:
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

    def give_up(self, key: Hashable, value: Any) -> bool:
        """Stop holding ``value`` under ``key`` (a reader takes it over: see
        :func:`~.array.read_selection`): True when the cache no longer holds it (or never
        did: a read not kept); False, holding on, when it is pinned (on screen)."""
        with self._lock:
            if self._data.get(key) is not value:
                return True
            if key in self._pins:
                return False
            self._pop_locked(key)
            return True

    def discard(self, keys: Iterable[Hashable], *, put_before: float | None = None) -> None:
        """Stop holding ``keys``; with ``put_before`` (a ``time.monotonic`` time) only those
        put before it: a release decided from a view answered then leaves what another
        reader (a ``fetch``) put since."""
        with self._lock:
            for key in keys:
                if put_before is None or self._put_at.get(key, put_before) < put_before:
                    self._pop_locked(key)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._put_at.clear()
            self.bytes_now = 0
            self.encoded_bytes = 0
            self.encoded_entries = 0
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
    def usage(self) -> tuple[int, int]:
        """``(bytes_now, budget)`` read together (a resize changes both under the lock)."""
        with self._lock:
            return self.bytes_now, self._budget

    def keys(self) -> list[Hashable]:
        """Keys of both tiers, least recently used first."""
        with self._lock:
            return list(self._data)

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
