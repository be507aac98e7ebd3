"""Decode only the blosc blocks that hold a region of a chunk (frame-level decoding).

A blosc frame (blosc1 and blosc2 chunk formats, ``README_CHUNK_FORMAT.rst`` of C-Blosc2) is a
16-byte header (32 with the blosc2 extended header), a table of ``int32`` offsets of its
blocks (``bstarts``), and the blocks, each compressed on its own, possibly split into
``typesize`` streams, each stream ``int32 csize`` + bytes. A region of a C-ordered chunk that
is thin along the leading axes (a frame of a deep chunk, a few rows, a pixel's profile)
lives in a few blocks; :func:`decode_box` decodes only those, with C-Blosc2's
``blosc2_getitem_ctx`` (:func:`._cblosc2.item_decoder`): no decompressor is written here.

A region that ends inside a block needs only the block's front when the block is LZ4 streams
of the byte shuffle (the blosc1 frames that Zarr's default ``Blosc(cname="lz4",
shuffle=SHUFFLE)`` writes): stream ``j`` holds byte ``j`` of every item of the block, so the
items up to the region's end are the front of each stream. :func:`decode_box` then decodes each
stream only that far (C-Blosc2's bundled ``LZ4_decompress_safe_partial``) and unshuffles the
region's items (``blosc2_unshuffle``; :func:`._cblosc2.stream_decoder`): a frame in the first
half of a block decodes half the block.

Before any block is decoded its place in the frame is checked: the header's sizes against
each other and against the bytes present, every offset inside the frame and distinct, and
the streams of each needed block filling exactly the bytes up to the next block (so a shifted,
truncated or overlapping table is caught, not decoded from the wrong bytes). C-Blosc2 then
checks that every stream decodes to its exact size. Any failure is a
:class:`~tsexplore.errors.CorruptChunkError`; frames this module cannot take apart
(variable-length or lazy blocks, dictionaries, the delta filter, plugin codecs or filters) raise
:class:`PartsUnsupported` and are decoded whole by the caller.

:class:`BloscHead` also says which byte ranges of the stored frame hold given blocks
(:meth:`BloscHead.block_ranges`), so a reader can fetch only those (a local ``pread``, an
HTTP range request) and decode from a sparse copy of the frame.
"""

from __future__ import annotations

import functools
import math
import struct
import threading
from dataclasses import dataclass

import numpy as np

from ..errors import CorruptChunkError
from . import buffers
from ._cblosc2 import Streams, item_decoder, stream_decoder

#: enough bytes of a frame to know the length of its header and block table
PREFIX = 32
MIN_HEADER, EXT_HEADER = 16, 32
_DOSHUFFLE, _MEMCPYED, _DOBITSHUFFLE, _DODELTA, _DONT_SPLIT = 0x01, 0x02, 0x04, 0x08, 0x10
#: the codec of a blosc1 header (``flags >> 5``) whose blocks are LZ4 (LZ4 and LZ4HC)
_LZ4 = 1
_MAX_BLOCKSIZE = 536866816

#: a region of a chunk: per axis ``(start, stop)`` in chunk-local coordinates
Box = tuple[tuple[int, int], ...]
# ``where`` arguments name the chunk in error messages (anything that formats as text)


class PartsUnsupported(Exception):  # noqa: N818 - a signal to decode whole, not an error
    """This frame cannot be decoded block by block here; decode it whole."""


