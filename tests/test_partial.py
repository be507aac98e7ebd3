"""Parts of chunks through the engine: thin selections of blosc-compressed Zarr arrays
decode only the blocks they need (local pread, remote range requests), equal what zarr
reads, fill absent chunks, stay inside the cache budget with the encoded tier, and count
what they decoded; other codecs keep whole-chunk decoding (zstd's fronts:
``test_zstd_front.py``).
"""

from __future__ import annotations

import math
import os
import random
import struct
import threading
from pathlib import Path
from typing import cast

import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, Crc32cCodec, GzipCodec, ZstdCodec

import tsexplore as tse
from tsexplore.engine import ChunkRequest, get_engine, set_cache_bytes
from tsexplore.engine.cache import encoded
from tsexplore.engine.types import STORED, WHOLE, AuxKey, Blocks
from tsexplore.errors import CorruptChunkError, MissingChunkError
from tsexplore.sources._cblosc2 import item_decoder
from tsexplore.sources.link import LinkModel
from tsexplore.testing.threads import hammer

pytestmark = pytest.mark.skipif(item_decoder() is None, reason="C-Blosc2 is not loaded")

SHAPE, CHUNKS = (40, 64, 96), (16, 32, 32)  # edge chunks on time; 16 frames of 4 KiB a chunk


def write(path: Path, compressors=None, fmt: int = 3, dtype: str = "float32", order: str = "C"):  # type: ignore[no-untyped-def]
    """A store of known values; frames are whole blosc blocks (``blocksize`` 4 KiB)."""
    values = (np.arange(math.prod(SHAPE)) % 1013 * 0.5).astype(dtype).reshape(SHAPE)
    if compressors is None:
        compressors = BloscCodec(cname="zstd", clevel=3, shuffle="shuffle", blocksize=4096)
    group = zarr.open_group(str(path), mode="w", zarr_format=fmt)
    if fmt == 2:
        import numcodecs

        arr = group.create_array(
            "data", shape=SHAPE, chunks=CHUNKS, dtype=dtype, order=order,
            compressors=numcodecs.Blosc("lz4", 5, numcodecs.Blosc.BITSHUFFLE, blocksize=2048),
            chunk_key_encoding={"name": "v2", "separator": "/"}, fill_value=-1,
        )
        arr.attrs["_ARRAY_DIMENSIONS"] = ["time", "y", "x"]
    else:
        arr = group.create_array(
            "data", shape=SHAPE, chunks=CHUNKS, dtype=dtype, compressors=compressors,
            dimension_names=("time", "y", "x"), fill_value=-1,
        )
    arr[...] = values
    zarr.consolidate_metadata(str(path))
    return values


def ortho(values: np.ndarray, key: tuple) -> np.ndarray:
    """NumPy's answer to an orthogonal (outer) selection: one axis at a time."""
    out, axis = values, 0
    for k in key:
        if isinstance(k, int):
            out = np.take(out, k, axis=axis)
            continue
        out = out[(slice(None),) * axis + (k,)]
        axis += 1
    return out


def selections() -> list[tuple]:
    return [
        (3,),  # a frame
        (17, slice(5, 40), slice(10, 90)),  # a window of a frame
        (slice(None), 33, 71),  # a pixel's profile
        (slice(2, 30), slice(40, 44)),  # a few rows through time
        (slice(None, None, 3), slice(1, 60, 7), 5),  # strided
        ([0, 39, 7, 7], slice(0, 64), [95, 0, 3]),  # orthogonal index arrays
        (slice(None),),  # everything: whole chunks
    ]


