"""The engine's small shared types: request priorities and cache keys."""

from __future__ import annotations

from enum import IntEnum

from ..sources.base import ChunkIndex


class Priority(IntEnum):
    """Lower value runs first: what is on screen, then known plans, then prefetch guesses."""

    VISIBLE = 0
    PLANNED = 1
    SPECULATIVE = 2


#: a chunk's identity in the cache and the read table: (source token, chunk index)
ChunkKey = tuple[str, ChunkIndex]

__all__ = ["ChunkIndex", "ChunkKey", "Priority"]
