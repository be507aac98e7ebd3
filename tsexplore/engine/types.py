"""The engine's small shared types: request priorities and cache keys."""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from ..sources.base import ChunkIndex


class Priority(IntEnum):
    """Lower value runs first: what is on screen, then known plans, then prefetch guesses."""

    VISIBLE = 0
    PLANNED = 1
    SPECULATIVE = 2


#: a chunk's identity in the cache and the read table: ``(source token, chunk index)``, or
#: ``(source token, chunk index, part)`` for a part of it (a box of its blosc blocks; its
#: stored bytes): see :mod:`.parts`
ChunkKey = tuple[Any, ...]

__all__ = ["ChunkIndex", "ChunkKey", "Priority"]