def test_thin_selections_decode_only_their_blocks_and_equal_zarr(tmp_path: Path) -> None:
    values = write(tmp_path / "a.zarr")
    da = tse.open_dataset(tmp_path / "a.zarr", prefetch="off")["data"]
    for key in selections():
        np.testing.assert_array_equal(da[key].values, ortho(values, key))
    snap = tse.stats()
    assert snap.part_reads > 0
    assert snap.reads > snap.part_reads  # the whole-array selection read whole chunks
    # one frame alone: its 6 chunks' single 4 KiB blocks, each a little stored data
    tse.close()
    da = tse.open_dataset(tmp_path / "a.zarr", prefetch="off")["data"]
    frame = da.isel(time=20).values
    np.testing.assert_array_equal(frame, values[20])
    snap = tse.stats()
    assert snap.part_reads == 6 and snap.bytes_decoded == 6 * 4096 == snap.bytes_useful
    assert snap.decoded_ratio == 1.0
    chunk_files = sum(
        os.path.getsize(tmp_path / "a.zarr" / "data" / "c" / "1" / str(y) / str(x))
        for y in range(2) for x in range(3)
    )
    assert snap.bytes_read < chunk_files / 4  # heads and one block, not the chunks


def test_a_reader_decodes_its_parts_itself_while_every_read_thread_is_busy(tmp_path: Path) -> None:
    """Parts of local chunks a reader waits for are read in its own thread (and on idle read
    threads), not queued behind the read threads' work: a frame comes back while every read
    thread is held by something else."""
    values = write(tmp_path / "a.zarr")
    da = tse.open_dataset(tmp_path / "a.zarr", prefetch="off")["data"]
    engine = get_engine()
    release, started = threading.Event(), threading.Semaphore(0)

    def hold() -> None:
        started.release()
        release.wait(30)

    threads = engine._io.threads
    for _ in range(threads):
        engine._io.submit(hold)
    try:
        for _ in range(threads):
            assert started.acquire(timeout=10)
        tse.config.set(wait_timeout=10)  # (the test's settings are restored after it)
        frame = da.isel(time=20).values
        np.testing.assert_array_equal(frame, values[20])
        snap = tse.stats()
        assert snap.part_reads == 6 and snap.misses == 6 and snap.bytes_decoded == 6 * 4096
    finally:
        release.set()


def test_absent_chunks_fill_their_parts_or_raise(tmp_path: Path) -> None:
    values = write(tmp_path / "a.zarr")
    os.remove(tmp_path / "a.zarr" / "data" / "c" / "0" / "1" / "2")
    values[:16, 32:64, 64:96] = -1
    da = tse.open_dataset(tmp_path / "a.zarr", prefetch="off")["data"]
    np.testing.assert_array_equal(da.isel(time=4).values, values[4])
    np.testing.assert_array_equal(da[:, 40, 70].values, values[:, 40, 70])
    assert tse.stats().missing_filled >= 2
    strict = tse.open_dataset(tmp_path / "a.zarr", prefetch="off", missing="raise")["data"]
    with pytest.raises(MissingChunkError):
        _ = strict.isel(time=5).values


@pytest.mark.parametrize("codec", ["gzip", "none", "blosc+crc32c", "zstd+crc32c"])
def test_codecs_without_blocks_keep_whole_chunk_decoding(tmp_path: Path, codec: str) -> None:
    compressors = {
        "gzip": [GzipCodec()], "none": [], "blosc+crc32c": [BloscCodec(), Crc32cCodec()],
        "zstd+crc32c": [ZstdCodec(), Crc32cCodec()],
    }[codec]
    path = tmp_path / "a.zarr"
    values = write(path, compressors=compressors)
    da = tse.open_dataset(path, prefetch="off")["data"]
    for key in selections()[:4]:
        np.testing.assert_array_equal(da[key].values, ortho(values, key))
    assert tse.stats().part_reads == 0


def test_zarr_v2_big_endian_blosc_parts(tmp_path: Path) -> None:
    values = write(tmp_path / "b.zarr", fmt=2, dtype=">f4")
    da = tse.open_dataset(tmp_path / "b.zarr", prefetch="off")["data"]
    for key in selections():
        got = da[key].values
        np.testing.assert_array_equal(got, ortho(values, key))
        assert got.dtype.isnative or got.dtype.itemsize == 1
    assert tse.stats().part_reads > 0


