"""The engine's small shared types: request priorities and the read request."""

from __future__ import annotations

from enum import Enum, IntEnum
from typing import NamedTuple

from ..sources.base import ChunkIndex


class Priority(IntEnum):
    """Lower value runs first: what is on screen, then known plans, then prefetch guesses."""

    VISIBLE = 0
    PLANNED = 1
    SPECULATIVE = 2


class Held(Enum):
    """What of a chunk's stored (undecoded) form a request names."""

    #: the chunk's stored bytes (read ahead undecoded; kept in the cache's encoded tier)
    STORED = "stored"
    #: the header and block table of a blosc frame (encoded tier only, never read alone)
    HEAD = "head"


STORED = Held.STORED
HEAD = Held.HEAD

#: a box of a chunk, ``(lo, hi)`` per dimension: a part read decodes only its blosc blocks
Box = tuple[tuple[int, int], ...]
#: what of a chunk a request is for: None, the whole chunk decoded; a :data:`Box`, the blosc
#: blocks of that box decoded; a :class:`Held` value, stored bytes
Part = Box | Held | None


class ReadKey(NamedTuple):
    """One read request, and its identity in the cache and the read table: the source's
    token, the chunk index, and what of the chunk (:data:`Part`). A tuple, so hashing and
    comparing cost what they cost for a tuple; the whole chunk's key is ``(token, index,
    None)``."""

    token: str
    index: ChunkIndex  # type: ignore[assignment]  # (a field: tuple's .index is not used)
    part: Part = None

    @property
    def box(self) -> Box | None:
        """The box a part read decodes (None: the whole chunk, or stored bytes)."""
        part = self.part
        return part if isinstance(part, tuple) else None

    @property
    def whole(self) -> ReadKey:
        """The key of the whole decoded chunk."""
        return self if self.part is None else ReadKey(self.token, self.index)

    @property
    def stored(self) -> ReadKey:
        """The key of the chunk's stored bytes (in the encoded tier)."""
        return ReadKey(self.token, self.index, STORED)

    @property
    def head(self) -> ReadKey:
        """The key of the chunk's blosc head (in the encoded tier)."""
        return ReadKey(self.token, self.index, HEAD)


#: the former name of :class:`ReadKey`
ChunkKey = ReadKey

__all__ = ["HEAD", "STORED", "Box", "ChunkIndex", "ChunkKey", "Held", "Part", "Priority", "ReadKey"]
