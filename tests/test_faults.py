"""Damaged stores give clear errors that name the chunk, never wrong data or a dead process.

Short chunk files, flipped bytes (zstd checksum, crc32c), a zstd bomb that would inflate to
256 MiB, a ``.npy`` truncated while memory-mapped (SIGBUS otherwise), missing chunks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, Crc32cCodec, GzipCodec, ZstdCodec

import tsexplore as tse
from tsexplore.errors import CorruptChunkError, MissingChunkError, TruncatedFileError

SHAPE, CHUNKS = (8, 32, 32), (4, 16, 16)
CODECS = {
    "zstd": [ZstdCodec(level=1)],
    "zstd-checksum": [ZstdCodec(level=1, checksum=True)],
    "blosc": [BloscCodec(cname="lz4")],
    "gzip": [GzipCodec(level=1)],
    "none": None,
    "crc32c": [Crc32cCodec()],
}


def make_store(path: Path, codec: str, fill_value: float = 0.0) -> np.ndarray:
    values = np.random.default_rng(0).standard_normal(SHAPE).astype("float32")
    arr = zarr.create_array(
        str(path),
        shape=SHAPE,
        chunks=CHUNKS,
        dtype="float32",
        compressors=CODECS[codec],
        fill_value=fill_value,
        dimension_names=("time", "y", "x"),
    )
    arr[...] = values
    return values


def chunk_file(path: Path, idx: tuple[int, ...]) -> Path:
    return path / "c" / "/".join(map(str, idx))


def read_chunk(path: Path, idx: tuple[int, ...], **kwargs) -> np.ndarray:  # type: ignore[no-untyped-def]
    ds = tse.open_dataset(path, **kwargs)
    region = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, CHUNKS))
    return ds[next(iter(ds.data_vars))][region].values


@pytest.mark.parametrize("codec", list(CODECS))
def test_truncated_chunk_file_is_corrupt(tmp_path: Path, codec: str) -> None:
    path = tmp_path / "s.zarr"
    values = make_store(path, codec)
    f = chunk_file(path, (1, 0, 1))
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptChunkError) as info:
        read_chunk(path, (1, 0, 1))
    assert "(1, 0, 1)" in str(info.value) and "c/1/0/1" in str(info.value)
    assert info.value.index == (1, 0, 1)
    # the neighbours still read correctly
    np.testing.assert_array_equal(read_chunk(path, (1, 0, 0)), values[4:8, 0:16, 0:16])
    assert tse.stats().errors == 1


@pytest.mark.parametrize("codec", ["zstd-checksum", "crc32c"])
def test_flipped_byte_is_detected(tmp_path: Path, codec: str) -> None:
    path = tmp_path / "s.zarr"
    make_store(path, codec)
    f = chunk_file(path, (0, 1, 1))
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x40
    f.write_bytes(bytes(data))
    with pytest.raises(CorruptChunkError, match=r"\(0, 1, 1\)"):
        read_chunk(path, (0, 1, 1))


def test_empty_chunk_file_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    make_store(path, "crc32c")
    chunk_file(path, (0, 0, 0)).write_bytes(b"")
    with pytest.raises(CorruptChunkError, match="crc32c"):
        read_chunk(path, (0, 0, 0))


BOMB_SCRIPT = r"""
import json, resource, sys
import numpy as np
import tsexplore as tse
from tsexplore.errors import CorruptChunkError
np.zeros(1)  # numpy and its allocator are in place before the baseline
ds = tse.open_dataset(sys.argv[1])
name = next(iter(ds.data_vars))
ds[name][0:4, 0:16, 16:32].values  # a good chunk: the engine and decoders are warmed up
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
try:
    ds[name][0:4, 0:16, 0:16].values
    outcome = "no error"
except CorruptChunkError as exc:
    outcome = "corrupt: " + str(exc)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
