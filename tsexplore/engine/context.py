"""The engine context: the settings in force and the services every read is given.

Like TensorStore's ``Context``: resources and settings live in one object passed to what uses
them, not in globals read at many sites. The engine makes one from ``tse.config`` when it
starts; ``tse.config.set(...)`` updates the running engine's context (:meth:`EngineContext.update`,
called by the engine's config watcher), so a new timeout applies to the next read. Below the
engine, a read sees it as a :class:`~tsexplore.sources.base.ReadContext`: ``settings``,
``count(name, n)`` (the engine's counters) and ``read(source, index)`` (a nested read through
the same stages: a test wrapper reading the source it wraps).

Each source reads over one :class:`~tsexplore.sources.link.LinkModel`: its byte store's, or,
for a source that reads itself, one the context keeps for it (:meth:`EngineContext.link`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from ..config import Settings
from ..sources.base import ChunkSource
from ..sources.link import LinkModel
from .types import ChunkIndex

#: link models of sources that read themselves, kept (the oldest forgotten first)
LINKS = 1024


class EngineContext:
    """Settings and services for reads (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        count: Callable[[str, int], None],
        nested: Callable[[ChunkSource, ChunkIndex], Awaitable[tuple[np.ndarray, int]]] | None = None,
    ) -> None:
        self.settings = settings
        self._count = count
        self._nested = nested
        self._links: OrderedDict[str, LinkModel] = OrderedDict()

    def update(self, settings: Settings) -> None:
        """Take new settings (``tse.config.set``); reads that start later use them."""
        self.settings = settings

    def count(self, name: str, n: int = 1) -> None:
        self._count(name, n)

    async def read(self, source: ChunkSource, index: ChunkIndex) -> tuple[np.ndarray, int]:
        assert self._nested is not None, "nested reads need the engine"
        return await self._nested(source, index)

    def link(self, source: ChunkSource) -> LinkModel:
        """The link model ``source`` reads over."""
        store = source.store
        if store is not None:
            return store.link  # type: ignore[no-any-return]
        links = self._links
        found = links.get(source.token)
        if found is None:
            found = links[source.token] = LinkModel()
            if len(links) > LINKS:
                links.popitem(last=False)
        return found

    def lane(self, source: ChunkSource) -> Any:
        """Where reads of ``source`` take their slots: ``"sync"`` (the read threads) or the
        link model of an asynchronous store (its own concurrency)."""
        return self.link(source) if source.is_async else "sync"
