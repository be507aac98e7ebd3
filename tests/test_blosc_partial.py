"""Frame-level decoding of blosc chunks (tsexplore.sources.blosc_partial) against whole-chunk
decoding: random shapes, chunkings, typesizes, block sizes, shuffles, codecs, blosc1 frames
(numcodecs' C-Blosc) and blosc2 frames (python-blosc2), whole frames and sparse copies
holding only the head and the blocks' byte ranges; and corrupt frames, which must raise
CorruptChunkError, never decode to wrong values.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tsexplore.errors import CorruptChunkError
from tsexplore.sources._cblosc2 import decoder, item_decoder, stream_decoder
from tsexplore.sources.blosc_partial import (
    Layout,
    PartsUnsupported,
    decode_box,
    decoded_fraction,
    head_length,
    layout,
    parse_head,
    sparse_frame,
)

pytestmark = pytest.mark.skipif(item_decoder() is None, reason="C-Blosc2 is not loaded")

DTYPES = ["u1", "<i2", ">i2", "<f4", ">f4", "<f8", "<i8"]


def whole(frame: bytes, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """The reference: C-Blosc2 decodes the whole frame."""
    out = np.empty(math.prod(shape) * dtype.itemsize, dtype=np.uint8)
    assert decoder()(frame, out) == out.nbytes
    return out.view(dtype).reshape(shape)


def encode(data: np.ndarray, fmt: str, cname: str, shuffle: int, blocksize: int, threads: int) -> bytes:
    if fmt == "blosc1":
        from numcodecs import Blosc

        return bytes(Blosc(cname=cname, clevel=5, shuffle=shuffle, blocksize=blocksize).encode(data))
    import blosc2

    filt = [blosc2.Filter.NOFILTER, blosc2.Filter.SHUFFLE, blosc2.Filter.BITSHUFFLE][shuffle]
    codec = {"lz4": blosc2.Codec.LZ4, "zstd": blosc2.Codec.ZSTD, "blosclz": blosc2.Codec.BLOSCLZ}[cname]
    return bytes(blosc2.compress2(
        np.ascontiguousarray(data), typesize=data.dtype.itemsize, clevel=5, filters=[filt],
        codec=codec, blocksize=blocksize, nthreads=threads,
        splitmode=blosc2.SplitMode.AUTO_SPLIT,
    ))


@st.composite
def case(draw: st.DrawFn):
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 40), min_size=ndim, max_size=ndim)))
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    box = []
    for n in shape:
        lo = draw(st.integers(0, n - 1))
        hi = draw(st.integers(lo + 1, n))
        box.append((lo, hi))
    nbytes = math.prod(shape) * dtype.itemsize
    blocksize = draw(st.sampled_from([0, 64, 256, 1000, 4096])) // dtype.itemsize * dtype.itemsize
    fmt = draw(st.sampled_from(["blosc1", "blosc2"]))
    cname = draw(st.sampled_from(["lz4", "zstd", "blosclz"]))
    shuffle = draw(st.integers(0, 2))
    threads = draw(st.sampled_from([1, 2]))
    seed = draw(st.integers(0, 2**16))
    smooth = draw(st.booleans())
    return shape, dtype, tuple(box), max(0, min(blocksize, nbytes)), fmt, cname, shuffle, threads, seed, smooth


def _data(shape, dtype, seed, smooth) -> np.ndarray:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    n = math.prod(shape)
    if smooth:  # very compressible: runs and slow ramps
        raw = (np.arange(n) // 7 % 50).astype(np.float64)
    else:  # compressible, not trivially (about 4 bits in each value)
        raw = rng.integers(0, 16, n).astype(np.float64)
    return raw.astype(dtype).reshape(shape)


def _blocks_bytes(lay: Layout) -> int:
    """Bytes of the blocks a box's layout holds (what decoding them whole decodes)."""
    return sum(hi - lo for lo, hi in lay.spans)


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=case())
def test_partial_decoding_equals_whole_chunk_decoding(c) -> None:  # type: ignore[no-untyped-def]
    shape, dtype, box, blocksize, fmt, cname, shuffle, threads, seed, smooth = c
    data = _data(shape, dtype, seed, smooth)
    frame = encode(data, fmt, cname, shuffle, blocksize, threads)
    reference = whole(frame, shape, dtype)
    np.testing.assert_array_equal(reference, data)
    buf = np.frombuffer(frame, dtype=np.uint8)
    region = tuple(slice(lo, hi) for lo, hi in box)
    try:
        head = parse_head(buf, "test chunk")
    except PartsUnsupported:
        return
    values, decoded = decode_box(buf, head, shape, dtype, box, "test chunk")
    np.testing.assert_array_equal(values, data[region])
    assert values.dtype == dtype and values.shape == data[region].shape
    assert 0 < decoded <= data.nbytes
    # only the head and the blocks' byte ranges in place: the same values
    assert head_length(buf[:32], "test chunk") <= head.head_len
    part = parse_head(buf[: head.head_len].copy(), "test chunk", whole=False)
    lay = layout(shape, dtype.itemsize, box, part.blocksize, part.nbytes)
    sparse = sparse_frame(part)
    sparse[len(part.raw):] = 0xA5  # whatever was there before: never read
    for a, b in part.block_ranges(lay.blocks):
        sparse[a:b] = buf[a:b]
    values2, decoded2 = decode_box(sparse, part, shape, dtype, box, "test chunk")
    np.testing.assert_array_equal(values2, data[region])
    # a box ending inside a block of LZ4 streams decodes only that block's front
    assert decoded2 == decoded <= _blocks_bytes(lay)
    # the decoded share the planner estimates is the share decode_box decodes
    if not head.memcpyed and not head.special:
        nblocks = math.ceil(head.nbytes / head.blocksize)
        assert decoded_fraction(shape, dtype.itemsize, box, head.blocksize) == pytest.approx(
            len(lay.blocks) / nblocks
        )


