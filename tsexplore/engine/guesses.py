"""How far the prefetcher may guess: an allowance earned by guesses that readers used.

A prefetch guess (a SPECULATIVE read) costs a read and a decode whether or not anyone wants
it; on access without a pattern (random slider jumps) guessing only competes with the reads
someone waits for. So each source and policy has a :class:`Guesses` record, run like TCP's
congestion window (additive increase, multiplicative decrease):

- the *allowance* is how many guesses may be outstanding (issued and not yet used);
- every guess a reader then used raises it by one (so it doubles per round while guesses are
  right: the look-ahead ramps up within a few frames);
- a guess still unused :data:`HORIZON_OBSERVATIONS` views (or :data:`HORIZON_SECONDS`)
  after it was made counts as wrong; an observation that settles more wrong guesses than
  right ones halves the allowance -- down to zero, where the policy stays off;
- a policy that sees a *steady* pattern (several equal steps the same way) may always make
  a few guesses (one after three steps, a view's worth after four: random jumps make three
  about once in a hundred views, four once in a thousand), so a pattern that returns earns
  its allowance back within a few views.

Guesses cancelled before they ran (the reader moved to a new view) cost nothing and count
neither way.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import Any

HORIZON_OBSERVATIONS = 8
HORIZON_SECONDS = 5.0
MAX_ALLOWANCE = 4096


class Guesses:
    """One source's guesses under one policy, and the allowance they earned."""

    def __init__(self, initial: int) -> None:
        self._lock = threading.Lock()  # views are observed from the reader's and the loop's threads
        self.allowance = initial
        self.observations = 0
        self._used_seen = 0
        self._pending: deque[tuple[int, float, Hashable]] = deque()
        self._keys: set[Hashable] = set()
        self.right = 0
        self.wrong = 0

    def settle(self, used_total: int, unused: Callable[[Any], bool]) -> None:
        """One more view seen: ``used_total`` is the source's running count of used guesses,
        ``unused(key)`` whether a guess is still waiting for a reader."""
        with self._lock:
            self.observations += 1
            gained = max(0, used_total - self._used_seen)
            self._used_seen = used_total
            self.right += gained
            if gained:
                self.allowance = min(MAX_ALLOWANCE, self.allowance + gained)
            old_obs = self.observations - HORIZON_OBSERVATIONS
            old_time = time.monotonic() - HORIZON_SECONDS
            failed = 0
            pending = self._pending
            while pending and (pending[0][0] <= old_obs or pending[0][1] < old_time):
                _, _, key = pending.popleft()
                self._keys.discard(key)
                if unused(key):
                    failed += 1
            self.wrong += failed
            if failed > gained:
                self.allowance //= 2

    def room(self, steady: int | bool, unused: Callable[[Any], bool]) -> int:
        """How many new guesses may be made now: what the allowance leaves, and at least
        ``steady`` (a steady pattern's probe) whatever the record."""
        with self._lock:
            outstanding = sum(1 for _, _, key in self._pending if unused(key))
            return max(int(steady), self.allowance - outstanding)

    def guessed(self, key: Hashable) -> bool:
        """Whether ``key`` was guessed already (still pending; a set look-up, without the
        lock: a guess made meanwhile is at worst asked for twice, and the read table joins
        the two)."""
        return key in self._keys

    def made(self, keys: Iterable[Hashable]) -> None:
        """Record guesses just issued."""
        now = time.monotonic()
        with self._lock:
            for key in keys:
                self._pending.append((self.observations, now, key))
                self._keys.add(key)

    def __repr__(self) -> str:
        return (
            f"<Guesses allowance={self.allowance} pending={len(self._pending)} "
            f"right={self.right} wrong={self.wrong}>"
        )
