"""Parts of zstd chunks from the fronts of their streams: stores written by zarr with its
default codec (Zstd) read frame by frame, box by box and pixel by pixel in random orders equal
zarr's own reads; a frame of a deep chunk reads and decodes only the front of the chunk; the
front is kept and goes on from where it stopped, answers what it covers without a read, and
becomes the whole chunk at its end; a short estimate reads on; truncated and foreign bytes,
absent chunks and eight threads under a small budget behave.
"""

from __future__ import annotations

import math
import os
import random
from pathlib import Path

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tsexplore as tse
from tsexplore.engine import ChunkRequest, get_engine, set_cache_bytes
from tsexplore.engine.types import AuxKey
from tsexplore.errors import CorruptChunkError, MissingChunkError
from tsexplore.sources import zstd_front
from tsexplore.sources._cblosc2 import zstd_stream
from tsexplore.testing.threads import hammer

pytestmark = pytest.mark.skipif(zstd_stream() is None, reason="C-Blosc2's Zstandard is not loaded")

SHAPE, CHUNKS = (40, 64, 96), (16, 32, 32)  # edge chunks along time
BIG_SHAPE, BIG_CHUNKS = (32, 128, 256), (16, 128, 128)  # 1 MiB chunks of 16 frames


def values_of(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Half noise (stores about as many bytes as it decodes to), half a smooth field."""
    rng = np.random.default_rng(seed)
    out = rng.normal(size=shape).astype("float32")
    t, y, x = np.meshgrid(*(np.arange(n) for n in shape), indexing="ij")
    smooth = np.sin(t / 7.0) + np.cos(y / 11.0) * np.sin(x / 13.0)
    out[..., : shape[2] // 2] = smooth[..., : shape[2] // 2]
    return out


def write(path: Path, shape: tuple[int, ...] = SHAPE, chunks: tuple[int, ...] = CHUNKS, fmt: int = 3,
          dtype: str = "float32", checksum: bool = False) -> zarr.Array:
    """A store written by zarr with its default compressor (Zstd for v3; ``Zstd`` for v2 here;
    ``checksum``: zstd frames that end with their content's checksum)."""
    kwargs: dict = {}
    if checksum:
        from zarr.codecs import ZstdCodec

        kwargs = {"compressors": ZstdCodec(checksum=True)}
    if fmt == 2:
        import numcodecs

        kwargs = {"compressors": numcodecs.Zstd(level=3)}
    arr = zarr.create_array(str(path), shape=shape, chunks=chunks, dtype=dtype, zarr_format=fmt,
                            fill_value=-1, dimension_names=("time", "y", "x") if fmt == 3 else None,
                            **kwargs)
    if fmt == 2:
        arr.attrs["_ARRAY_DIMENSIONS"] = ["time", "y", "x"]
    arr[...] = values_of(shape).astype(dtype)
    return arr


def fronts() -> list[AuxKey]:
    return [k for k in get_engine().cache.keys() if type(k) is AuxKey and k.kind == "front"]


def chunk_file(path: Path, index: tuple[int, ...]) -> Path:
    return path / "c" / "/".join(map(str, index))


def test_the_default_zarr_v3_codec_is_read_from_fronts(tmp_path: Path) -> None:
    path, arr = group_store(tmp_path / "a.zarr")
    assert [type(c).__name__ for c in arr.metadata.codecs] == ["BytesCodec", "ZstdCodec"]  # zarr's default
    da = open_array(path)
    np.testing.assert_array_equal(da.isel(time=3).values, arr[3])
    snap = tse.stats()
    assert snap.part_reads == 6  # 2 x 3 chunks a frame
    # chunks of 64 KiB: the first estimate holds the whole stored chunk, decoded to its end
    assert fronts() == [] and sum(isinstance(k, ChunkRequest) for k in get_engine().cache.keys()) == 6


def open_array(path: Path, **kwargs):  # type: ignore[no-untyped-def]
    """The store as a plain lazy array through the engine (``open_dataset`` needs a group)."""
    return tse.open_dataset(path, prefetch="off", **kwargs)["data"]


def group_store(path: Path, **kwargs) -> tuple[Path, zarr.Array]:  # type: ignore[no-untyped-def]
    arr = write(path / "data", **kwargs)
    zarr.open_group(str(path), mode="a")  # the group xarray opens
    zarr.consolidate_metadata(str(path))
    return path, arr


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_frames_boxes_and_profiles_equal_zarr(tmp_path_factory: pytest.TempPathFactory, data) -> None:  # type: ignore[no-untyped-def]
    shape = BIG_SHAPE
    path, arr = group_store(tmp_path_factory.mktemp("z") / "a.zarr", shape=shape, chunks=BIG_CHUNKS)
    tse.close()
    da = open_array(path)
    keys: list[tuple] = [(data.draw(st.integers(0, shape[0] - 1)),)]  # a frame: a part
    for _ in range(data.draw(st.integers(0, 12))):
        t = data.draw(st.integers(0, shape[0] - 1))
        y0 = data.draw(st.integers(0, shape[1] - 1))
        x0 = data.draw(st.integers(0, shape[2] - 1))
        keys.append(data.draw(st.sampled_from([
            (t,),
            (t, slice(y0, None), slice(x0, min(shape[2], x0 + 7))),
            (slice(None), y0, x0),
            (slice(t, min(shape[0], t + 3)), slice(y0, min(shape[1], y0 + 5))),
            (slice(t // 16 * 16, t // 16 * 16 + 16), slice(0, 128), slice(0, 128)),  # a whole chunk
        ])))
    for key in keys:
        np.testing.assert_array_equal(da[key].values, arr[key])
    assert tse.stats().part_reads > 0


def test_a_frame_of_a_deep_chunk_reads_and_decodes_only_the_chunks_front(tmp_path: Path) -> None:
    path, arr = group_store(tmp_path / "a.zarr", shape=BIG_SHAPE, chunks=BIG_CHUNKS)
    files = sum(os.path.getsize(chunk_file(path / "data", (0, 0, x))) for x in range(2))
    da = open_array(path)
    np.testing.assert_array_equal(da.isel(time=0).values, arr[0])
    first = tse.stats()
    frame = BIG_CHUNKS[1] * BIG_CHUNKS[2] * 4  # a frame of a chunk: 64 KiB
    assert first.part_reads == 2 and 0 < first.bytes_read < files / 3
    assert 2 * frame <= first.bytes_decoded < files / 3
    assert sorted(k.at for k in fronts()) == [(0, 0, 0), (0, 0, 1)]
    # a frame the fronts hold: no read, no decoding, answered as a hit
    np.testing.assert_array_equal(da.isel(time=1).values, arr[1])
    held = tse.stats() - first
    assert held.bytes_read == 0 and held.reads == 0 and held.hits == 2
    # deeper: the fronts go on from where they stopped (the bytes after those read)
    np.testing.assert_array_equal(da.isel(time=9).values, arr[9])
    deeper = tse.stats() - first
    assert first.bytes_read + deeper.bytes_read < files
    assert 2 * 8 * frame <= deeper.bytes_decoded < 2 * (8 * frame + 3 * zstd_front.BLOCK)  # as far as the bytes go
    # the last frame: each front reaches its chunk's end and becomes the whole chunk
    np.testing.assert_array_equal(da.isel(time=15).values, arr[15])
    assert fronts() == []
    token = next(k.array for k in get_engine().cache.keys() if isinstance(k, ChunkRequest))
    assert ChunkRequest(token, (0, 0, 0)) in get_engine().cache
    before = tse.stats()
    np.testing.assert_array_equal(da[0:16, :, 0:128].values, arr[0:16, :, 0:128])
    assert (tse.stats() - before).bytes_read == 0  # whole, from the decoded tier
    assert tse.stats().bytes_read <= files + 2 * zstd_front.BLOCK


def test_a_short_estimate_reads_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, arr = group_store(tmp_path / "a.zarr", shape=BIG_SHAPE, chunks=BIG_CHUNKS)
    da = open_array(path)
    np.testing.assert_array_equal(da.isel(time=31).values, arr[31])  # ends two fronts: learns the ratio
    monkeypatch.setattr(zstd_front, "MARGIN", 0.01)  # the next estimates fall far short
    before = tse.stats()
    np.testing.assert_array_equal(da.isel(time=12).values, arr[12])
    delta = tse.stats() - before
    assert delta.part_reads == 2 and delta.store_requests == 4  # each chunk read twice
    np.testing.assert_array_equal(da[:, 100, 200].values, arr[:, 100, 200])


def test_zarr_v2_big_endian_zstd_fronts(tmp_path: Path) -> None:
    path = tmp_path / "b.zarr"
    arr = write(path / "data", shape=BIG_SHAPE, chunks=BIG_CHUNKS, fmt=2, dtype=">f4")
    zarr.open_group(str(path), mode="a", zarr_format=2)
    zarr.consolidate_metadata(str(path))
    da = open_array(path)
    for key in [(3,), (31,), (slice(None), 5, 7), (20, slice(3, 40), slice(90, 96))]:
        got = da[key].values
        assert got.dtype.isnative
        np.testing.assert_array_equal(got, arr[key])
    assert tse.stats().part_reads > 0 and fronts()


def test_a_truncated_chunk_raises_where_its_bytes_end(tmp_path: Path) -> None:
    path, arr = group_store(tmp_path / "a.zarr", shape=BIG_SHAPE, chunks=BIG_CHUNKS)
    frame = arr[1]
    target = chunk_file(path / "data", (0, 0, 1))
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2])
    da = open_array(path)
    np.testing.assert_array_equal(da.isel(time=1).values, frame)  # in the half that is there
    with pytest.raises(CorruptChunkError, match=r"\(0, 0, 1\).*zstd stream ends"):
        _ = da.isel(time=14).values
    with pytest.raises(CorruptChunkError):  # again: the broken front is not kept
        _ = da.isel(time=15).values


def test_bytes_that_are_not_a_zstd_frame_raise(tmp_path: Path) -> None:
    path, _ = group_store(tmp_path / "a.zarr")
    target = chunk_file(path / "data", (1, 0, 0))
    target.write_bytes(b"\x00" * 64 + target.read_bytes()[64:])
    da = open_array(path)
    with pytest.raises(CorruptChunkError, match="zstd"):
        _ = da.isel(time=17).values
    assert tse.stats().errors >= 1


def test_absent_chunks_fill_their_fronts_or_raise(tmp_path: Path) -> None:
    path, arr = group_store(tmp_path / "a.zarr")
    os.remove(chunk_file(path / "data", (0, 1, 2)))
    expected = arr[...]
    expected[:16, 32:64, 64:96] = -1
    da = open_array(path)
    np.testing.assert_array_equal(da.isel(time=4).values, expected[4])
    np.testing.assert_array_equal(da[:, 40, 70].values, expected[:, 40, 70])
    assert tse.stats().missing_filled >= 2
    strict = open_array(path, missing="raise")
    with pytest.raises(MissingChunkError):
        _ = strict.isel(time=5).values


def test_fronts_stay_within_the_budget_under_eight_threads(tmp_path: Path) -> None:
    path, arr = group_store(tmp_path / "a.zarr", shape=BIG_SHAPE, chunks=BIG_CHUNKS)
    values = arr[...]
    budget = 3 * math.prod(BIG_CHUNKS) * 4  # three fronts or chunks
    set_cache_bytes(budget)
    da = tse.open_dataset(path)["data"]

    def worker(seed: int) -> None:
        r = random.Random(seed)
        for _ in range(20):
            t, y, x = r.randrange(32), r.randrange(128), r.randrange(256)
            key = r.choice([(t,), (slice(None), y, x), (t, slice(y, None)), (slice(0, 16), slice(0, 64))])
            np.testing.assert_array_equal(da[key].values, values[key])

    errors = hammer(worker)
    assert not errors, errors[0]
    snap = tse.stats()
    assert snap.cache_high_water <= budget and snap.evictions > 0 and snap.part_reads > 0


def test_a_whole_chunk_read_goes_on_from_its_front(tmp_path: Path) -> None:
    path, arr = group_store(tmp_path / "a.zarr", shape=BIG_SHAPE, chunks=BIG_CHUNKS)
    size = os.path.getsize(chunk_file(path / "data", (1, 0, 0)))
    da = open_array(path)
    np.testing.assert_array_equal(da.isel(time=18).values[:, :128], arr[18, :, :128])
    front = tse.stats()
    assert 0 < front.bytes_read < size and len(fronts()) == 2
    consumed = next(get_engine().cache.get(k).consumed for k in fronts() if k.at == (1, 0, 0))
    np.testing.assert_array_equal(da[16:32, :, 0:128].values, arr[16:32, :, 0:128])  # one whole chunk
    delta = tse.stats() - front
    assert delta.reads == 1 and delta.part_reads == 0
    assert delta.bytes_read == size - consumed  # the rest of the object
    assert [k.at for k in fronts()] == [(1, 0, 1)]  # the other chunk's front stays


def test_frames_that_end_with_a_checksum(tmp_path: Path) -> None:
    path, arr = group_store(tmp_path / "a.zarr", shape=BIG_SHAPE, chunks=BIG_CHUNKS, checksum=True)
    da = open_array(path)
    for t in (5, 2, 15, 20):
        np.testing.assert_array_equal(da.isel(time=t).values, arr[t])
    np.testing.assert_array_equal(da[16:32, :, 128:].values, arr[16:32, :, 128:])  # on from its front
    np.testing.assert_array_equal(da.values, arr[...])
    assert fronts() == []  # every front went on to its chunk's end
