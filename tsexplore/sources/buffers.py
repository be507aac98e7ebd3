"""Recycled buffers for decoded chunks and frames: no first touch of fresh pages per chunk.

Every new page is a fault, and under virtualisation a fault costs microseconds: first
touching 4 MiB can cost more than decoding it. So arrays of 256 KiB and more are written into
``mmap`` buffers that are recycled once the last array viewing them is gone:

- a new buffer is a plain anonymous mapping on small pages: a huge page
  (``MADV_HUGEPAGE``) can make the kernel compact memory at its first touch, and while the
  cache grows (random frames) new buffers are mapped all the time. The pages its array
  takes are made at once (``MADV_POPULATE_WRITE``, called without the GIL): the kernel
  zeroes them in one call instead of taking one fault per page as the decoder first writes
  them;
- a ``weakref.finalize`` on the root array returns it to a free list when the array and
  every view of it are garbage: nothing is handed out twice;
- the free list holds at most :func:`pool_limit` bytes, oldest dropped first, and drops a
  buffer not reused within :data:`POOL_AGE` of the pool's allocations;
- it counts inside the one cache budget: the engine says what the budget leaves
  (:func:`limit_by`) and the cache trims it (:func:`trim`) to that after each chunk it
  keeps; a full cache leaves it a reserve of the budget, so the buffers of the chunks it
  evicts wait here for the next decode;
- sizes are rounded to size classes (:func:`size_class`: four per power of two), so frames
  whose size changes with every pan and zoom share a few buffers;
- an array that readers copy pool arrays into (a frame) starts :data:`SKEW` bytes past its
  mapping's start (``empty(..., skew=True)``): a copy whose loads and stores sit at the same
  offset within their pages -- two page-aligned buffers -- makes the CPU take each load as
  waiting on the store before it (4K aliasing), and copies run slower.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import mmap
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

MIN_POOLED = 1 << 18
#: bytes a skewed array starts past its mapping's first page (see the module docstring): a
#: multiple of 16 (every dtype's alignment), not of the 64-byte cache line
SKEW = 16
#: buffers this large ask for transparent huge pages (a huge page on x86-64: 2 MiB)
HUGE = 1 << 21
_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", None)
#: the pool's limit outside a budget
DEFAULT_LIMIT = 64 << 20
#: a free buffer not reused within this many of the pool's allocations is unmapped
POOL_AGE = 256
_FLAGS = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
#: ``madvise`` advice that makes a range's pages at once, writable (Linux 5.14 and later;
#: Python 3.11's ``mmap`` lacks the name); None once the system refused it
_populate_write: int | None = getattr(mmap, "MADV_POPULATE_WRITE", 23 if sys.platform.startswith("linux") else None)


def _libc_madvise() -> Callable[[int, int, int], int] | None:
    """``madvise(address, length, advice)`` of the C library (Linux), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


_madvise = _libc_madvise()

_lock = threading.RLock()  # re-entrant: a finalizer may run inside the lock (GC)
#: free buffers, oldest returned first: id -> (size, mapping, the allocation clock then)
_free: OrderedDict[int, tuple[int, mmap.mmap, int]] = OrderedDict()
#: free buffers by size, newest last (ids into ``_free``)
_by_size: dict[int, list[int]] = {}
_free_bytes = 0
_clock = itertools.count()
_now = 0
_counters = {"reused": 0, "mapped": 0, "returned": 0, "unmapped": 0, "aged": 0}
#: what the one cache budget leaves for the pool (set by the engine: :func:`limit_by`)
_room: Callable[[], int] | None = None


def limit_by(room: Callable[[], int] | None) -> Callable[[], int] | None:
    """Count the pool inside a budget: ``room()`` is what the budget leaves (the engine's
    cache budget less its bytes); the pool then holds at most that (None: no budget).
    Returns the ``room`` it counted in before."""
    global _room
    before, _room = _room, room
    trim(pool_limit())
    return before


def counted_by(room: Callable[[], int]) -> bool:
    """Whether the pool is counted inside the budget ``room`` tells (:func:`limit_by`)."""
    return _room == room


def pool_limit() -> int:
    """Most bytes kept mapped for reuse: what the budget leaves (:func:`limit_by`), else
    :data:`DEFAULT_LIMIT`."""
    room = _room
    return DEFAULT_LIMIT if room is None else max(0, int(room()))


def _drop_oldest_locked() -> mmap.mmap:
    """Take the oldest free buffer out of the pool (lock held); the caller lets it go."""
    global _free_bytes
    key, (size, m, _) = _free.popitem(last=False)
    stack = _by_size[size]
    stack.remove(key)  # the oldest of its size: at the front
    if not stack:
        del _by_size[size]
    _free_bytes -= size
    return m


def trim(to: int) -> int:
    """Unmap the oldest free buffers until the pool holds at most ``to`` bytes; returns the
    bytes it now holds (the cache calls this to make room inside the one budget)."""
    with _lock:
        dropped = []
        while _free and _free_bytes > max(0, to):
            dropped.append(_drop_oldest_locked())
            _counters["unmapped"] += 1
        held = _free_bytes
    del dropped  # unmapped as the last references go (outside the lock)
    return held