def _frame(shape=(16, 32, 32), dtype="<f4", cname="zstd", shuffle=1, blocksize=4096) -> tuple[np.ndarray, bytes]:  # type: ignore[no-untyped-def]
    from numcodecs import Blosc

    data = (np.arange(math.prod(shape)) * 0.25).astype(dtype).reshape(shape)
    return data, bytes(Blosc(cname=cname, clevel=5, shuffle=shuffle, blocksize=blocksize).encode(data))


def test_a_frame_of_a_deep_chunk_decodes_only_its_blocks() -> None:
    data, frame = _frame()
    buf = np.frombuffer(frame, dtype=np.uint8)
    head = parse_head(buf, "x")
    assert head.nblocks == 16  # 64 KiB in blocks of 4 KiB: one frame is one block
    values, decoded = decode_box(buf, head, data.shape, data.dtype, ((5, 6), (0, 32), (0, 32)), "x")
    np.testing.assert_array_equal(values[0], data[5])
    assert decoded == 4096
    # a pixel's profile through the chunk: one block per frame
    values, decoded = decode_box(buf, head, data.shape, data.dtype, ((0, 16), (3, 4), (7, 8)), "x")
    np.testing.assert_array_equal(values[:, 0, 0], data[:, 3, 7])
    assert decoded == 16 * 4096


def _table_offset(frame: bytes) -> int:
    flags = frame[2]
    return 32 if flags & 0x01 and flags & 0x04 else 16