@dataclass(frozen=True)
class BloscHead:
    """A blosc frame's header and block table, parsed and checked."""

    version: int
    flags: int
    typesize: int
    nbytes: int  # decoded size
    blocksize: int
    cbytes: int  # stored size, header included
    header_len: int
    nblocks: int
    starts: np.ndarray  # int64 offset of each block (``bstarts``); empty when no table
    ends: np.ndarray  # int64 end of each block's bytes (the next block's start, or cbytes)
    memcpyed: bool  # data stored raw after the header, no table
    special: int  # blosc2 special chunk (zeros, NaN, one value, uninitialised): no blocks
    dict_end: int  # end of the table: where block bytes start
    raw: np.ndarray  # the head's bytes (header and table)

    @property
    def head_len(self) -> int:
        """Bytes a partial decode needs besides the blocks: header and table."""
        if self.special:
            return self.cbytes
        return self.header_len if self.memcpyed else self.dict_end

    def block_nbytes(self, block: int) -> int:
        """Decoded size of block ``block`` (the last one may be shorter)."""
        return min(self.blocksize, self.nbytes - block * self.blocksize)

    def block_ranges(self, blocks: np.ndarray) -> list[tuple[int, int]]:
        """Byte ranges of the stored frame holding ``blocks`` (sorted, adjacent ones merged),
        besides :attr:`head_len` (the byte store merges ranges with gaps between them)."""
        if self.special:
            return []
        if self.memcpyed:
            pairs = [(self.header_len + b * self.blocksize,
                      self.header_len + b * self.blocksize + self.block_nbytes(b))
                     for b in blocks.tolist()]
        else:
            pairs = [(int(self.starts[b]), int(self.ends[b])) for b in blocks.tolist()]
        pairs.sort()
        out: list[tuple[int, int]] = []
        for a, b in pairs:
            if out and a <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
        return out


def _header(buf: bytes | bytearray | memoryview | np.ndarray, where: object) -> tuple[int, ...]:
    """``(version, flags, typesize, nbytes, blocksize, cbytes, header length, special)`` from
    a frame's first bytes (16 suffice for a blosc1 frame, 32 for a blosc2 one)."""
    b = bytes(buf[:PREFIX])
    if len(b) < MIN_HEADER:
        raise CorruptChunkError(f"{where}: {len(b)} bytes are too few for a blosc header")
    nbytes, blocksize, cbytes = struct.unpack_from("<iii", b, 4)
    ext = bool(b[2] & _DOSHUFFLE and b[2] & _DOBITSHUFFLE)
    if ext and len(b) < EXT_HEADER:
        raise CorruptChunkError(f"{where}: {len(b)} bytes are too few for a blosc2 header")
    special = (b[31] >> 4) & 7 if ext else 0
    return b[0], b[2], b[3], nbytes, blocksize, cbytes, EXT_HEADER if ext else MIN_HEADER, special


def head_length(prefix: bytes | bytearray | memoryview | np.ndarray, where: object) -> int:
    """Bytes of header and block table of a frame, from its first :data:`PREFIX` bytes (16
    suffice for a blosc1 frame)."""
    _, flags, _, nbytes, blocksize, cbytes, hlen, special = _header(prefix, where)
    if special:
        return int(cbytes)
    if flags & _MEMCPYED:
        return hlen
    if blocksize <= 0 or nbytes < 0:
        raise CorruptChunkError(f"{where}: blosc header says {nbytes} bytes in blocks of {blocksize}")
    return hlen + 4 * math.ceil(nbytes / blocksize)