tse.close()
print(json.dumps({"outcome": outcome, "growth": peak - base, "peak": peak}))
"""


@pytest.mark.slow
def test_zstd_bomb_is_refused_before_allocating(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    make_store(path, "zstd")
    bomb = numcodecs.Zstd(level=3).encode(np.zeros(256 * 2**20, dtype=np.uint8))
    assert len(bomb) < 64 * 1024
    chunk_file(path, (0, 0, 0)).write_bytes(bomb)
    env = {**os.environ, "TSEXPLORE_SAMPLE_SIZE": "small"}
    out = subprocess.run(
        [sys.executable, "-c", BOMB_SCRIPT, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["outcome"].startswith("corrupt:"), result
    assert "268435456" in result["outcome"] and "(0, 0, 0)" in result["outcome"]
    assert result["growth"] < 32 * 2**20, result  # far below the 256 MiB it would inflate to


TRUNCATE_SCRIPT = r"""
import json, os, sys
import numpy as np
import tsexplore as tse
from tsexplore.errors import TruncatedFileError
path = sys.argv[1]
ds = tse.open_dataset(path, grid=(10, 100))
first = ds["arr"][0:10].values
os.truncate(path, os.path.getsize(path) // 2)
try:
    ds["arr"][90:100].values
    outcome = "no error"
except TruncatedFileError as exc:
    outcome = "truncated: " + str(exc)
tse.close()
print(json.dumps({"outcome": outcome, "first": float(first.sum())}))
"""


@pytest.mark.slow
def test_npy_truncated_while_open_raises_and_the_process_survives(tmp_path: Path) -> None:
    path = tmp_path / "arr.npy"
    values = np.arange(100 * 100, dtype="float64").reshape(100, 100)
    np.save(path, values)
    env = {**os.environ, "TSEXPLORE_SAMPLE_SIZE": "small"}
    out = subprocess.run(
        [sys.executable, "-c", TRUNCATE_SCRIPT, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, (out.returncode, out.stderr[-3000:])  # -7 would be SIGBUS
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["outcome"].startswith("truncated:"), result
    assert "(9, 0)" in result["outcome"]
    assert result["first"] == float(values[:10].sum())


def test_npy_truncated_in_process(tmp_path: Path) -> None:
    path = tmp_path / "arr.npy"
    np.save(path, np.ones((64, 64), dtype="float32"))
    ds = tse.open_dataset(path, grid=(8, 64))
    assert ds["arr"][:8].values.sum() == 8 * 64
    os.truncate(path, 1000)
    with pytest.raises(TruncatedFileError, match="shrank"):
        _ = ds["arr"][56:].values


def test_missing_chunk_reads_as_fill_by_default_and_raises_when_strict(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    values = make_store(path, "zstd", fill_value=np.nan)
    chunk_file(path, (1, 1, 0)).unlink()
    with pytest.raises(MissingChunkError, match="missing='fill'") as info:
        read_chunk(path, (1, 1, 0), missing="raise")
    assert info.value.index == (1, 1, 0)
    tse.close()
    filled = tse.open_dataset(path)  # the default reads an absent chunk as zarr does
    out = filled[next(iter(filled.data_vars))].values
    assert np.isnan(out[4:8, 16:32, 0:16]).all()
    expected = values.copy()
    expected[4:8, 16:32, 0:16] = np.nan
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(out, zarr.open_array(str(path), mode="r")[...])
    assert tse.stats().missing_filled == 1


def test_sparse_store_written_by_zarr_reads_with_missing_fill(tmp_path: Path) -> None:
    """zarr skips chunks equal to the fill value; the default reads them as zarr would."""
    path = tmp_path / "sparse.zarr"
    arr = zarr.create_array(
        str(path),
        shape=(8, 8),
        chunks=(4, 4),
        dtype="int16",
        fill_value=7,
        dimension_names=("y", "x"),
    )
    arr[0:4, 0:4] = np.arange(16, dtype="int16").reshape(4, 4)
    ds = tse.open_dataset(path)
    np.testing.assert_array_equal(ds[next(iter(ds.data_vars))].values, arr[...])
    assert tse.stats().missing_filled == 3
    with pytest.raises(MissingChunkError):
        _ = tse.open_dataset(path, missing="raise")[next(iter(ds.data_vars))].values


def test_store_rewritten_between_opens_is_not_served_stale(tmp_path: Path) -> None:
    """``arr[...] = new`` rewrites only chunk files; a new open must see the new values."""
    path = tmp_path / "s.zarr"
    arr = zarr.create_array(str(path), shape=(4, 4), chunks=(2, 2), dtype="int32")
    arr[...] = 1
    assert tse.open_dataset(path)["data"].values.sum() == 16
    arr[...] = 2
    np.testing.assert_array_equal(tse.open_dataset(path)["data"].values, np.full((4, 4), 2))
    sparse = tmp_path / "sparse.zarr"
    z = zarr.create_array(str(sparse), shape=(4,), chunks=(2,), dtype="int16", fill_value=9)
    z[0:2] = [1, 2]
    assert tse.open_dataset(sparse)["data"].values.tolist() == [1, 2, 9, 9]
    with pytest.raises(MissingChunkError):  # the fill values cached above are not reused
        _ = tse.open_dataset(sparse, missing="raise")["data"].values