def test_the_encoded_tier_holds_frames_so_the_next_frame_reads_nothing(tmp_path: Path) -> None:
    values = write(tmp_path / "a.zarr")
    tse.config.set(keep_stored="always")
    da = tse.open_dataset(tmp_path / "a.zarr", prefetch="off")["data"]
    np.testing.assert_array_equal(da.isel(time=1).values, values[1])
    first = tse.stats()
    assert first.cache_encoded_entries == 6 and first.cache_encoded_bytes > 0
    held = [k for k in get_engine().cache.keys() if encoded(k)]  # the frames, under their stored key
    assert {k.part for k in held} == {STORED} and all(k == k.whole.stored for k in held)
    np.testing.assert_array_equal(da.isel(time=2).values, values[2])
    delta = tse.stats() - first
    assert delta.bytes_read == 0 and delta.encoded_hits == 6 and delta.part_reads == 6
    assert delta.bytes_decoded == 6 * 4096
    # a whole-chunk read of a held frame decodes it without reading the store
    np.testing.assert_array_equal(da[0:16, 0:32, 0:32].values, values[0:16, 0:32, 0:32])
    assert (tse.stats() - first).bytes_read == 0
    snap = tse.stats()
    assert snap.cache_bytes == snap.cache_encoded_bytes + get_engine().cache.decoded_bytes
    assert "encoded" in repr(snap) and "per useful byte" in repr(snap)


def test_local_parts_keep_the_heads_not_the_frames(tmp_path: Path) -> None:
    values = write(tmp_path / "a.zarr")
    da = tse.open_dataset(tmp_path / "a.zarr", prefetch="off")["data"]
    np.testing.assert_array_equal(da.isel(time=1).values, values[1])
    heads = tse.stats()
    np.testing.assert_array_equal(da.isel(time=2).values, values[2])
    delta = tse.stats() - heads
    assert delta.encoded_hits == 0 and 0 < delta.bytes_read < 6 * 4096  # blocks only
    assert tse.stats().cache_encoded_bytes < 6 * 1024  # six heads
    held = [k for k in get_engine().cache.keys() if encoded(k)]
    assert held and all(type(k) is AuxKey and k.kind == "head" for k in held)


def test_a_request_names_the_chunk_and_what_of_it() -> None:
    whole = ChunkRequest("t", (1, 2))
    box = ((0, 1), (0, 4))
    part = ChunkRequest("t", (1, 2), Blocks(box))
    assert whole.part is WHOLE and whole.box is None and whole.whole is whole
    assert part != whole and part.box == box and part.whole == whole
    assert whole.stored.part is STORED and whole.stored.box is None and whole.stored != whole
    assert whole != ("t", (1, 2), WHOLE) and hash(whole) == hash(ChunkRequest("t", (1, 2)))
    with pytest.raises(AttributeError):
        whole.index = (0, 0)  # type: ignore[misc]  # frozen


def test_parts_and_frames_stay_within_the_budget_under_eight_threads(tmp_path: Path) -> None:
    values = write(tmp_path / "a.zarr")
    tse.config.set(keep_stored="always")
    budget = 150_000  # a few stored frames and decoded chunks
    set_cache_bytes(budget)
    da = tse.open_dataset(tmp_path / "a.zarr")["data"]

    def worker(seed: int) -> None:
        r = random.Random(seed)
        for _ in range(25):
            t, y, x = r.randrange(40), r.randrange(64), r.randrange(96)
            key = r.choice([(t,), (slice(None), y, x), (slice(t, t + 2), slice(y, None)),
                            (slice(0, 16), slice(0, 32), slice(0, 32))])
            np.testing.assert_array_equal(da[key].values, ortho(values, key))

    errors = hammer(worker, timeout=60)
    assert not errors, errors[0]
    snap = tse.stats()
    assert snap.cache_high_water <= budget and snap.evictions > 0
    assert snap.part_reads > 0 and snap.encoded_hits > 0