def parse_head(buf: np.ndarray, where: object, whole: bool = True) -> BloscHead:
    """Parse and check the header and block table at the start of ``buf`` (a ``uint8``
    array: the whole frame, or with ``whole=False`` at least its head)."""
    version, flags, typesize, nbytes, blocksize, cbytes, hlen, special = _header(buf, where)
    if typesize == 0 or cbytes < hlen or nbytes < 0:
        raise CorruptChunkError(
            f"{where}: blosc header is inconsistent (typesize {typesize}, nbytes {nbytes}, "
            f"cbytes {cbytes})"
        )
    if whole and len(buf) < cbytes:
        raise CorruptChunkError(
            f"{where}: stored chunk has {len(buf)} bytes, its blosc header says {cbytes}"
        )
    if hlen == EXT_HEADER:
        b2flags, b2flags2 = int(buf[31]), int(buf[30])
        filters = [int(x) for x in buf[16:22]]
        if b2flags2 & 0x01 or b2flags & 0x08 or b2flags & 0x04 or b2flags & 0x80:
            raise PartsUnsupported("variable-length or lazy blocks, or an instrumented codec")
        if b2flags & 0x01:  # C-Blosc2's getitem does not load a frame's dictionary
            raise PartsUnsupported("a dictionary")
        if any(f in (3,) or f > 4 for f in filters) or (flags >> 5) >= 5:
            raise PartsUnsupported("the delta filter, a filter plugin or a codec plugin")
    else:
        if flags & _DODELTA or (flags >> 5) >= 5:
            raise PartsUnsupported("the delta filter or an unknown codec")
    empty = np.empty(0, dtype=np.int64)
    if special:
        if len(buf) < cbytes:
            raise CorruptChunkError(f"{where}: a special blosc chunk is truncated")
        return BloscHead(version, flags, typesize, nbytes, max(1, nbytes), cbytes, hlen, 1,
                         empty, empty, False, special, cbytes, buf[:cbytes].copy())
    if blocksize <= 0 or blocksize > _MAX_BLOCKSIZE:
        raise CorruptChunkError(f"{where}: blosc header gives a block size of {blocksize}")
    if nbytes and blocksize > nbytes:
        blocksize = nbytes  # as C-Blosc2 reads it
    if blocksize % typesize or nbytes % typesize:
        raise PartsUnsupported("blocks that are not whole items")
    nblocks = math.ceil(nbytes / blocksize) if nbytes else 0
    if flags & _MEMCPYED:
        if cbytes != hlen + nbytes:
            raise CorruptChunkError(f"{where}: raw blosc frame of {cbytes} bytes holds {nbytes}")
        return BloscHead(version, flags, typesize, nbytes, blocksize, cbytes, hlen, nblocks,
                         empty, empty, True, 0, hlen, buf[:hlen].copy())
    table_end = hlen + 4 * nblocks
    if len(buf) < table_end or cbytes < table_end:
        raise CorruptChunkError(f"{where}: the blosc block table ({nblocks} blocks) is truncated")
    starts = np.frombuffer(buf, dtype="<i4", count=nblocks, offset=hlen).astype(np.int64)
    data_start = table_end
    ends = _block_ends(starts, data_start, cbytes, where)
    return BloscHead(version, flags, typesize, nbytes, blocksize, cbytes, hlen, nblocks,
                     starts, ends, False, 0, data_start, buf[:data_start].copy())


def _block_ends(starts: np.ndarray, data_start: int, cbytes: int, where: object) -> np.ndarray:
    """Where each block's bytes end: at the next block's start (blocks are contiguous,
    possibly out of order when compressed by several threads) or at the frame's end."""
    if not len(starts):
        return starts
    if starts.min() < data_start or starts.max() >= cbytes:
        raise CorruptChunkError(
            f"{where}: a blosc block offset lies outside the frame "
            f"({int(starts.min())}..{int(starts.max())} not in {data_start}..{cbytes - 1})"
        )
    order = np.argsort(starts, kind="stable")
    sorted_starts = starts[order]
    if np.any(np.diff(sorted_starts) == 0):
        raise CorruptChunkError(f"{where}: two blosc blocks share an offset")
    if sorted_starts[0] != data_start:
        raise CorruptChunkError(f"{where}: the first blosc block does not follow the block table")
    ends = np.empty_like(starts)
    ends[order[:-1]] = sorted_starts[1:]
    ends[order[-1]] = cbytes
    return ends


def check_blocks(head: BloscHead, buf: np.ndarray, blocks: np.ndarray, where: object) -> None:
    """Each block's streams must fill its bytes exactly (``buf``: the frame, at least the
    head and these blocks' bytes in place)."""
    if head.memcpyed or head.special:
        return
    raw = buf.data
    size = len(buf)
    unpack = struct.unpack_from
    split = head.typesize if not head.flags & _DONT_SPLIT else 1
    last = head.nblocks - 1 if head.nbytes % head.blocksize else -1
    starts, ends = head.starts, head.ends
    for b in blocks.tolist():
        pos, end = int(starts[b]), int(ends[b])
        if end > size:
            raise CorruptChunkError(f"{where}: blosc block {b} is not in the bytes read")
        for _ in range(1 if b == last else split):
            if pos + 4 > end:
                break
            csize = unpack("<i", raw, pos)[0]
            pos += 4 + (csize if csize > 0 else (1 if csize < 0 else 0))
        if pos != end:
            raise CorruptChunkError(
                f"{where}: blosc block {b}'s streams end at byte {pos}, its table says {end}"
            )


