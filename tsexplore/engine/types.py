"""The engine's request vocabulary: what is read (:class:`ChunkRequest`, from the sources'
:mod:`~tsexplore.sources.requests`) and who wants it, how much (:class:`Priority`, the
channel and generation that own it, whether to keep it): this travels beside the request in
the read table, never in the request."""

from __future__ import annotations

from enum import IntEnum

from ..sources.requests import (
    STORED,
    WHOLE,
    AuxKey,
    Blocks,
    Box,
    ChunkIndex,
    ChunkRequest,
    Part,
    Stored,
    Whole,
)


class Priority(IntEnum):
    """Lower value runs first: what is on screen, then known plans, then prefetch guesses."""

    VISIBLE = 0
    PLANNED = 1
    SPECULATIVE = 2


#: who owns a request: ``(channel, generation)``; a newer generation of a channel cancels
#: the queued reads only older ones wanted
Owner = tuple[str, int]

__all__ = [
    "STORED", "WHOLE", "AuxKey", "Blocks", "Box", "ChunkIndex", "ChunkRequest", "Owner", "Part",
    "Priority", "Stored", "Whole",
]
