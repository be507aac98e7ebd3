"""Frames ahead: the frame a steadily stepping slider shows next, made before it is asked for.

A view controller that shows cached views on the caller's thread (``inline_cached``: the
Explorer's slider moves) spends its few milliseconds per move reading the cached chunks,
colouring the frame and making its histogram while the user waits. When the slider steps
steadily (the same dim, the same step, e.g. a held arrow key or play), the next state is
known: after a frame is delivered that came the same step after the one before it (a
single jump predicts nothing), :class:`FramesAhead` asks the controller's own thread to
make the next one (cached chunks only, never a read that waits on I/O, as a SPECULATIVE read
the prefetcher does not learn from). When that state is asked for, the frame made ahead is
handed over if it was made for exactly the same request and colour settings -- else it is
dropped and the frame is made as always. What the user sees is the same frame either way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .planning import Frame, ViewRequest, ViewState

#: a frame made ahead is waited for at most this long when its state is asked for while it
#: is being made (it is then nearly done; making it again would take longer)
WAIT_SECONDS = 1.0


def next_step(before: ViewState, after: ViewState, dims: tuple[str, ...]) -> tuple[str, int] | None:
    """``(dim, step)`` when ``after`` differs from ``before`` in one slider index only (pure)."""
    if before.evolve(indices=dict(after.indices)) != after:
        return None  # the view, the size or another setting changed too
    moved = [(d, after.index(d) - before.index(d)) for d in dims if after.index(d) != before.index(d)]
    return moved[0] if len(moved) == 1 else None


class FramesAhead:
    """One frame made ahead at a time: ``want`` it, ``take_job``/``make`` on the controller's
    thread, ``take`` it when its state is asked for. Counters: ``made``, ``used``."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._job: tuple[ViewState, Any] | None = None
        self._making: tuple[ViewState, Any] | None = None
        self._made: tuple[ViewState, Any, Frame] | None = None
        self.made = self.used = 0

    def want(self, state: ViewState, settings: Any) -> None:
        """Make the frame of ``state`` with colour ``settings`` next (replaces an older wish)."""
        with self._cond:
            if self._made is not None and self._made[:2] == (state, settings):
                return
            self._job = (state, settings)
            self._cond.notify_all()

    @property
    def has_job(self) -> bool:
        return self._job is not None

    def drop(self) -> None:
        with self._cond:
            self._job = self._made = None

    def take_job(self) -> tuple[ViewState, Any] | None:
        """The wish to make now, or None (the controller's thread)."""
        with self._cond:
            job, self._job = self._job, None
            self._making = job
            return job

    def make(self, job: tuple[ViewState, Any], fn: Callable[[ViewState], Frame | None]) -> None:
        """Make the frame of ``job`` with ``fn`` (None: not made, e.g. a chunk is not cached)."""
        try:
            frame = fn(job[0])
        finally:
            with self._cond:
                self._making = None
                self._cond.notify_all()
        if frame is not None:
            with self._cond:
                self._made = (job[0], job[1], frame)
                self.made += 1
                self._cond.notify_all()

    def take(self, state: ViewState, settings: Any, target: ViewRequest) -> Frame | None:
        """The frame made ahead for ``state`` and ``settings``, restamped as ``target`` (the
        request that shows it now: the same read, this generation), or None."""
        with self._cond:
            if self._making == (state, settings):
                self._cond.wait_for(lambda: self._making != (state, settings), WAIT_SECONDS)
            made, self._made = self._made, None
        if made is None or made[:2] != (state, settings):
            return None
        frame = made[2]
        if replace(frame.request, generation=target.generation) != target:
            return None  # another read (a level, a size) than the one wanted now
        frame = replace(frame, request=target)
        with self._cond:
            self.used += 1
        return frame
