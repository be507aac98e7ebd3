"""The reader's next view, assembled before it is asked for.

A reader that moves through an array one steady step at a time and leaves time between its
views (play: frame t, t+1, t+2 ... at 30 frames a second) gets each view from here. Right
after a view is answered, the view one step on (the selection moved by the last step, see
:func:`~.prefetch.shifted_keys`) is made on the engine's ``tsexplore-ahead`` thread into an
output array that the reader then takes as it is: from the whole chunks the engine holds
(cached, or being read: joined at PLANNED priority; a guess reads no whole chunk of its own)
and the parts of chunks it needs (read there, one-pass: for this view only). Planning the
view, looking up its chunks, decoding its parts and copying their pieces into it happen in the
time the reader left between views; the reader's answer is a hand-over.

It starts only when it pays: the last two steps equal, and the reader *paced*: its pause
before its last view at least :data:`PACE` of the time the view took (and at least
:data:`MIN_PAUSE`). Play leaves tens of milliseconds a frame; a scrub that asks for the next
frame as soon as it has one leaves none, and a view made on another thread would then only
add a hand-over to the reader's wait. The prefetcher asks :meth:`ViewsAhead.paced`: a paced
reader's views are made by parts in its pauses, so the chunks it is on need not be read whole
for it. A reader asks :meth:`ViewsAhead.scrubs`: a view that goes on with a steady step
without a pause reads whole chunks, since the views after it take the rest of them. One view
per source is held, and all of them hold at most :data:`MOST_BYTES`: a reader asking for
anything else drops it (its buffer goes back to the pool), and a view that failed is read
again by the reader, which then raises what the read raises.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import ReadTimeoutError
from .planning import normalize_key
from .prefetch import STEADY, UNIT_STEADY, shifted_keys

#: a selection compared across views: per axis ``(position,)`` or ``(start, stop, step)``
#: (negative positions and open slices resolved against the shape)
Canon = tuple[tuple[int, ...], ...]
#: a reader paces its views when it pauses before one at least this share of the time the
#: view took (a scrub's pause is the loop's own overhead: a few per cent), and at least
#: MIN_PAUSE seconds (a shorter pause saves less than handing a view over from another
#: thread costs: waking it)
PACE, MIN_PAUSE = 0.25, 0.001
#: the views made ahead and not yet taken hold at most this many bytes, all sources together
#: (memory no reader asked for yet): a larger view is not made ahead, and a new one drops
#: those of the sources read least recently
MOST_BYTES = 64 << 20
#: sources whose last views are remembered (the least recently read go first)
TRACKED = 64
THREAD_PREFIX = "tsexplore-ahead"


def canon(key: tuple[object, ...], shape: tuple[int, ...]) -> Canon | None:
    """``key`` in the form views are compared in; None when it holds an index array (such
    views are not followed)."""
    out: list[tuple[int, ...]] = []
    for k, size in zip(normalize_key(key, len(shape)), shape):
        if isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)):
            out.append((int(k) + (size if int(k) < 0 else 0),))
        elif isinstance(k, slice):
            out.append(k.indices(size))
        else:
            return None
    return tuple(out)


def step(a: Canon, b: Canon) -> tuple[int, int] | None:
    """``(axis, distance)`` when view ``b`` is view ``a`` moved along one axis (the same
    selection there, shifted), else None."""
    moved = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    if len(moved) != 1:
        return None
    axis = moved[0]
    x, y = a[axis], b[axis]
    if len(x) != len(y):  # a position and a slice
        return None
    if len(x) == 3 and (x[2] != y[2] or len(range(*x)) != len(range(*y))):
        return None
    return axis, y[0] - x[0]


@dataclass
class _Track:
    """What one source's reader did lately, and the view made ahead for it: its selection
    and a future of ``(view, seconds it took to make)``."""

    last: Canon | None = None
    step: tuple[int, int] | None = None
    answered: float = 0.0  # when its last view was answered (monotonic)
    view: tuple[Canon, cf.Future, int] | None = None  # and its bytes
    paced: bool = False  # the reader paused before its last view (see PACE)
    steady: bool = False  # its last two steps were equal (and not zero)


class ViewsAhead:
    """Per source, the reader's next view made ahead (see the module's docstring).

    ``count(name, n)``: the engine's counters (``views_ahead``, ``views_ahead_used``)."""

    def __init__(self, count: Callable[[str, int], None]) -> None:
        self._count = count
        self._lock = threading.Lock()
        self._tracks: collections.OrderedDict[str, _Track] = collections.OrderedDict()
        self._pool: cf.ThreadPoolExecutor | None = None
        self._closed = False

    def take(self, token: str, key: Canon, timeout: float) -> tuple[np.ndarray, float] | None:
        """The view ``key`` of source ``token`` and how long making it took, when it was made
        ahead (waiting for it while it is being made, at most ``timeout`` seconds); else None,
        and whatever was made ahead is dropped."""
        with self._lock:
            track = self._tracks.get(token)
            view = track.view if track is not None else None
            if view is None:
                return None
            track.view = None  # type: ignore[union-attr]
        made, future, _ = view
        if made != key:
            return None
        try:
            out = future.result(timeout)
        except cf.TimeoutError:
            if not future.done():
                raise ReadTimeoutError(
                    f"the view made ahead of the reader did not finish within {timeout} s; "
                    "raise tse.config.set(wait_timeout=...) or check the store"
                ) from None
            return None
        except Exception:  # noqa: BLE001 - the reader reads it again and raises its own error
            return None
        self._count("views_ahead_used", 1)
        return out

    def answered(
        self,
        token: str,
        key: Canon,
        real: tuple[object, ...],
        shape: tuple[int, ...],
        nbytes: int,
        asked: float,
        seconds: float,
        make: Callable[[tuple[object, ...]], np.ndarray],
    ) -> None:
        """The reader of source ``token`` was answered view ``key`` (its selection ``real``, of
        ``nbytes``), asked at ``asked`` (monotonic) and made in ``seconds``; start making the
        next view with ``make(selection)`` when the pattern and the reader's pace call for it."""
        now = time.monotonic()
        with self._lock:
            track = self._tracks.pop(token, None) or _Track()
            self._tracks[token] = track  # the most recently read last
            while len(self._tracks) > TRACKED:
                self._tracks.popitem(last=False)
            moved = step(track.last, key) if track.last is not None else None
            pause = asked - track.answered if track.answered else 0.0
            steady = moved is not None and moved == track.step and moved[1] != 0
            track.last, track.step, track.answered = key, moved, now
            track.paced = pause >= max(PACE * seconds, MIN_PAUSE)
            track.steady = steady
            if not steady or not track.paced or self._closed or nbytes > MOST_BYTES:
                return
            axis, distance = moved  # type: ignore[misc]
            following = shifted_keys(real, shape, axis, distance, 1)
            if not following:
                return
            nxt = following[0]
            self._make_room_locked(nbytes)
            if self._pool is None:
                self._pool = cf.ThreadPoolExecutor(1, thread_name_prefix=THREAD_PREFIX)
            track.view = (canon(nxt, shape), self._pool.submit(_timed, make, nxt), nbytes)  # type: ignore[assignment]
        self._count("views_ahead", 1)

    def _make_room_locked(self, nbytes: int) -> None:
        """Drop the views made ahead for the sources read least recently until ``nbytes``
        more stay within :data:`MOST_BYTES` (lock held)."""
        held = sum(t.view[2] for t in self._tracks.values() if t.view is not None)
        for track in self._tracks.values():  # least recently read first
            if held + nbytes <= MOST_BYTES:
                return
            if track.view is not None:
                held -= track.view[2]
                track.view = None

    def paced(self, token: str) -> bool:
        """Whether the reader of source ``token`` paused before its last view (a hint, read
        without the lock)."""
        track = self._tracks.get(token)
        return track is not None and track.paced

    def goes_on(self, token: str, key: Canon) -> bool:
        """Whether view ``key`` of source ``token`` moves by its reader's steady step again
        (a hint, read without the lock)."""
        return self._goes_on(token, key) is not None

    def scrubs(self, token: str, key: Canon, chunks: tuple[int, ...]) -> bool:
        """Whether view ``key`` of source ``token`` (chunks ``chunks``) goes on with its
        reader's scrub: the reader moved without pausing, this view moves by its last step
        again, as many times in a row as make the prefetcher's pattern steady (from which
        view on it reads the chunks whole: :data:`~.prefetch.STEADY` steps, two of one
        element, :data:`~.prefetch.UNIT_STEADY`), and the step is shorter than the chunks
        along its axis (a hint, read without the lock). The views after it need the rest of
        the chunks it is on, so reading parts of them first would only decode some of their
        blocks twice, and on a cold disk read their bytes beside the whole chunks the
        prefetcher reads."""
        found = self._goes_on(token, key, unit=True)
        return found is not None and not found[0].paced and abs(found[1][1]) < chunks[found[1][0]]

    def passes(self, token: str, key: Canon, chunks: tuple[int, ...]) -> bool:
        """Whether view ``key`` of source ``token`` goes on with its reader's steady step and
        that step is one or two chunks deep along its axis: the next view is in other chunks,
        so this one's are passed once it is answered, as the prefetcher lets them go (a
        longer step is a jump, whose chunks may be seen again; a hint, read without the
        lock)."""
        found = self._goes_on(token, key)
        if found is None:
            return False
        axis, distance = found[1]
        return chunks[axis] <= abs(distance) <= 2 * chunks[axis]

    def _goes_on(self, token: str, key: Canon, unit: bool = False) -> tuple[_Track, tuple[int, int]] | None:
        """The reader's track and its step ``(axis, distance)``, when view ``key`` moves by
        the reader's last step again and that makes :data:`~.prefetch.STEADY` equal steps in
        a row, this view's included (the reader's steady step); ``unit``: a step of one
        element already at :data:`~.prefetch.UNIT_STEADY` of them, as the prefetcher counts."""
        track = self._tracks.get(token)
        if track is None or track.last is None:
            return None
        moved = step(track.last, key)
        if moved is None or moved != track.step:
            return None
        seen = 3 if track.steady else 2  # equal steps in a row, this view's included
        return (track, moved) if seen >= (UNIT_STEADY if unit and abs(moved[1]) == 1 else STEADY) else None

    def close(self, timeout: float = 2.0) -> None:
        """Drop every view made ahead and stop the thread (at most ``timeout`` seconds)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
            self._tracks.clear()
        if pool is None:
            return
        pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + timeout
        for thread in list(getattr(pool, "_threads", ())):
            thread.join(max(0.0, deadline - time.monotonic()))


def _timed(make: Callable[[tuple[object, ...]], np.ndarray], key: tuple[object, ...]) -> tuple[np.ndarray, float]:
    """``make(key)`` and the seconds it took."""
    start = time.monotonic()
    out = make(key)
    return out, time.monotonic() - start