def box_segments(shape: tuple[int, ...], itemsize: int, box: Box) -> tuple[np.ndarray, int]:
    """The contiguous byte runs of ``box`` in a C-ordered chunk of ``shape``: their decoded
    offsets (in C order of the box, increasing) and their common length in bytes."""
    ndim = len(shape)
    k = ndim - 1  # the first axis from which on the box takes whole rows
    while k > 0 and box[k] == (0, shape[k]):
        k -= 1
    inner = math.prod(shape[k + 1 :]) * itemsize
    length = (box[k][1] - box[k][0]) * inner
    strides = [math.prod(shape[a + 1 :]) * itemsize for a in range(ndim)]
    offset = box[k][0] * strides[k]
    grids = [np.arange(lo, hi, dtype=np.int64) * strides[a] for a, (lo, hi) in enumerate(box[:k])]
    if not grids:
        return np.array([offset], dtype=np.int64), length
    mesh = functools.reduce(np.add, np.ix_(*grids)) if len(grids) > 1 else grids[0]
    return np.asarray(mesh, dtype=np.int64).ravel() + offset, length


def decoded_fraction(shape: tuple[int, ...], itemsize: int, box: Box, blocksize: int) -> float:
    """Share of a chunk's blocks that decoding ``box`` touches, for blocks of ``blocksize``."""
    total = math.prod(shape) * itemsize
    if total == 0:
        return 1.0
    lay = layout(tuple(shape), itemsize, tuple(box), min(blocksize, total), total)
    return len(lay.blocks) / math.ceil(total / min(blocksize, total))


_scratch = threading.local()


def _chunk_scratch(nbytes: int) -> np.ndarray:
    """This thread's chunk-sized scratch (only the pages a decode writes are touched)."""
    buf = getattr(_scratch, "buf", None)
    if buf is None or buf.size != nbytes:
        buf = _scratch.buf = np.empty(nbytes, dtype=np.uint8)
    return buf


@dataclass(frozen=True)
class Layout:
    """Where a box lives in a chunk's blocks (the same for every chunk of an array)."""

    starts: np.ndarray  # decoded byte offset of each contiguous run of the box
    length: int  # bytes of each run
    blocks: np.ndarray  # the blocks holding the box, sorted
    spans: tuple[tuple[int, int], ...]  # decoded byte ranges of runs of consecutive blocks


#: layouts kept (about 2 kB each with their run offsets: ~2 MB; every pan makes new boxes)
LAYOUTS = 1024


@functools.lru_cache(maxsize=LAYOUTS)
def layout(shape: tuple[int, ...], itemsize: int, box: Box, blocksize: int, nbytes: int) -> Layout:
    """The :class:`Layout` of ``box`` in a C-ordered chunk of ``shape`` stored in blocks of
    ``blocksize`` bytes (``nbytes`` decoded in all)."""
    starts, length = box_segments(shape, itemsize, box)
    if length <= 0:
        blocks = np.empty(0, dtype=np.int64)
    else:
        first = starts // blocksize
        last = (starts + length - 1) // blocksize
        if len(starts) == 1:
            blocks = np.arange(int(first[0]), int(last[0]) + 1, dtype=np.int64)
        else:  # mark [first, last] of every run at once: +1 at its first, -1 after its last
            marks = np.zeros(math.ceil(nbytes / blocksize) + 1, dtype=np.int64)
            np.add.at(marks, first, 1)
            np.add.at(marks, last + 1, -1)
            blocks = np.flatnonzero(np.cumsum(marks[:-1]) > 0)
    spans = tuple((a * blocksize, min(b * blocksize, nbytes)) for a, b in _runs(blocks))
    starts.flags.writeable = False
    blocks.flags.writeable = False
    return Layout(starts, length, blocks, spans)