def test_a_corrupt_block_table_in_the_store_raises(tmp_path: Path) -> None:
    write(tmp_path / "a.zarr")
    path = tmp_path / "a.zarr" / "data" / "c" / "0" / "0" / "0"
    frame = bytearray(path.read_bytes())
    struct.pack_into("<i", frame, 16 + 4 * 3, struct.unpack_from("<i", frame, 16 + 4 * 3)[0] + 2)
    path.write_bytes(bytes(frame))
    da = tse.open_dataset(tmp_path / "a.zarr", prefetch="off")["data"]
    with pytest.raises(CorruptChunkError):
        _ = da.isel(time=3).values  # block 3 holds frame 3
    assert tse.stats().errors == 1


def test_remote_parts_fetch_the_head_and_the_blocks_by_range(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from tsexplore.testing.http import StoreServer

    values = write(tmp_path / "a.zarr")
    # a slow link (20 ms a request, 100 kB/s), as measured: ranges pay for these frames
    monkeypatch.setattr(LinkModel, "latency_floor", property(lambda self: 0.02))
    monkeypatch.setattr(LinkModel, "delivered", lambda self: 1e5)
    with StoreServer(tmp_path / "a.zarr") as srv:
        da = tse.open_dataset(srv.url, prefetch="off")["data"]
        before = len(srv.requests)
        np.testing.assert_array_equal(da.isel(time=9).values, values[9])
        chunk_requests = [r for r in srv.requests[before:] if "/c/" in r[1]]
        assert len(chunk_requests) == 12  # per chunk: its head, then its one block
        assert all(status == 206 for _, _, status in chunk_requests)
        snap = tse.stats()
        assert snap.part_reads == 6 and snap.cache_encoded_entries == 6  # the heads
        before = len(srv.requests)
        np.testing.assert_array_equal(da.isel(time=10).values, values[10])
        assert len(srv.requests) - before == 6  # heads held: the blocks only
        for key in selections():
            np.testing.assert_array_equal(da[key].values, ortho(values, key))


def test_remote_play_keeps_whole_frames_and_reads_the_next_slab_ahead(tmp_path: Path) -> None:
    from tsexplore.testing.http import StoreServer

    values = write(tmp_path / "a.zarr")
    with StoreServer(tmp_path / "a.zarr", latency=0.005) as srv:
        da = tse.open_dataset(srv.url)["data"]
        for t in range(40):
            np.testing.assert_array_equal(da.isel(time=t).values, values[t])
        snap = tse.stats()
        assert snap.encoded_hits > 0 and snap.cache_encoded_entries >= 6
        assert snap.speculative_reads > 0 and snap.prefetch_used_ratio >= 0.7, snap
        assert snap.part_reads > 0


def test_the_link_model_fetches_ranges_only_when_they_pay() -> None:
    link = LinkModel()
    assert link.ranges_pay(10_000_000, 100_000, False)  # unmeasured: ranges (measures latency)
    link.record(1000, 0.02)
    assert not link.ranges_pay(10_000_000, 100_000, False)  # then one whole frame
    link.record(4_000_000, 0.02 + 0.04)  # 100 MB/s
    # a 2 MB frame over 20 ms round trips: the whole frame (20 ms + 20 ms) beats two trips
    assert not link.ranges_pay(2_000_000, 100_000, False)
    # a 64 MB frame: 660 ms whole against 41 ms by range
    assert link.ranges_pay(64_000_000, 100_000, False)
    assert link.ranges_pay(2_000_000, 100_000, True)  # head known: one trip either way
    assert 1 << 16 <= link.gap(1 << 16) <= 1 << 24


def _zarr_v2_default_blosc(path: Path, frames: int = 32) -> np.ndarray:
    """A Zarr v2 store written by zarr with numcodecs' ``Blosc()`` defaults (LZ4, clevel 5,
    byte shuffle, blosc's own block size: 512 KiB here, eight frames of a chunk)."""
    import numcodecs

    t, y, x = np.meshgrid(np.arange(frames), np.arange(128), np.arange(128), indexing="ij")
    values = (np.sin(t / 5.0) + np.cos(y / 9.0) * np.sin(x / 7.0)
              + np.random.default_rng(3).normal(0, 0.1, t.shape)).astype("float32")
    group = zarr.open_group(str(path), mode="w", zarr_format=2)
    arr = group.create_array("data", shape=values.shape, chunks=(16, 128, 128), dtype="float32",
                             compressors=numcodecs.Blosc(), fill_value=0)
    arr.attrs["_ARRAY_DIMENSIONS"] = ["time", "y", "x"]
    arr[...] = values
    zarr.consolidate_metadata(str(path))
    return values


def test_a_frame_inside_a_block_of_lz4_streams_decodes_the_block_up_to_its_end(tmp_path: Path) -> None:
    """Through the engine, against the values written: a frame inside a blosc block of LZ4
    streams decodes the block's front up to the frame's end; the frame that ends the block
    decodes it whole."""
    values = _zarr_v2_default_blosc(tmp_path / "v2.zarr")
    ds = tse.open_dataset(tmp_path / "v2.zarr", prefetch="off")
    np.testing.assert_array_equal(ds["data"].values, values)  # the head of every chunk read
    tse.close()
    da = tse.open_dataset(tmp_path / "v2.zarr", prefetch="off")["data"]
    np.testing.assert_array_equal(da.isel(time=20).values, values[20])  # learns the block size
    frame = 128 * 128 * 4
    for t, decoded in [(26, 3), (24, 1), (31, 8), (3, 4), (15, 8)]:  # block 1 of chunk 1, ...
        before = tse.stats()
        np.testing.assert_array_equal(da.isel(time=t).values, values[t])
        delta = tse.stats() - before
        assert delta.part_reads == 1 and delta.bytes_decoded == decoded * frame, t


def test_a_frame_that_decodes_its_whole_block_keeps_the_block_for_its_other_frames(tmp_path: Path) -> None:
    """The last frame of a block of LZ4 streams decodes the block whole: the read asks for
    the block, a reader keeps it, and the block's other frames are cut from it with nothing
    read or decoded; a frame decoded by its block's front is one-pass (decoded each time).
    Against xarray's own zarr backend."""
    import xarray as xr

    _zarr_v2_default_blosc(tmp_path / "v2.zarr")
    truth = xr.open_dataset(tmp_path / "v2.zarr", engine="zarr", chunks=None)["data"]
    da = tse.open_dataset(tmp_path / "v2.zarr", prefetch="off")["data"]
    xr.testing.assert_identical(da.isel(time=20).load(), truth.isel(time=20))  # learns the block size
    frame = 128 * 128 * 4
    before = tse.stats()
    xr.testing.assert_identical(da.isel(time=31).load(), truth.isel(time=31))  # ends block 1 of chunk 1
    delta = tse.stats() - before
    assert delta.part_reads == 1 and delta.bytes_decoded == 8 * frame
    block = ChunkRequest(da.tse.sources[0].token, (1, 0, 0), Blocks(((8, 16), (0, 128), (0, 128))))
    assert get_engine().cache.get(block) is not None
    for t in (27, 24, 30, 25, 29, 26, 28):  # no steady step (a view made ahead would be a hit too)
        before = tse.stats()
        xr.testing.assert_identical(da.isel(time=t).load(), truth.isel(time=t))
        delta = tse.stats() - before
        assert (delta.part_reads, delta.bytes_decoded, delta.hits) == (0, 0, 1), t
    for _ in range(2):
        before = tse.stats()
        xr.testing.assert_identical(da.isel(time=3).load(), truth.isel(time=3))
        delta = tse.stats() - before
        assert (delta.part_reads, delta.bytes_decoded) == (1, 4 * frame)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_frames_with_kept_blocks_equal_xarray_and_decode_at_most_each_frames_blocks(
        tmp_path: Path, seed: int) -> None:
    """Every frame in a random order, an edge chunk of 12 frames included (its second block
    reaches past the array's end: not asked for whole), equals xarray's zarr backend, and the
    bytes decoded are at most what decoding each frame's blocks alone decodes (blocks of 8
    frames: a frame ``k`` of its block decodes ``k + 1`` frames of it, the last one all 8)."""
    import xarray as xr

    _zarr_v2_default_blosc(tmp_path / "v2.zarr", frames=28)
    truth = xr.open_dataset(tmp_path / "v2.zarr", engine="zarr", chunks=None)["data"]
    da = tse.open_dataset(tmp_path / "v2.zarr", prefetch="off")["data"]
    xr.testing.assert_identical(da.isel(time=0).load(), truth.isel(time=0))  # learns the block size
    order = random.Random(seed).sample(range(28), 28)
    before = tse.stats()
    for t in order:
        xr.testing.assert_identical(da.isel(time=t).load(), truth.isel(time=t))
    decoded = (tse.stats() - before).bytes_decoded
    frame = 128 * 128 * 4
    assert decoded <= sum((t % 16 % 8 + 1) * frame for t in order)
    last = [t for t in order if t % 16 % 8 == 7 and t < 24]  # ends a block inside the array
    later = [t for t in order if any(t // 8 == b // 8 and order.index(t) > order.index(b) for b in last)]
    assert decoded <= sum((t % 16 % 8 + 1) * frame for t in order if t not in later)


def test_a_frame_of_a_chunks_first_block_reads_that_block_from_disk_not_the_file(tmp_path: Path) -> None:
    """A cold frame in a chunk's first blosc block reads the chunk's head and that block.
    The kernel's read-ahead takes a read at a file's start followed by the bytes after it
    for a sequential read and reads on (``read_ahead_kb``): a plain read of the same ranges
    is the reference, and where it leaves most of the file in the page cache, the engine's
    read leaves little of it (``mincore``)."""
    from tsexplore.testing.pagecache import evict, resident_fraction

    values = np.random.default_rng(0).standard_normal((16, 256, 256)).astype("float32")
    group = zarr.open_group(str(tmp_path / "n.zarr"), mode="w", zarr_format=3)
    arr = group.create_array(
        "data", shape=values.shape, chunks=values.shape, dtype="float32", dimension_names=("time", "y", "x"),
        compressors=BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", blocksize=256 * 1024),
    )
    arr[...] = values
    chunk = tmp_path / "n.zarr" / "data" / "c" / "0" / "0" / "0"
    size = os.path.getsize(chunk)
    if (evict([chunk]) or 0.0) > 0.01 or resident_fraction([chunk]) is None:
        pytest.skip("the page cache keeps this folder's files (tmpfs?) or mincore is missing")
    head = 16 + 4 * 16  # blosc header and the offsets of its 16 blocks
    first = struct.unpack_from("<I", chunk.read_bytes(), 20)[0]  # where block 1 starts
    evict([chunk])
    fd = os.open(chunk, os.O_RDONLY)
    try:
        os.pread(fd, head, 0)
        os.pread(fd, first - head, head)
    finally:
        os.close(fd)
    plain = cast(float, resident_fraction([chunk]))
    if plain < 0.5:
        pytest.skip(f"this disk reads ahead little ({plain:.0%} of a {size}-byte file after a plain read)")
    evict([chunk])
    da = tse.open_dataset(tmp_path / "n.zarr", prefetch="off")["data"]
    np.testing.assert_array_equal(da.isel(time=0).values, values[0])
    assert tse.stats().part_reads == 1
    assert cast(float, resident_fraction([chunk])) < 2 * first / size + 0.05