@pytest.mark.parametrize("how", ["outside", "shifted", "duplicate", "truncated_table", "nbytes"])
def test_a_corrupt_block_table_raises_never_wrong_data(how: str) -> None:
    data, frame = _frame()
    bad = bytearray(frame)
    off = _table_offset(frame)
    starts = list(struct.unpack_from("<16i", frame, off))
    if how == "outside":
        struct.pack_into("<i", bad, off + 4 * 5, len(frame) + 100)
    elif how == "shifted":
        struct.pack_into("<i", bad, off + 4 * 5, starts[5] + 3)
    elif how == "duplicate":
        struct.pack_into("<i", bad, off + 4 * 5, starts[4])
    elif how == "truncated_table":
        bad = bad[: off + 20]
    elif how == "nbytes":
        struct.pack_into("<i", bad, 4, data.nbytes - 4096)  # says fewer decoded bytes
    buf = np.frombuffer(bytes(bad), dtype=np.uint8)
    with pytest.raises(CorruptChunkError):
        head = parse_head(buf, "chunk (0, 0, 0)")
        decode_box(buf, head, data.shape, data.dtype, ((5, 6), (0, 32), (0, 32)), "chunk (0, 0, 0)")


def _replace_block(frame: bytes, block: int, payload: bytes) -> bytes:
    """``frame`` with block ``block``'s one stream (no split) replaced by ``payload``."""
    off = _table_offset(frame)
    nblocks = math.ceil(struct.unpack_from("<i", frame, 4)[0] / struct.unpack_from("<i", frame, 8)[0])
    starts = list(struct.unpack_from(f"<{nblocks}i", frame, off))
    order = sorted(range(nblocks), key=lambda b: starts[b])
    ends = {b: (starts[order[i + 1]] if i + 1 < nblocks else len(frame)) for i, b in enumerate(order)}
    a, e = starts[block], ends[block]
    new_block = struct.pack("<i", len(payload)) + payload
    delta = len(new_block) - (e - a)
    out = bytearray(frame[:a] + new_block + frame[e:])
    for b in range(nblocks):
        if starts[b] > a:
            struct.pack_into("<i", out, off + 4 * b, starts[b] + delta)
    struct.pack_into("<i", out, 12, len(out))  # cbytes
    return bytes(out)


@pytest.mark.parametrize("size", [4096 - 16, 4096 + 16])
def test_a_block_that_decodes_to_the_wrong_size_raises(size: int) -> None:
    from numcodecs import Zstd

    data, frame = _frame(dtype="u1", shape=(16, 64, 64), shuffle=0, blocksize=4096)
    assert frame[2] & 0x10  # typesize 1: blocks are single streams
    payload = bytes(Zstd(level=1).encode(np.full(size, 7, dtype=np.uint8)))
    bad = _replace_block(frame, 3, payload)
    buf = np.frombuffer(bad, dtype=np.uint8)
    head = parse_head(buf, "x")  # the table is consistent: only the block is wrong
    with pytest.raises(CorruptChunkError):
        decode_box(buf, head, data.shape, data.dtype, ((3, 4), (0, 64), (0, 64)), "x")
    # the blocks around it still decode, and are right
    values, _ = decode_box(buf, head, data.shape, data.dtype, ((2, 3), (0, 64), (0, 64)), "x")
    np.testing.assert_array_equal(values[0], data[2])


def test_frames_that_cannot_be_decoded_by_blocks_say_so() -> None:
    import blosc2

    data = np.arange(4096, dtype="<i4")
    delta = blosc2.compress2(data, typesize=4, filters=[blosc2.Filter.DELTA, blosc2.Filter.SHUFFLE])
    with pytest.raises(PartsUnsupported):
        parse_head(np.frombuffer(delta, dtype=np.uint8), "x")