def decode_box(
    buf: np.ndarray,
    head: BloscHead,
    shape: tuple[int, ...],
    dtype: np.dtype,
    box: Box,
    where: object,
) -> tuple[np.ndarray, int]:
    """The values of ``box`` of a chunk of ``shape`` stored as the frame in ``buf`` (every
    byte of it, or a sparse copy holding the head and the blocks ``box`` needs), and the
    bytes of values decoded: the blocks ``box`` needs, each run of consecutive ones only up
    to the box's last value in it where its last block decodes by the front of its streams.
    ``dtype`` is the stored dtype (byte order included)."""
    items = item_decoder()
    if items is None:
        raise PartsUnsupported("C-Blosc2 is not available")
    itemsize = dtype.itemsize
    if head.nbytes != math.prod(shape) * itemsize:
        raise CorruptChunkError(
            f"{where}: blosc header says {head.nbytes} decoded bytes, expected "
            f"{math.prod(shape) * itemsize}"
        )
    lay = layout(shape, itemsize, box, head.blocksize, head.nbytes)
    check_blocks(head, buf, lay.blocks, where)
    out_shape = tuple(hi - lo for lo, hi in box)
    out = buffers.empty(math.prod(out_shape) * itemsize).view(dtype).reshape(out_shape)
    src = buf[: head.cbytes] if len(buf) >= head.cbytes else buf
    fronts = _fronts(head)
    if len(lay.starts) == 1:  # one run: straight into the output
        decoded = _items(items, fronts, src, head, int(lay.starts[0]), lay.length, out.ctypes.data, where)
    else:
        scratch = _chunk_scratch(head.nbytes)
        decoded = 0
        for lo, hi in lay.spans:
            # up to the end of the box's last run in these blocks (it ends inside them)
            last = int(np.searchsorted(lay.starts, hi)) - 1
            stop = min(hi, int(lay.starts[last]) + lay.length)
            decoded += _items(items, fronts, src, head, lo, stop - lo, scratch.ctypes.data + lo, where)
        whole = scratch.view(dtype).reshape(shape)
        out[...] = whole[tuple(slice(lo, hi) for lo, hi in box)]
    return out, decoded


def decodes_fronts(head: BloscHead) -> bool:
    """Whether a box that ends inside one of ``head``'s full blocks decodes only the block's
    front (LZ4 streams of the byte shuffle, the decoder loaded); else such a block decodes
    whole."""
    return _fronts(head) is not None


def _fronts(head: BloscHead) -> Streams | None:
    """The stream decoder when ``head``'s full blocks are LZ4 streams of the byte shuffle
    (blosc1 header, split into ``typesize`` streams, no bitshuffle or delta), else None."""
    flags = head.flags
    if (head.header_len != MIN_HEADER or head.memcpyed or head.special or flags >> 5 != _LZ4
            or flags & (_DONT_SPLIT | _DOBITSHUFFLE | _DODELTA) or not flags & _DOSHUFFLE
            or head.typesize < 2):
        return None
    return stream_decoder()


def _runs(blocks: np.ndarray) -> list[tuple[int, int]]:
    """Sorted block numbers -> ``[first, stop)`` runs of consecutive blocks."""
    out: list[tuple[int, int]] = []
    for b in blocks.tolist():
        if out and b == out[-1][1]:
            out[-1] = (out[-1][0], b + 1)
        else:
            out.append((b, b + 1))
    return out


