"""Parts of local blosc chunks, read in batches.

A cold frame of a deep-chunked store needs, from each chunk file it touches, the header and
block table, then the bytes of a few blocks. Read one file after the other, that is two disk
round trips per chunk. :func:`read_local_parts` first tells the kernel about every head it
will read (``posix_fadvise(WILLNEED)``), reads them, then tells it about every block range, and
only then reads and decodes them one by one: the disk works on all of a batch's requests at
once. Heads already held by the engine (its encoded tier) are not read again.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import CorruptChunkError
from .blosc_partial import (
    PREFIX,
    BloscHead,
    Box,
    PartsUnsupported,
    decode_box,
    head_length,
    parse_head,
    sparse_frame,
)

#: byte ranges of a file closer than this are read as one
LOCAL_GAP = 1 << 16
_WILLNEED = getattr(os, "POSIX_FADV_WILLNEED", None)

#: one part to read: the chunk index, the box, the chunk's head when held (else None)
Item = tuple[tuple[int, ...], Box, "BloscHead | None"]


@dataclass
class PartRead:
    """What reading one part did."""

    array: np.ndarray  # the box's values, in the source's (native) dtype
    moved: int  # bytes read from the store
    decoded: int  # bytes of blocks decoded
    stored: np.ndarray | None = None  # the whole stored frame, when it was read
    head: BloscHead | None = None  # the frame's head, when it was read
    seconds: float | None = None  # from the start of its batch to its values (None: unknown)


class Where:
    """Names a chunk of a source in an error message, formatted only when one is raised."""

    __slots__ = ("source", "index")

    def __init__(self, source: Any, index: tuple[int, ...]) -> None:
        self.source, self.index = source, index

    def __str__(self) -> str:
        return str(self.source._where(self.index))

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def _hint(fd: int, offset: int, length: int) -> None:
    if _WILLNEED is not None and length > 0:
        try:
            os.posix_fadvise(fd, offset, length, _WILLNEED)
        except OSError:
            pass


def read_local_parts(parts: Any, items: list[Item]) -> list[Any]:
    """``PartRead`` (or the exception raised) for each item, in order; ``parts`` is the
    array's :class:`~tsexplore.sources.parts.BloscParts`."""
    source = parts.source
    start = time.perf_counter()
    results: list[Any] = [None] * len(items)
    open_: dict[int, tuple[int, int]] = {}  # item -> (fd, file size)
    try:
        for i, (index, _, head) in enumerate(items):
            path = os.path.join(source._local_root, source.chunk_key(index))
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                results[i] = source._missing(index)
                continue
            size = os.fstat(fd).st_size
            open_[i] = (fd, size)
            if head is None:
                _hint(fd, 0, max(PREFIX, parts.head_len or 4096))
        heads: dict[int, tuple[BloscHead, bool]] = {}
        for i, (fd, size) in open_.items():
            index, _, head = items[i]
            try:
                heads[i] = (head, False) if head is not None else (_read_head(parts, fd, size, Where(source, index)), True)
            except Exception as exc:  # noqa: BLE001 - this item's failure, the others go on
                results[i] = exc
        spans: dict[int, list[tuple[int, int]]] = {}
        for i, (head, _) in heads.items():
            fd, size = open_[i]
            if head.cbytes > size:
                results[i] = CorruptChunkError(
                    f"{Where(source, items[i][0])}: stored chunk has {size} bytes, its blosc "
                    f"header says {head.cbytes}"
                )
                continue
            spans[i] = head.block_ranges(parts._blocks(head, items[i][1]), LOCAL_GAP)
            for a, b in spans[i]:
                _hint(fd, a, b - a)
        for i, ranges in spans.items():
            head, fresh = heads[i]
            try:
                results[i] = _decode(parts, open_[i][0], items[i], head, ranges, fresh)
                results[i].seconds = time.perf_counter() - start
            except Exception as exc:  # noqa: BLE001
                results[i] = exc
    finally:
        for fd, _ in open_.values():
            os.close(fd)
    return results


def _read_head(parts: Any, fd: int, size: int, where: Any) -> BloscHead:
    want = max(PREFIX, parts.head_len or 4096)
    data = os.pread(fd, min(size, want), 0)
    need = head_length(data, where)
    if need > len(data):
        data += os.pread(fd, need - len(data), len(data))
    head = parse_head(np.frombuffer(data, dtype=np.uint8), where, whole=False)
    parts._learn(head)
    return head


def _decode(
    parts: Any, fd: int, item: Item, head: BloscHead, ranges: list[tuple[int, int]], fresh: bool
) -> PartRead:
    index, box, _ = item
    where = Where(parts.source, index)
    frame = sparse_frame(head)
    moved = head.head_len if fresh else 0
    for a, b in ranges:
        if os.preadv(fd, [memoryview(frame)[a:b]], a) != b - a:  # type: ignore[arg-type]
            raise CorruptChunkError(f"{where}: the stored chunk ends inside blosc block bytes {a}..{b}")
        moved += b - a
    values, decoded = decode_box(frame, head, parts.shape, parts.dtype, box, where)
    return PartRead(parts._native(values), moved, decoded, head=head if fresh else None)


__all__ = ["LOCAL_GAP", "PartRead", "PartsUnsupported", "Where", "read_local_parts"]