def test_blosc2_special_chunks_decode_by_parts_and_dictionaries_say_no() -> None:
    import blosc2

    data = (np.arange(64 * 64) % 97).astype("<i4").reshape(64, 64)
    frame = blosc2.compress2(data, typesize=4, codec=blosc2.Codec.ZSTD, use_dict=True, blocksize=2048)
    with pytest.raises(PartsUnsupported):  # C-Blosc2's getitem does not load dictionaries
        parse_head(np.frombuffer(frame, dtype=np.uint8), "x")
    zeros = np.frombuffer(blosc2.compress2(np.zeros(4096, dtype="<f4"), typesize=4), dtype=np.uint8)
    head = parse_head(zeros, "x")
    values, _ = decode_box(zeros, head, (64, 64), np.dtype("<f4"), ((3, 4), (5, 9)), "x")
    np.testing.assert_array_equal(values, np.zeros((1, 4), dtype="<f4"))
    # and this thread's next frames still decode right (C-Blosc2's getitem on a special
    # chunk left its context decoding every later frame's items as zeros)
    data, frame = _frame()
    buf = np.frombuffer(frame, dtype=np.uint8)
    part, _ = decode_box(buf, parse_head(buf, "y"), data.shape, data.dtype, ((5, 6), (0, 32), (0, 32)), "y")
    np.testing.assert_array_equal(part, data[5:6])
    whole_zeros = np.ones(4096, dtype="<f4")  # a special chunk decoded whole: the same
    assert decoder()(zeros, whole_zeros) == whole_zeros.nbytes and not whole_zeros.any()
    part, _ = decode_box(buf, parse_head(buf, "y"), data.shape, data.dtype, ((7, 8), (0, 32), (0, 32)), "y")
    np.testing.assert_array_equal(part, data[7:8])


@pytest.mark.parametrize("fmt,cname,shuffle,dtype,n,blocksize", [
    ("blosc2", "lz4", 0, "<i8", 17, 64),  # C-Blosc2's getitem gave items 8.. for items 1..8
    ("blosc1", "lz4", 2, "<f8", 19, 64),
    ("blosc1", "zstd", 1, "<f4", 97, 128),
    ("blosc2", "blosclz", 2, "<i2", 150, 64),
])
def test_every_range_of_items_decodes_exactly_also_across_blocks(fmt, cname, shuffle, dtype, n, blocksize) -> None:  # type: ignore[no-untyped-def]
    """Every box of a 1-d chunk of several blocks, against the values written: ranges that
    cross a block boundary are where C-Blosc2's getitem goes wrong."""
    dtype = np.dtype(dtype)
    for smooth in (True, False):
        data = _data((n,), dtype, 7, smooth)
        buf = np.frombuffer(encode(data, fmt, cname, shuffle, blocksize, 1), dtype=np.uint8)
        head = parse_head(buf, "test chunk")
        assert 1 < math.ceil(head.nbytes / head.blocksize)  # several blocks
        for lo in range(n):
            for hi in range(lo + 1, n + 1):
                values, _ = decode_box(buf, head, (n,), dtype, ((lo, hi),), "test chunk")
                np.testing.assert_array_equal(values, data[lo:hi], err_msg=f"items {lo}..{hi}")


def _lz4_chunk(dtype: str, smooth: bool, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A deep chunk (16 frames of 128 x 128) written with numcodecs' ``Blosc()`` defaults (LZ4,
    clevel 5, byte shuffle, automatic block size: what Zarr v2 stores hold): its values and
    its frame. Smooth data leaves the high bytes' streams a few hundred bytes (decoded whole)
    and the low bytes' stored raw; noisy data has every stream LZ4."""
    from numcodecs import Blosc

    rng = np.random.default_rng(seed)
    t, y, x = np.meshgrid(np.arange(16), np.arange(128), np.arange(128), indexing="ij")
    field = np.sin(t / 5.0) + np.cos(y / 9.0) * np.sin(x / 7.0)
    if not smooth:
        field = field + rng.normal(0, 0.1, field.shape)
    data = (field * 1000).astype(dtype)
    return data, np.frombuffer(Blosc().encode(data), dtype=np.uint8)


