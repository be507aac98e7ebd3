"""Parts of blosc chunks: a box of a chunk decoded from only the blocks that hold it.

:class:`BloscBlocks` is the ``blocks`` of a Zarr array whose chunks are C-ordered blosc frames
(when C-Blosc2 is loaded). For a :class:`~.requests.Blocks` request it answers the pipeline's
questions:

- **worth** (:meth:`BloscBlocks.worth`): does decoding only ``box`` pay (at most
  :data:`PART_FRACTION` of the chunk's blocks; the block size is learned from the frames read);
- **locate** (:meth:`BloscBlocks.locate`): the frame's head (header and block table) is an
  auxiliary entry (``AuxKey(token, "head", index)``, kept in the encoded tier); with it, the
  byte ranges of the blocks needed. Without it, first the head: the frame's first bytes, a
  second read when the block table is longer than guessed (:meth:`BloscBlocks.parse_head`).
  The engine may ask for the whole frame instead (to keep it: a remote store followed by a
  player), and the store's link says when the ranges do not pay (two round trips against one);
- **decode** (:meth:`BloscBlocks.decode`): the box from the blocks' bytes placed in a sparse
  copy of the frame, or from the whole frame (:func:`~.blosc_partial.decode_box`). A frame this
  cannot take apart is decoded whole and the box cut from it, and later parts are not worth it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .blosc_partial import (
    PREFIX,
    BloscHead,
    Box,
    PartsUnsupported,
    decode_box,
    decoded_fraction,
    decodes_fronts,
    head_length,
    layout,
    parse_head,
    sparse_frame,
)
from .bytes import ByteRange
from .requests import AuxKey, Blocks, ChunkIndex, ChunkRequest, Located, NeedAux

#: decode a part when it needs at most this share of the chunk's blocks
PART_FRACTION = 0.5
#: the largest block size assumed until a frame of the array has been read
GUESS_BLOCKSIZE = 1 << 16
_MEMO = 4096
#: the head of a chunk the store does not have
ABSENT = "absent"


class BloscBlocks:
    """Reads boxes of the chunks of one blosc-compressed array (chunks of ``shape``, stored
    as ``dtype``, byte order included)."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, whole: Callable[[Any, ChunkIndex], np.ndarray]) -> None:
        self.shape = tuple(shape)  # stored chunks are whole, also at the edges
        self.dtype = np.dtype(dtype)
        #: decodes a whole stored frame (what a frame that cannot be taken apart falls back to)
        self._whole = whole
        self.blocksize: int | None = None
        self.head_len: int | None = None
        self.ratio: float | None = None  # stored / decoded bytes, last frame seen
        self._worth: dict[Box, bool] = {}
        self.unsupported = False
        #: whether a box ending inside a full block decodes only the block's front (learned
        #: from the frames read; None until one was)
        self.fronts: bool | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_worth": {}}

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    # -- planning ----------------------------------------------------------------------------
    def worth(self, box: Box, shape: tuple[int, ...] | None = None) -> bool:
        """Whether decoding only ``box`` of a chunk pays (few of its blocks; an edge chunk,
        of ``shape`` once trimmed, is stored whole: its blocks are the full chunk's)."""
        if self.unsupported:
            return False
        found = self._worth.get(box)
        if found is None:
            blocksize = self.blocksize or self._guess()
            found = decoded_fraction(self.shape, self.dtype.itemsize, box, blocksize) <= PART_FRACTION
            if len(self._worth) >= _MEMO:
                self._worth.clear()
            self._worth[box] = found
        return found

    def _guess(self) -> int:
        """The block size to plan with before a frame was read: blosc's automatic sizes are
        tens of KiB; a chunk is assumed to hold at least 16 blocks."""
        return max(self.dtype.itemsize, min(GUESS_BLOCKSIZE, self.nbytes // 16))

    def _guess_head(self) -> int:
        """Bytes to read for a head before one was seen: the header and the table of blocks
        of at least 4 KiB (a longer table is read again, whole)."""
        return PREFIX + 4 * math.ceil(self.nbytes / 4096)

    def _learn(self, head: BloscHead) -> None:
        if head.special or head.memcpyed:
            return
        if head.blocksize != self.blocksize:
            self.blocksize = head.blocksize
            self._worth.clear()
        self.head_len = head.head_len
        self.ratio = head.cbytes / max(1, head.nbytes)
        self.fronts = decodes_fronts(head)

    # -- whole blocks ------------------------------------------------------------------------
    def block_box(self, box: Box) -> Box | None:
        """The box of the block that holds ``box``, when the array's blocks are whole rows of
        the chunk's first axis (two or more) and ``box`` is whole rows inside one block (a
        frame of a deep chunk); else None."""
        blocksize, shape = self.blocksize, self.shape
        if blocksize is None or not box or any(b != (0, n) for b, n in zip(box[1:], shape[1:])):
            return None
        row = math.prod(shape[1:]) * self.dtype.itemsize
        if row == 0 or blocksize % row or blocksize < 2 * row:
            return None
        per = blocksize // row
        lo, hi = box[0]
        first = lo - lo % per
        if not lo < hi <= first + per:
            return None
        return ((first, min(first + per, shape[0])), *box[1:])

    def made(self, box: Box, shape: tuple[int, ...] | None = None) -> Box:
        """The box a read of ``box`` asks for: the block that holds it when decoding ``box``
        decodes that block whole anyway (``box`` ends where the block does, or the blocks do
        not decode by the fronts of their streams) -- the block's other rows come out of the
        same decode and are kept for the reads of them (:meth:`keeps`, :meth:`held`) -- else
        ``box``. ``shape``: the chunk's, trimmed at the array's edge (a block reaching past
        it is not asked for)."""
        block = self.block_box(box)
        if block is None or block == box or (self.fronts and box[0][1] < block[0][1]):
            return box
        if shape is not None and block[0][1] > shape[0]:
            return box
        return block

    def keeps(self, box: Box) -> bool:
        """Whether a reader's part ``box`` is kept in the cache (a reader's parts are
        otherwise one-pass): a whole block of rows, which the reads of its other rows take
        (:meth:`held`) instead of decoding the block again."""
        return self.block_box(box) == box

    def held(self, request: ChunkRequest, look: Callable[[Any], Any]) -> np.ndarray | None:
        """The values of part ``request`` when the cache holds the whole block that holds
        it (``look``: the cache's), else None: a read-only view of the block's values."""
        box = request.box
        if box is None:  # a request for stored bytes
            return None
        block = self.block_box(box)
        if block is None or block == box:
            return None
        values = look(ChunkRequest(request.array, request.index, Blocks(block)))
        if values is None:
            return None
        first = block[0][0]
        return values[box[0][0] - first : box[0][1] - first]  # type: ignore[no-any-return]

    def needed(self, box: Box, head: BloscHead | None) -> tuple[int, int]:
        """Stored bytes of the whole frame and of the blocks ``box`` needs (estimated until
        the head is known)."""
        whole = head.cbytes if head is not None else int(self.nbytes * (self.ratio or 1.0))
        blocksize = self.blocksize or self._guess()
        return whole, int(decoded_fraction(self.shape, self.dtype.itemsize, box, blocksize) * whole)

    # -- locate ------------------------------------------------------------------------------
    def locate(self, token: str, index: ChunkIndex, box: Box, key: str, aux: Callable[[AuxKey], Any],
               ranges_pay: Callable[[int, int, bool], bool] | None) -> Located | NeedAux:
        """Where the blocks of ``box`` are in object ``key``: the head first, unless the
        engine holds it; the whole frame when ``ranges_pay(whole, needed, head_known)`` says
        ranges do not pay (None: they always do)."""
        head_key = AuxKey(token, "head", index)
        head = aux(head_key)
        if head is ABSENT:
            return Located(None)
        if self.unsupported or head is False:
            return Located(key)
        if ranges_pay is not None and not ranges_pay(*self.needed(box, head), head is not None):
            return Located(key)
        if head is None:
            return NeedAux(head_key, key, ByteRange(0, self.head_len or self._guess_head()))
        blocks = layout(self.shape, self.dtype.itemsize, box, head.blocksize, head.nbytes).blocks
        return Located(key, tuple(ByteRange(a, b) for a, b in head.block_ranges(blocks)), head)

    def parse_head(self, aux: AuxKey, key: str, data: Any, where: object) -> tuple[Any, int] | NeedAux:
        """The head from a frame's first bytes (``data``; None: the chunk is absent), or the
        longer read it needs. A frame whose blocks this cannot decode one by one makes every
        later part of the array a whole read (its head is then False)."""
        if data is None:
            return ABSENT, 1
        prefix = np.frombuffer(data, dtype=np.uint8)
        need = head_length(prefix, where)
        if need > len(prefix) and len(prefix) >= PREFIX:
            self.head_len = need
            return NeedAux(aux, key, ByteRange(0, need))
        try:
            head = parse_head(prefix, where, whole=False)
            if head.typesize != self.dtype.itemsize and not head.special:
                raise PartsUnsupported(f"blosc items of {head.typesize} bytes, values of {self.dtype.itemsize}")
        except PartsUnsupported:
            self.unsupported = True
            return False, 1
        self._learn(head)
        return head, len(head.raw) + head.starts.nbytes + head.ends.nbytes

    # -- decode ------------------------------------------------------------------------------
    def decode(self, located: Located, data: list[Any], index: ChunkIndex, box: Box,
               where: object) -> tuple[np.ndarray, int]:
        """The values of ``box`` (stored dtype) and the bytes of blocks decoded, from the
        whole frame (``located.ranges`` None) or the blocks' ranges."""
        if located.ranges is not None:
            head = located.how
            frame = sparse_frame(head)
            for rng, got in zip(located.ranges, data):
                frame[rng.start : rng.start + len(got)] = np.frombuffer(got, dtype=np.uint8)
            return decode_box(frame, head, self.shape, self.dtype, box, where)
        frame = np.frombuffer(data[0], dtype=np.uint8)
        try:
            head = parse_head(frame, where)
            self._learn(head)
            return decode_box(frame, head, self.shape, self.dtype, box, where)
        except PartsUnsupported:
            self.unsupported = True
            whole = self._whole(data[0], index)
            return whole[box_slices(box)], whole.nbytes


def box_slices(box: Box) -> tuple[slice, ...]:
    """``box`` as slices."""
    return tuple(slice(lo, hi) for lo, hi in box)