def _give_back(m: mmap.mmap, nbytes: int) -> None:
    """Finalizer of a root array. It runs while the array is being deallocated, which still
    holds its buffer export, so the mapping cannot be closed here: a buffer dropped (beyond
    the pool's limit, or the oldest to make room) is unmapped when its last export goes."""
    global _free_bytes
    limit = pool_limit()
    with _lock:
        if nbytes > limit:
            _counters["unmapped"] += 1
            return
        dropped = []
        while _free_bytes + nbytes > limit:
            dropped.append(_drop_oldest_locked())
            _counters["unmapped"] += 1
        _free[id(m)] = (nbytes, m, _now)
        _by_size.setdefault(nbytes, []).append(id(m))
        _free_bytes += nbytes
        _counters["returned"] += 1
    del dropped


def size_class(nbytes: int) -> int:
    """The mapping size for ``nbytes``: the least ``m * 2**k`` (``m`` in 4..7) not below it,
    in whole pages."""
    k = max(0, nbytes.bit_length() - 3)
    size = -(-nbytes >> k) << k  # the top three bits, rounded up
    return -(-size // mmap.PAGESIZE) * mmap.PAGESIZE


def empty(nbytes: int, spare: int = 0, skew: bool = False, populate: bool = True) -> np.ndarray:
    """An uninitialised ``uint8`` array of ``nbytes``, recycled when it is no longer used.

    ``skew``: the array starts :data:`SKEW` bytes into its buffer (one that pool arrays are
    copied into: a frame assembled from chunks).

    ``spare``: leave this many free buffers of the size for other callers (a fresh mapping
    instead). A chunk decoded for the cache leaves a few to the frames readers assemble:
    when both draw on one free list, a read ahead takes the buffer the last frame gave back
    and the reader's next frame first-touches fresh pages while the user waits (measured:
    play frames of 10-13 ms instead of 3 at the rows the prefetcher decodes ahead).

    ``populate`` False: a fresh mapping's pages are made as its writer asks
    (:func:`make_pages`) or at their first touch: a buffer written front to back, as far as
    a stream goes (:mod:`.zstd_front`)."""
    global _free_bytes, _now
    if nbytes < MIN_POOLED:
        return np.empty(nbytes, dtype=np.uint8)
    if skew:  # the root array keeps the buffer; the view past its first bytes keeps the root
        return empty(nbytes + SKEW, spare, populate=populate)[SKEW:]
    size = size_class(nbytes)
    m = None
    aged = []
    with _lock:
        _now = now = next(_clock)
        while _free and next(iter(_free.values()))[2] < now - POOL_AGE:  # not reused lately
            aged.append(_drop_oldest_locked())
            _counters["aged"] += 1
        stack = _by_size.get(size)
        if stack and len(stack) > spare:
            key = stack.pop()
            m = _free.pop(key)[1]
            if not stack:
                del _by_size[size]
            _free_bytes -= size
            _counters["reused"] += 1
        else:
            _counters["mapped"] += 1
    del aged  # unmapped outside the lock
    fresh = m is None
    if m is None:
        m = mapping(size, huge=False)
    arr = np.frombuffer(m, dtype=np.uint8, count=nbytes)
    if fresh and populate:
        make_pages(arr)
    weakref.finalize(arr, _give_back, m, size).atexit = False
    return arr


def mapping(size: int, huge: bool) -> mmap.mmap:
    """A new anonymous mapping of ``size`` bytes (not touched yet). ``huge``: one of at least
    :data:`HUGE` bytes asks for transparent huge pages -- for memory mapped once and used
    for long (a read thread's scratch): the kernel copies into it faster, and its first
    touch may make the kernel compact memory."""
    m = mmap.mmap(-1, size, flags=_FLAGS)
    if huge and size >= HUGE and _HUGEPAGE is not None:
        try:
            m.madvise(_HUGEPAGE)
        except OSError:  # no transparent huge pages here: small pages
            pass
    return m


def make_pages(arr: np.ndarray, start: int = 0, stop: int | None = None) -> None:
    """Make the pages of bytes ``start .. stop`` (default: all) of ``arr`` (a pool array) now,
    before a decoder writes them: a new mapping's whole array (a size class's tail stays
    untouched, as the budget counts the array), or a stream's next stretch. ``madvise`` is
    called through ``ctypes``, which lets go of the GIL: making 4 MiB of pages takes about a
    millisecond, which ``mmap.madvise`` would hold every other thread of the process for.
    Where the system cannot, the pages are made at their first touch."""
    global _populate_write
    advice = _populate_write
    stop = arr.nbytes if stop is None else stop
    if advice is None or _madvise is None or stop <= start:
        return
    page = mmap.PAGESIZE
    lo = arr.ctypes.data + start
    first = lo - lo % page
    last = -(-(arr.ctypes.data + stop) // page) * page
    if _madvise(first, last - first, advice) != 0:
        if ctypes.get_errno() == errno.EINVAL:  # an older kernel: never asked again
            _populate_write = None


def stats() -> dict[str, int]:
    """Counters (reused, mapped, returned, unmapped: beyond the limit, aged: not reused
    within :data:`POOL_AGE` allocations) and the bytes now held for reuse."""
    with _lock:
        return {**_counters, "free_bytes": _free_bytes}


def clear() -> None:
    """Unmap every buffer held for reuse (buffers in use are not touched)."""
    global _free_bytes
    with _lock:
        held = [m for _, m, _ in _free.values()]
        _free.clear()
        _by_size.clear()
        _free_bytes = 0
    del held  # unmapped as the last references go