@pytest.mark.skipif(stream_decoder() is None, reason="C-Blosc2's LZ4 and unshuffle are not exported")
@pytest.mark.parametrize("dtype", ["<f4", "<f8", "<i2", ">i4"])
@pytest.mark.parametrize("smooth", [True, False])
def test_a_box_ending_inside_an_lz4_block_decodes_only_the_blocks_front(dtype: str, smooth: bool) -> None:
    """Against numcodecs' own decode: every frame, every run of frames and rows that ends
    inside a block; the bytes decoded are the block's front up to the box's end."""
    from numcodecs import Blosc

    data, buf = _lz4_chunk(dtype, smooth)
    np.testing.assert_array_equal(np.frombuffer(Blosc().decode(buf), dtype=dtype).reshape(data.shape), data)
    head = parse_head(buf, "chunk")
    assert head.flags == 0x21 and head.nblocks > 1  # LZ4, byte shuffle, split into streams
    frame = 128 * 128 * data.dtype.itemsize
    assert head.blocksize > frame  # several frames a block: a frame can end inside one
    fronts = 0
    for lo in range(16):
        for hi in range(lo + 1, 17):
            values, decoded = decode_box(buf, head, data.shape, data.dtype, ((lo, hi), (0, 128), (0, 128)), "chunk")
            np.testing.assert_array_equal(values, data[lo:hi], err_msg=f"frames {lo}..{hi}")
            end = hi * frame
            lay = layout(data.shape, data.itemsize, ((lo, hi), (0, 128), (0, 128)), head.blocksize, head.nbytes)
            if end % head.blocksize:  # the last block's front, up to the box's end
                assert decoded == _blocks_bytes(lay) - (head.blocksize - end % head.blocksize)
                fronts += 1
            else:
                assert decoded == _blocks_bytes(lay)
    assert fronts
    for rows in [(0, 1), (5, 9), (127, 128)]:  # a few rows of a frame
        box = ((3, 4), rows, (0, 128))
        values, _ = decode_box(buf, head, data.shape, data.dtype, box, "chunk")
        np.testing.assert_array_equal(values, data[3:4, rows[0] : rows[1]])
    # tiles (a run of values a row): each run of blocks decoded up to the tile's last value
    # in it, here in the first of the frames a block holds
    per_block = head.blocksize // frame
    for t in range(0, 16, per_block):
        for tile in [((t, t + 1), (0, 40), (10, 50)), ((t, t + 1), (60, 61), (0, 128)),
                     ((t, t + 2), (100, 128), (127, 128))]:
            values, decoded = decode_box(buf, head, data.shape, data.dtype, tile, "chunk")
            np.testing.assert_array_equal(values, data[tuple(slice(lo, hi) for lo, hi in tile)], err_msg=str(tile))
            lay = layout(data.shape, data.itemsize, tile, head.blocksize, head.nbytes)
            end = int(lay.starts[-1]) + lay.length  # the tile's last value, inside a block
            assert decoded == _blocks_bytes(lay) - (head.blocksize - end % head.blocksize), tile


@pytest.mark.skipif(stream_decoder() is None, reason="C-Blosc2's LZ4 and unshuffle are not exported")
def test_a_corrupt_lz4_stream_in_a_blocks_front_raises() -> None:
    """A stream whose front is not LZ4 raises. (Decoding a stream up to a length checks what
    it decodes, not the rest of the stream, as getitem does not look at the blocks it skips;
    LZ4 has no checksum, so corrupt literals decode to wrong values whole or by fronts.)"""
    data, buf = _lz4_chunk("<f4", smooth=False)
    head = parse_head(buf, "chunk")
    frame = 128 * 128 * 4
    block = 1
    pos = int(head.starts[block])
    per = head.blocksize // 4
    while (csize := struct.unpack_from("<i", buf, pos)[0]) == per:  # streams stored raw
        pos += 4 + csize
    assert 4 * csize >= per  # an LZ4 stream decoded by its front
    bad = buf.copy()
    # every sequence a match reaching 65,535 bytes back, before the block's start
    bad[pos + 4 : pos + 4 + csize] = np.resize(np.array([0x00, 0xFF, 0xFF], dtype=np.uint8), csize)
    first = block * head.blocksize // frame  # the block's first frame: its front only
    with pytest.raises(CorruptChunkError):
        decode_box(bad, parse_head(bad, "chunk"), data.shape, data.dtype, ((first, first + 1), (0, 128), (0, 128)),
                   "chunk")
