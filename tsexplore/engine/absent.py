"""Absent chunks: a store without a chunk reads as its fill value (``missing="fill"``).

The Zarr spec, zarr-python and xarray read a chunk the store does not have as the fill value
(zarr writes no chunk equal to it), so a sparse store is ordinary. The engine does the same
for sources built with ``missing="fill"`` (the default), counts each one (``missing_filled``)
and remembers which chunks were absent, so the chunk map can show them as absent rather than
as data (the check stage of :mod:`~tsexplore.engine.execute` fills and records them).
``missing="raise"`` keeps the :class:`~tsexplore.errors.MissingChunkError`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ..sources.base import ChunkIndex


class AbsentChunks:
    """The chunks found absent, per source token; thread-safe and bounded.

    At most ``max_entries`` indices are kept; past that, the sources seen longest ago are
    forgotten first (the chunk map then shows their chunks as plain cached fill values).
    """

    def __init__(self, max_entries: int = 1 << 18) -> None:
        self.max_entries = int(max_entries)
        self._lock = threading.Lock()
        self._by_token: OrderedDict[str, set[ChunkIndex]] = OrderedDict()
        self._count = 0

    def add(self, token: str, index: ChunkIndex) -> None:
        with self._lock:
            found = self._by_token.setdefault(token, set())
            self._by_token.move_to_end(token)
            if index in found:
                return
            found.add(tuple(index))
            self._count += 1
            while self._count > self.max_entries and len(self._by_token) > 1:
                _, dropped = self._by_token.popitem(last=False)
                self._count -= len(dropped)

    def indices(self, token: str) -> frozenset[ChunkIndex]:
        """The chunk indices of ``token`` that were read as absent."""
        with self._lock:
            return frozenset(self._by_token.get(token, ()))

    def __len__(self) -> int:
        return self._count

