"""Recycled output buffers for decoded chunks.

Mapping fresh memory is the dearest part of decoding a chunk on many machines: every new
page is a fault, and under virtualisation each fault can cost microseconds (measured here:
about 4 ms to first touch 4 MiB, more than decoding it). So decoded chunks of 256 KiB and
more are written into buffers that are recycled once the last array viewing them is gone:

- a new buffer is a plain anonymous ``mmap`` (no ``MADV_HUGEPAGE``, which NumPy asks for
  on large blocks and which can make the kernel compact memory on first touch). It is not
  pre-populated: ``MAP_POPULATE`` halves the cost of the first touch but holds the
  process's memory map lock for the whole population, which stalled the reader thread's
  own allocations (play p95 +0.7 ms, scrub -6 %);
- a ``weakref.finalize`` on the root array returns the mapping to a free list keyed by its
  size when the array (and every view of it, which keep it alive) is garbage;
- the free list holds at most :func:`pool_limit` bytes; beyond that mappings are unmapped;
- sizes are rounded up to a size class (:func:`size_class`: four per power of two, so at most
  a quarter more, and the pages beyond what is written are never touched), so frames whose
  size changes with every pan and zoom share a few buffers instead of each filling the pool
  with a size that never comes back.

Nothing is ever handed out twice: a buffer returns to the pool only when no array can see it.
"""

from __future__ import annotations

import mmap
import threading
import weakref
from collections import defaultdict

import numpy as np

MIN_POOLED = 1 << 18
_FLAGS = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS

_lock = threading.RLock()  # re-entrant: a finalizer may run inside the lock (GC)
_free: dict[int, list[mmap.mmap]] = defaultdict(list)
_free_bytes = 0
_counters = {"reused": 0, "mapped": 0, "returned": 0, "unmapped": 0}


def pool_limit() -> int:
    """Most bytes kept mapped for reuse: an eighth of the cache budget, at most 512 MiB."""
    from .. import config

    return int(min(512 << 20, max(64 << 20, config.get().cache_bytes // 8)))


def _give_back(m: mmap.mmap, nbytes: int) -> None:
    """Finalizer of a root array. It runs while the array is being deallocated, which still
    holds its buffer export, so the mapping cannot be closed here: beyond the pool's limit it
    is dropped and unmapped when the export goes."""
    global _free_bytes
    with _lock:
        if _free_bytes + nbytes <= pool_limit():
            _free[nbytes].append(m)
            _free_bytes += nbytes
            _counters["returned"] += 1
        else:
            _counters["unmapped"] += 1


def size_class(nbytes: int) -> int:
    """The mapping size for ``nbytes``: the least ``m * 2**k`` (``m`` in 4..7) not below it,
    in whole pages."""
    k = max(0, nbytes.bit_length() - 3)
    size = -(-nbytes >> k) << k  # the top three bits, rounded up
    return -(-size // mmap.PAGESIZE) * mmap.PAGESIZE


def empty(nbytes: int) -> np.ndarray:
    """An uninitialised ``uint8`` array of ``nbytes``, recycled when it is no longer used."""
    global _free_bytes
    if nbytes < MIN_POOLED:
        return np.empty(nbytes, dtype=np.uint8)
    size = size_class(nbytes)
    m = None
    with _lock:
        stack = _free.get(size)
        if stack:
            m = stack.pop()
            _free_bytes -= size
            _counters["reused"] += 1
        else:
            _counters["mapped"] += 1
    if m is None:
        m = mmap.mmap(-1, size, flags=_FLAGS)
    arr = np.frombuffer(m, dtype=np.uint8, count=nbytes)
    weakref.finalize(arr, _give_back, m, size).atexit = False
    return arr


def stats() -> dict[str, int]:
    """Counters (reused, mapped, returned, unmapped) and the bytes now held for reuse."""
    with _lock:
        return {**_counters, "free_bytes": _free_bytes}


def clear() -> None:
    """Unmap every buffer held for reuse (buffers in use are not touched)."""
    global _free_bytes
    with _lock:
        held = [m for stack in _free.values() for m in stack]
        _free.clear()
        _free_bytes = 0
    del held  # unmapped as the last references go
