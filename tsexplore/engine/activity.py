"""Visible activity: while something on screen is being made, background work waits.

"Visible reads win" has two halves, both on the one priority path:

- the read table does not *start* a PLANNED or SPECULATIVE read of a kind (sync, async) while
  a VISIBLE read of that kind is queued or running (:meth:`ReadTable.take_runnable
  <tsexplore.engine.reads.ReadTable.take_runnable>`, ``hold_below_visible``);
- a background consumer (a reduction, a region's statistics: :meth:`Engine.stream
  <tsexplore.engine.Engine.stream>`) pauses between chunks while :class:`VisibleActivity`
  says the screen is busy (:meth:`VisibleActivity.wait_quiet`): VISIBLE reads are queued or
  running, or a view holds the activity (a view controller from a view change until its
  frame is delivered), or the last hold ended less than ``grace`` seconds ago (the user is
  likely to move again, and the frame is still on its way to the screen). A pause lasts at
  most ``max_wait`` seconds per chunk, so background work always moves on.

No widget is imported here: views hold the activity by a name of their own (their channel).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

#: how often a waiting consumer looks again at the read table (a VISIBLE read cancelled
#: rather than finished wakes nobody)
POLL_SECONDS = 0.05


class VisibleActivity:
    """Holds by views, VISIBLE reads in the table, and the pause of background consumers.

    ``reads_active()`` says whether VISIBLE reads are queued or running (the read table's
    count, read without its lock). ``grace`` and ``max_wait`` are read from
    :mod:`tsexplore.config` (``visible_grace``, ``background_wait``) unless given.
    Counters: ``pauses`` (consumers that waited), ``paused_seconds``, ``waiting`` (now).
    """

    def __init__(self, reads_active: Callable[[], bool], *, settings: Callable[[], Any] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 grace: float | None = None, max_wait: float | None = None) -> None:
        self._reads_active = reads_active
        self._settings_now = settings
        self._clock = clock
        self._cond = threading.Condition()
        self._holds: set[Hashable] = set()
        self._quiet_at = 0.0
        self._grace = grace
        self._max_wait = max_wait
        self.pauses = 0
        self.paused_seconds = 0.0
        #: consumers waiting now
        self.waiting = 0

    def _settings(self) -> tuple[bool, float, float]:
        if self._settings_now is None:
            return True, self._grace or 0.0, self._max_wait or 0.0
        s = self._settings_now()
        grace = s.visible_grace if self._grace is None else self._grace
        wait = s.background_wait if self._max_wait is None else self._max_wait
        return bool(s.visible_first), float(grace), float(wait)

    # -- views -------------------------------------------------------------------------------
    def hold(self, owner: Hashable) -> None:
        """``owner`` is making something visible (idempotent: one hold per owner)."""
        with self._cond:
            self._holds.add(owner)

    def release(self, owner: Hashable) -> None:
        """``owner`` is done; once no one holds, background work waits ``grace`` more."""
        with self._cond:
            if owner not in self._holds:
                return
            self._holds.discard(owner)
            if not self._holds:
                self._quiet_at = self._clock() + self._settings()[1]
            self._cond.notify_all()

    def notify(self) -> None:
        """A VISIBLE read ended: waiting consumers look again."""
        with self._cond:
            self._cond.notify_all()

    # -- background consumers ----------------------------------------------------------------
    def busy(self) -> bool:
        """Whether background work should wait now."""
        if self._reads_active():
            return True
        with self._cond:
            return bool(self._holds) or self._clock() < self._quiet_at

    def wait_quiet(self, max_wait: float | None = None) -> float:
        """Wait while :meth:`busy`, at most ``max_wait`` seconds (default: ``background_wait``);
        returns the seconds waited (0.0 when nothing visible was going on)."""
        enabled, _, wait = self._settings()
        if not enabled or not self.busy():
            return 0.0
        limit = wait if max_wait is None else float(max_wait)
        start = self._clock()
        deadline = start + limit
        with self._cond:
            self.waiting += 1
        try:
            self._wait_until_quiet(deadline)
        finally:
            waited = self._clock() - start
            with self._cond:
                self.waiting -= 1
                self.pauses += 1
                self.paused_seconds += waited
        return waited

    def _wait_until_quiet(self, deadline: float) -> None:
        while True:
            now = self._clock()
            if now >= deadline:
                break
            reads = self._reads_active()
            with self._cond:
                if not reads and not self._holds and now >= self._quiet_at:
                    break
                if reads:  # woken when one ends (a cancelled one: at the next look)
                    until = now + POLL_SECONDS
                elif self._holds:  # woken by the release
                    until = deadline
                else:  # the grace after the last release
                    until = self._quiet_at
                self._cond.wait(max(0.0, min(until, deadline) - now))

    @property
    def holders(self) -> int:
        with self._cond:
            return len(self._holds)

    def __repr__(self) -> str:
        return (f"<VisibleActivity holds={self.holders} pauses={self.pauses} "
                f"paused={self.paused_seconds:.2f} s>")
