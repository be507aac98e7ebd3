"""The vocabulary of a read: what is asked for, and where its bytes are.

A :class:`ChunkRequest` names one chunk of one array (the source's token and the chunk's grid
index) and what of it: its decoded values (:data:`WHOLE`), the decoded values of a box of it
read from only the blosc blocks that hold the box (:class:`Blocks`), or its stored bytes,
undecoded (:data:`STORED`). A box of a zstd chunk is a :class:`Blocks` request too: its
stream's front, decoded as far as the box's end. An inner chunk of a sharded array is a whole
request on the inner grid. Requests are frozen and compare equal only to requests: they key
the read table and the cache. Who wants a read and how much (priority, owner,
keep-in-cache) travels beside it, never in it.

An :class:`AuxKey` names what a store holds besides chunks that a read needs first to find a
chunk's bytes: a blosc frame's head (header and block table), a shard's index, a file's chunk
index. It lives in the cache's encoded tier.

A source answers a request with where its bytes are (:class:`Located`: an object of its byte
store, whole or by byte ranges; or that the store has no such chunk), or with the auxiliary
entry it needs to say so (:class:`NeedAux`). What decoding leaves to go on from later (a zstd
chunk's decoded front and its decoder: :class:`Resumable`) travels in ``Located.how`` and is
kept in the encoded tier; a decode whose bytes ended too early asks for more
(:class:`MoreBytes`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ChunkIndex = tuple[int, ...]
#: a box of a chunk: ``(lo, hi)`` per dimension, in chunk-local coordinates
Box = tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True, eq=False)
class Whole:
    """The whole chunk, decoded. One instance, :data:`WHOLE` (compared by identity)."""

    def __reduce__(self) -> str:
        return "WHOLE"  # unpickled as the one instance


@dataclass(frozen=True, slots=True, eq=False)
class Stored:
    """The chunk's bytes as stored (kept in the encoded tier; decoded by later reads). One
    instance, :data:`STORED` (compared by identity)."""

    def __reduce__(self) -> str:
        return "STORED"  # unpickled as the one instance


@dataclass(frozen=True, slots=True)
class Blocks:
    """A box of the chunk, decoded from only the part of its stored bytes that holds it: the
    blosc blocks that hold it, or the front of a zstd stream as far as the box's end."""

    box: Box


WHOLE = Whole()
STORED = Stored()
Part = Whole | Blocks | Stored


@dataclass(frozen=True, slots=True, eq=False)
class ChunkRequest:
    """One read: chunk ``index`` of the array whose token is ``array``, and what of it.

    Its hash is worked out once: a request keys the cache, the read table and the
    prefetcher's records, each of which hashes it again."""

    array: str
    index: ChunkIndex
    part: Part = WHOLE
    _hash: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.array, self.index, self.part)))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if other.__class__ is not ChunkRequest:
            return NotImplemented
        return (self._hash == other._hash and self.array == other.array  # type: ignore[attr-defined]
                and self.index == other.index and self.part == other.part)  # type: ignore[attr-defined]

    def __reduce__(self) -> tuple[Any, ...]:
        return ChunkRequest, (self.array, self.index, self.part)

    @property
    def whole(self) -> ChunkRequest:
        return self if self.part is WHOLE else ChunkRequest(self.array, self.index)

    @property
    def stored(self) -> ChunkRequest:
        return ChunkRequest(self.array, self.index, STORED)

    @property
    def box(self) -> Box | None:
        """The box a :class:`Blocks` request decodes (None for the others)."""
        part = self.part
        return part.box if isinstance(part, Blocks) else None


@dataclass(frozen=True, slots=True)
class AuxKey:
    """Something a store holds that locates chunks: ``kind`` of array ``array`` at ``at``
    (a blosc head at a chunk index, a shard index at shard coordinates)."""

    array: str
    kind: str
    at: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Located:
    """Where a request's bytes are: object ``key`` of the source's byte store, whole
    (``ranges`` None) or these byte ranges of it; ``key`` None: the store has no such chunk
    (the fill value, or ``MissingChunkError``). ``how`` is what decoding them needs besides
    the bytes (a blosc head)."""

    key: str | None
    ranges: tuple[Any, ...] | None = None
    how: Any = None


@dataclass(frozen=True, slots=True)
class NeedAux:
    """The request cannot be located before ``aux`` is read: bytes ``rng`` of object ``key``
    (the source parses them, :meth:`~.base.ChunkSource.parse_aux`)."""

    aux: AuxKey
    key: str
    rng: Any


class Resumable:
    """What decoding a part leaves to go on from later: a stream's decoded front and the
    decoder's state (:class:`~.zstd_front.Front`). The pipeline keeps it in the encoded tier
    under ``aux``, counted for ``nbytes``, once a decode went on with it; once ``whole`` is
    set (the stream decoded to its end: the chunk's values), the whole chunk in the decoded
    tier instead."""

    __slots__ = ()
    aux: AuxKey
    whole: Any

    @property
    def nbytes(self) -> int:
        raise NotImplementedError


class MoreBytes(Exception):  # noqa: N818 - a signal to read again, not an error
    """The bytes read end before the part does (an estimate of a stream's front came out
    short): read ``located`` too and decode again."""

    def __init__(self, located: Located) -> None:
        super().__init__("the stored bytes read end before the part")
        self.located = located


#: a source that reads its chunks itself (npy, NetCDF, images, synthetic, memory, zarr's API)
SELF = Located("<self>")

__all__ = [
    "SELF", "STORED", "WHOLE", "AuxKey", "Blocks", "Box", "ChunkIndex", "ChunkRequest", "Located",
    "MoreBytes", "NeedAux", "Part", "Resumable", "Stored", "Whole",
]
