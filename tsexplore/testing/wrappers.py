"""Test-kit sources that add behaviour by *wrapping* another source (as zarr's WrapperStore).

>>> slow = LatencySource(tse.synthetic((100, 64, 64), (1, 64, 64)).data.tse.sources[0], 0.05)
>>> counted = CountingSource(slow)
>>> tse.get_engine().fetch(counted, [(0, 0, 0)]); counted.reads
1

Every wrapper delegates its geometry (``shape``, ``dtype``, ``dims``, ``chunks``, ...) to the
wrapped source and has a token of its own, so its chunks never share cache entries with the
inner source (a counting wrapper would otherwise see the inner source's cached chunks as
hits and count nothing). A wrapper reads for itself, on the engine's loop: it reads the
wrapped source through the engine's stages (``ctx.read``), whatever that source is.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ChunkReadError
from ..sources.base import ChunkIndex, ChunkSource, ReadContext

__all__ = ["CountingSource", "FaultySource", "LatencySource", "WrapperSource"]

_GEOMETRY = ("shape", "dtype", "dims", "chunks", "fill_value", "attrs", "encoding", "options", "is_async")


class WrapperSource(ChunkSource):
    """A source that forwards everything to ``source``; subclasses change ``read_chunk_async``.

    Attributes not defined on the wrapper (``path``, ``evaluate``, ``name``...) are read
    from the wrapped source.
    """

    def __init__(self, source: ChunkSource) -> None:
        self._inner = source
        for name in _GEOMETRY:
            setattr(self, name, getattr(source, name))
        self.name = getattr(source, "name", "data")
        self.token = f"{type(self).__name__.lower()}-{uuid.uuid4().hex[:12]}:{source.token}"

    @property
    def inner(self) -> ChunkSource:
        """The wrapped source."""
        return self._inner

    #: reads on the engine's loop (through ``ctx.read``), in the wrapped source's lane
    awaits = True

    def __getattr__(self, name: str) -> Any:
        # only called when normal lookup fails; guard against recursion during unpickling
        if name == "_inner" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    async def read_chunk_async(self, index: ChunkIndex, ctx: ReadContext) -> tuple[np.ndarray, int]:
        return await ctx.read(self._inner, index)

    def close(self) -> None:
        self._inner.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self._inner!r}>"


class LatencySource(WrapperSource):
    """Every read waits ``seconds`` before reading the wrapped source (a slow store).

    The wait is an ``asyncio.sleep`` on the engine's loop, so it holds no thread.
    """

    def __init__(self, source: ChunkSource, seconds: float) -> None:
        super().__init__(source)
        if seconds < 0:
            from ..errors import ConfigError

            raise ConfigError(f"latency must be >= 0 seconds, got {seconds}")
        self.seconds = float(seconds)

    async def read_chunk_async(self, index: ChunkIndex, ctx: ReadContext) -> tuple[np.ndarray, int]:
        if self.seconds:
            await asyncio.sleep(self.seconds)
        return await ctx.read(self._inner, index)


class _Tally:
    """The counters of a :class:`CountingSource`, shared by its copies (``with_options``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reads = 0
        self.active = 0
        self.max_active = 0
        self.counts: Counter[ChunkIndex] = Counter()
        self.order: list[ChunkIndex] = []

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.lock = threading.Lock()


class CountingSource(WrapperSource):
    """Counts the reads that reach it: ``reads`` in total, ``counts[index]`` per chunk.

    A read is counted when it starts, whether it succeeds or not; ``order`` lists the indices
    in the order their reads started; ``active`` is the number running now and ``max_active``
    the most that ever ran at once. Copies made by ``with_options`` (``open_dataset(src,
    prefetch=...)``) count into the same counters.
    """

    def __init__(self, source: ChunkSource) -> None:
        super().__init__(source)
        self._tally = _Tally()

    reads = property(lambda self: self._tally.reads, doc="reads started")
    active = property(lambda self: self._tally.active, doc="reads running now")
    max_active = property(lambda self: self._tally.max_active, doc="most reads ever running at once")
    counts = property(lambda self: self._tally.counts, doc="reads started per chunk index")
    order = property(lambda self: self._tally.order, doc="chunk indices in the order read")

    async def read_chunk_async(self, index: ChunkIndex, ctx: ReadContext) -> tuple[np.ndarray, int]:
        index = tuple(int(i) for i in index)
        tally = self._tally
        with tally.lock:
            tally.reads += 1
            tally.counts[index] += 1
            tally.order.append(index)
            tally.active += 1
            tally.max_active = max(tally.max_active, tally.active)
        try:
            return await ctx.read(self._inner, index)
        finally:
            with tally.lock:
                tally.active -= 1

    def reset(self) -> None:
        """Zero the counters."""
        tally = self._tally
        with tally.lock:
            tally.reads = 0
            tally.counts.clear()
            tally.order.clear()
            tally.max_active = tally.active


class FaultySource(WrapperSource):
    """Fails chosen chunks: ``fail={index: exception}`` raises it on every read of ``index``;
    ``fail={index: n}`` raises ``error`` (a transient ChunkReadError by default) on the first
    ``n`` reads and then reads normally.
    """

    def __init__(
        self,
        source: ChunkSource,
        fail: Mapping[ChunkIndex, BaseException | type[BaseException] | int],
        error: type[BaseException] = ChunkReadError,
    ) -> None:
        super().__init__(source)
        self._lock = threading.Lock()
        self.error = error
        self.fail: dict[ChunkIndex, Any] = {tuple(int(i) for i in k): v for k, v in fail.items()}
        self.failures: Counter[ChunkIndex] = Counter()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    async def read_chunk_async(self, index: ChunkIndex, ctx: ReadContext) -> tuple[np.ndarray, int]:
        index = tuple(int(i) for i in index)
        with self._lock:
            rule = self.fail.get(index)
            exc: BaseException | None = None
            if isinstance(rule, bool) or rule is None:
                pass
            elif isinstance(rule, int):
                if rule > 0:
                    self.fail[index] = rule - 1
                    exc = self.error(f"injected transient failure of chunk {index}")
            elif isinstance(rule, BaseException):
                exc = rule
            elif isinstance(rule, type) and issubclass(rule, BaseException):
                exc = rule(f"injected failure of chunk {index}")
            if exc is not None:
                self.failures[index] += 1
        if exc is not None:
            raise exc
        return await ctx.read(self._inner, index)
