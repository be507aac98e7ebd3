"""One look-ahead loop for every reader that knows its order in advance.

``look_ahead(items, issue, wait, ahead=n, hint=...)`` yields ``(item, wait(item, handle))``
in order while it keeps ``n`` items issued ahead of the consumer and hints the next ``2 n``
(issued ones included) so that a disk can start on them early: *hint 2 x ahead, issue
ahead, wait on the head*. ``ahead`` may be a function, asked again before each item (the
engine's concurrency grows as it measures a slow link). ``Engine.stream``, the loader's block reads and the reductions'
local reads all run on it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Iterable
from typing import TypeVar

T = TypeVar("T")
H = TypeVar("H")
R = TypeVar("R")


def look_ahead(
    items: Iterable[T],
    issue: Callable[[T], H],
    wait: Callable[[T, H], R],
    *,
    ahead: int | Callable[[], int],
    hint: Callable[[list[T]], None] | None = None,
    abandon: Callable[[H], object] | None = None,
    issue_many: Callable[[list[T]], list[H]] | None = None,
) -> Generator[tuple[T, R], None, None]:
    """Yield ``(item, wait(item, issue(item)))`` for each item, ``ahead`` issued in advance.

    ``hint(batch)`` is called with items not hinted before, up to ``2 * ahead`` past the
    head. When the consumer stops early, ``abandon(handle)`` is called for every handle
    issued but not waited on. ``issue_many(items)``: issue several at once (their handles
    in order); then the look-ahead refills only when half of it is used, in one call, so
    that reads the engine may batch (inner chunks of one shard) are queued together.
    """
    fixed = 0 if callable(ahead) else max(1, int(ahead))
    pending: deque[tuple[T, H]] = deque()
    hinted: deque[T] = deque()
    it = iter(items)
    exhausted = False
    try:
        while True:
            ahead_now = fixed or max(1, int(ahead()))  # type: ignore[operator]
            fresh: list[T] = []
            while not exhausted and len(pending) + len(hinted) < 2 * ahead_now:
                try:
                    item = next(it)
                except StopIteration:
                    exhausted = True
                    break
                hinted.append(item)
                fresh.append(item)
            if fresh and hint is not None:
                hint(fresh)
            if issue_many is not None:
                if hinted and len(pending) <= ahead_now // 2:
                    batch = [hinted.popleft() for _ in range(min(len(hinted), ahead_now - len(pending)))]
                    pending.extend(zip(batch, issue_many(batch)))
            else:
                while hinted and len(pending) < ahead_now:
                    item = hinted.popleft()
                    pending.append((item, issue(item)))
            if not pending:
                return
            item, handle = pending.popleft()
            yield item, wait(item, handle)
    finally:
        if abandon is not None:
            for _, handle in pending:
                abandon(handle)
        pending.clear()
