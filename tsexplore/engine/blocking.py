"""The blocking helpers: wait for chunk reads from an ordinary thread, always with a timeout.

:func:`wait_all` waits for futures the scheduler handed out. :class:`BlockingReads` gives the
engine ``fetch`` (these chunks, now) and ``stream`` (this order, with PLANNED reads kept in
flight ahead of the consumer, on :func:`~tsexplore.engine.lookahead.look_ahead`). Called on
one of the engine's own read threads (a source that reads engine data), both read inline
instead of queueing behind themselves.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from .. import config
from ..errors import ReadTimeoutError
from ..sources.base import ChunkIndex, ChunkSource
from .lookahead import look_ahead
from .loop import on_read_thread
from .types import Priority


def wait_all(futures: Sequence[cf.Future], timeout: float | None = None) -> list[np.ndarray]:
    """Wait for every future (bounded by ``timeout``) and return their results in order."""
    if len(futures) == 1 and futures[0].done():
        return [futures[0].result()]
    timeout = config.get().wait_timeout if timeout is None else timeout
    if len(futures) == 1:  # the future's own wait: cheaper than cf.wait's waiters
        try:
            return [futures[0].result(timeout)]
        except cf.TimeoutError:
            if futures[0].done():  # the read itself failed with a timeout: its own error
                raise
            raise ReadTimeoutError(
                f"a chunk read did not finish within {timeout} s; "
                "raise tse.config.set(wait_timeout=...) or check the store"
            ) from None
    done, not_done = cf.wait(futures, timeout, return_when=cf.FIRST_EXCEPTION)
    for fut in futures:
        if fut in done and not fut.cancelled() and fut.exception() is not None:
            raise fut.exception()  # type: ignore[misc]
    if not_done:
        raise ReadTimeoutError(
            f"{len(not_done)} of {len(futures)} chunk reads did not finish within {timeout} s; "
            "raise tse.config.set(wait_timeout=...) or check the store"
        )
    return [f.result() for f in futures]


class BlockingReads:
    """``fetch`` and ``stream`` for an engine (mixed into :class:`~tsexplore.engine.Engine`)."""

    # provided by the engine
    request: Any
    count_useful: Any
    read_inline: Any
    hints: Any
    check_blocking_allowed: Any
    cache: Any
    activity: Any
    _io_threads: int

    def fetch(
        self,
        source: ChunkSource,
        indices: Sequence[ChunkIndex],
        priority: Priority = Priority.VISIBLE,
        *,
        timeout: float | None = None,
        channel: str | None = None,
        generation: int | None = None,
    ) -> list[np.ndarray]:
        """Request chunks and wait for all of them (raising the first error)."""
        self.check_blocking_allowed()
        if on_read_thread():
            return [self.read_inline(source, i) for i in indices]
        futures = self.request(source, indices, priority, channel=channel, generation=generation)
        chunks = wait_all(futures, timeout)
        self.count_useful(sum(getattr(c, "nbytes", 0) for c in chunks))
        return chunks

    def stream_ahead(self, source: ChunkSource) -> int:
        """Reads a stream keeps issued: enough to keep the I/O pipe full (remote: twice the
        engine's concurrency), without letting them exceed a quarter of the cache budget."""
        per = max(1, source.chunk_nbytes())
        limit = max(2, self.cache.budget // 4 // per)
        # remote: twice the reads in flight, so a slow head of the line leaves the link busy
        want = max(2 * self._io_threads, 2 * self.concurrency("async") if source.is_async else 0)  # type: ignore[attr-defined]
        return int(max(2, min(want, limit)))

    def stream(
        self,
        source: ChunkSource,
        order: Iterable[ChunkIndex],
        *,
        ahead: int | None = None,
        timeout: float | None = None,
        cache: bool = True,
        background: bool = True,
    ) -> Iterator[tuple[ChunkIndex, np.ndarray]]:
        """Yield ``(index, chunk)`` in ``order``, keeping up to ``ahead`` PLANNED reads in flight.

        ``ahead`` defaults to :meth:`stream_ahead`. This is how reductions and loaders
        announce their plan to the engine; the chunks after the reads in flight are hinted to
        the source. ``cache=False``: a one-pass scan; chunks read for it are not kept in the
        cache (chunks already cached are still used). ``background`` (default): visible work
        wins -- each chunk is handed over only once no view is busy (at most
        ``tse.config`` ``background_wait`` seconds later; see :mod:`.activity`), as the
        stream's reads start only when no VISIBLE read is queued or running.
        """
        self.check_blocking_allowed()
        indices = (tuple(int(i) for i in index) for index in order)
        if on_read_thread():
            for index in indices:
                yield index, self.read_inline(source, index)
            return

        def issue(index: ChunkIndex) -> cf.Future:
            return self.request(source, [index], Priority.PLANNED, cache=cache)[0]  # type: ignore[no-any-return]

        def wait(index: ChunkIndex, fut: cf.Future) -> np.ndarray:
            chunk = wait_all([fut], timeout)[0]
            self.count_useful(getattr(chunk, "nbytes", 0))
            if background:  # the consumer's work on it waits while a view is busy
                self.activity.wait_quiet()
            return chunk

        # reads still in flight when the consumer stops finish and fill the cache; their
        # futures are shared (another request may have joined them), so none is cancelled
        # a remote source's depth follows the engine's concurrency as it learns the link
        depth: Any = ahead or self.stream_ahead(source)
        if not ahead and source.is_async:
            depth = lambda: self.stream_ahead(source)  # noqa: E731
        many = None
        if source.coalesces:  # inner chunks of one shard: queue them together, to batch
            def many(batch: list[ChunkIndex]) -> list[cf.Future]:
                return self.request(source, batch, Priority.PLANNED, cache=cache)  # type: ignore[no-any-return]

        yield from look_ahead(
            indices, issue, wait, ahead=depth,
            hint=lambda batch: self.hints.advise(source, batch), issue_many=many,
        )