def _items(items, fronts: Streams | None, src: np.ndarray, head: BloscHead, start: int, nbytes: int,  # type: ignore[no-untyped-def]
           dest: int, where: object) -> int:
    """Decode bytes ``start .. start + nbytes`` of the frame to the address ``dest``, one call
    of C-Blosc2's getitem per block: C-Blosc2 (3.3) can return a range of items that crosses a
    block boundary shifted; a range inside one block it returns exactly. With ``fronts``
    (:func:`_fronts`), a range that ends inside a full block decodes only the block's front
    (:func:`_front`). Returns the bytes of values decoded (a block's front: up to the range's
    end)."""
    ts, blocksize = head.typesize, head.blocksize
    if start % ts or nbytes % ts or (blocksize > 0 and blocksize % ts):
        raise PartsUnsupported("a region or blosc blocks that do not start on a whole item")
    stop = start + nbytes
    decoded = 0
    while start < stop:
        block = start // blocksize if blocksize > 0 else 0
        end = (block + 1) * blocksize if blocksize > 0 else stop
        cut = min(stop, end)
        n = cut - start
        if (fronts is not None and cut < end <= head.nbytes
                and _front(fronts, src, head, block, start - block * blocksize, cut - block * blocksize, dest, where)):
            decoded += cut - block * blocksize
        else:
            got = items(src, start // ts, n // ts, dest, n)
            if got != n:
                raise CorruptChunkError(
                    f"{where}: blosc blocks decode to {got} bytes instead of {n} (corrupt data)"
                    if got >= 0 else f"{where}: blosc cannot decode the stored blocks (error {got})"
                )
            decoded += min(end, head.nbytes) - block * blocksize
        dest += n
        start = cut
    return decoded


def _front(fronts: Streams, src: np.ndarray, head: BloscHead, block: int, lo: int, hi: int, dest: int,
           where: object) -> bool:
    """Decode bytes ``lo .. hi`` of full block ``block`` (block-local, ``hi`` inside it) from
    the front of its streams to ``dest``. False when a stream is neither LZ4 nor stored raw
    (C-Blosc2's run-length streams): the caller decodes the block whole."""
    ts = head.typesize
    per = head.blocksize // ts  # bytes of each stream decoded
    first, last = lo // ts, hi // ts  # the items wanted
    n = last - first
    scratch = _front_scratch(ts * (per + n))
    rows = scratch[: ts * per].reshape(ts, per)  # each stream decoded (as far as needed)
    packed = scratch[ts * per : ts * (per + n)].reshape(ts, n)  # the wanted items of each
    pos, end = int(head.starts[block]), int(head.ends[block])
    raw, address = src.data, src.ctypes.data
    for j in range(ts):
        if pos + 4 > end:
            return False
        csize = struct.unpack_from("<i", raw, pos)[0]
        if csize <= 0 or csize > per or pos + 4 + csize > end:
            return False
        at = pos + 4
        if csize == per:  # stored raw
            packed[j] = src[at + first : at + last]
        else:
            # a stream that shrank to under a quarter is mostly long matches, which the
            # partial decoder copies byte by byte: decoded whole it is quicker (its bytes past
            # the front make no more values: the other streams stop there)
            whole = 4 * csize < per
            got = (fronts.lz4_whole(address + at, rows[j].ctypes.data, csize, per) if whole else
                   fronts.lz4_front(address + at, rows[j].ctypes.data, csize, last))
            if got != (per if whole else last):
                raise CorruptChunkError(f"{where}: blosc block {block}'s LZ4 stream {j} is corrupt")
            packed[j] = rows[j, first:last]
        pos += 4 + csize
    got = fronts.unshuffle(ts, ts * n, packed.ctypes.data, dest)
    if got != ts * n:
        raise CorruptChunkError(f"{where}: blosc cannot unshuffle block {block} (error {got})")
    return True


def _front_scratch(nbytes: int) -> np.ndarray:
    """This thread's buffer for the fronts of a block's streams (grown, never shrunk)."""
    buf = getattr(_scratch, "fronts", None)
    if buf is None or buf.size < nbytes:
        buf = _scratch.fronts = np.empty(nbytes, dtype=np.uint8)
    return buf


def sparse_frame(head: BloscHead) -> np.ndarray:
    """This thread's frame-sized buffer with the head in place; the caller puts the block
    ranges it fetched at their offsets (the rest is never read by :func:`decode_box`).
    Valid until this thread's next call."""
    out = getattr(_scratch, "frame", None)
    if out is None or out.size < head.cbytes:
        out = _scratch.frame = np.empty(max(head.cbytes, 2 * (0 if out is None else out.size)), dtype=np.uint8)
    out = out[: head.cbytes]
    out[: len(head.raw)] = head.raw
    return out
