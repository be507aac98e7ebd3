"""Every read goes through the one pipeline: ``tsexplore.engine.execute.execute``.

The engine calls ``execute`` from its two drivers only; a wrapper around it records every batch
(the source, what each request asked for). Each kind of read -- whole, blosc blocks, stored
bytes, a sharded inner chunk, local, remote over HTTP and S3, a source that reads itself, a
chunk left to zarr's codecs -- and the reads a reduction, a loader batch and the Explorer make
show up there, and the engine counts no read that did not.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, BytesCodec, ShardingCodec, TransposeCodec

import tsexplore as tse
from tsexplore.engine import ChunkRequest, Priority, get_engine
from tsexplore.engine.types import STORED, WHOLE, Blocks
from tsexplore.sources import SyntheticSource
from tsexplore.sources._cblosc2 import item_decoder
from tsexplore.xarray import sources_of

SHAPE, CHUNKS = (32, 64, 64), (16, 32, 32)


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[Any, tuple[ChunkRequest, ...], bool]]]:
    """Each batch ``execute`` ran: (source, requests, nested)."""
    from tsexplore.engine import execute as module
    from tsexplore.engine import scheduler

    seen: list[tuple[Any, tuple[ChunkRequest, ...], bool]] = []
    execute = module.execute

    def recorded(source, requests, services, nested=False):  # type: ignore[no-untyped-def]
        seen.append((source, tuple(requests), nested))
        return execute(source, requests, services, nested)

    monkeypatch.setattr(scheduler, "execute", recorded)
    yield seen


def _reads(batches: list) -> int:  # type: ignore[type-arg]
    """Reads the engine counts: every request of every batch but the nested ones."""
    return sum(len(requests) for _, requests, nested in batches if not nested)


def _store(path: Path, codecs: str = "blosc") -> np.ndarray:
    values = (np.arange(np.prod(SHAPE)) % 997 * 0.5).astype("float32").reshape(SHAPE)
    kwargs: dict[str, Any] = {"compressors": BloscCodec(cname="zstd", blocksize=4096)}
    if codecs == "sharded":
        kwargs = {"compressors": None, "serializer": ShardingCodec(
            chunk_shape=(1, 32, 32), codecs=[BytesCodec(), BloscCodec(cname="zstd")])}
    elif codecs == "transpose":  # a chain tsexplore leaves to zarr
        kwargs = {"filters": [TransposeCodec(order=(0, 2, 1))]}
    group = zarr.open_group(str(path), mode="w")
    chunks = (16, 64, 64) if codecs == "sharded" else CHUNKS  # a frame's inner chunks in one shard
    arr = group.create_array("v", shape=SHAPE, chunks=chunks, dtype="float32",
                             dimension_names=("time", "y", "x"), **kwargs)
    arr[...] = values
    zarr.consolidate_metadata(str(path))
    return values


def test_whole_blocks_stored_sharded_and_zarr_reads_pass_through_execute(tmp_path: Path, batches: list) -> None:  # type: ignore[type-arg]
    values = _store(tmp_path / "a.zarr")
    da = tse.open_dataset(tmp_path / "a.zarr", prefetch="off")["v"]
    np.testing.assert_array_equal(da[:16, :32, :32].values, values[:16, :32, :32])  # whole
    if item_decoder() is not None:
        np.testing.assert_array_equal(da.isel(time=3).values, values[3])  # blosc blocks
    (src,) = sources_of(da)
    engine = get_engine()
    (stored,) = engine.submit(src, [ChunkRequest(src.token, (1, 1, 1), STORED)], Priority.SPECULATIVE)
    assert stored.result(10) is None and ChunkRequest(src.token, (1, 1, 1), STORED) in engine.cache
    parts = {type(r.part) for _, requests, _ in batches for r in requests}
    assert parts == ({type(WHOLE), type(STORED), Blocks} if item_decoder() else {type(WHOLE), type(STORED)})

    sharded = _store(tmp_path / "s.zarr", "sharded")
    ds = tse.open_dataset(tmp_path / "s.zarr", prefetch="off")
    np.testing.assert_array_equal(ds["v"][5].values, sharded[5])
    (units,) = sources_of(ds["v"])
    # a local store's units of inner chunks: here a whole 16 x 64 x 64 shard of 1 x 32 x 32
    assert units.decoder == "tsexplore-sharded" and units.chunks == (16, 64, 64)
    # frame 5 is a box of its units, decoded from the inner chunks that hold it
    assert any(isinstance(r.part, Blocks) for s, requests, _ in batches if s is units for r in requests)

    left = _store(tmp_path / "t.zarr", "transpose")
    ds = tse.open_dataset(tmp_path / "t.zarr", prefetch="off")
    np.testing.assert_array_equal(ds["v"][5].values, left[5])
    assert any(s.decoder == "zarr" for s, _, _ in batches)
    assert tse.stats().reads == _reads(batches)


def test_a_source_that_reads_itself_and_a_nested_read_pass_through_execute(batches: list) -> None:  # type: ignore[type-arg]
    from tsexplore.testing.wrappers import CountingSource

    inner = SyntheticSource((8, 8), (4, 4), "float32")
    counted = CountingSource(inner)
    (chunk,) = get_engine().fetch(counted, [(1, 1)])
    np.testing.assert_array_equal(chunk, inner.evaluate((slice(4, 8), slice(4, 8))))
    assert [(s, n) for s, _, n in batches] == [(counted, False), (inner, True)]
    assert tse.stats().reads == _reads(batches) == 1


def test_remote_reads_over_http_pass_through_execute(tmp_path: Path, batches: list) -> None:  # type: ignore[type-arg]
    from tsexplore.testing.http import StoreServer

    values = _store(tmp_path / "a.zarr")
    with StoreServer(tmp_path / "a.zarr") as srv:
        da = tse.open_dataset(srv.url, prefetch="off")["v"]
        np.testing.assert_array_equal(da[:, 40].values, values[:, 40])
        assert {type(s.store).__name__ for s, _, _ in batches} <= {"ObstoreBytes", "FsspecBytes"}
        assert batches and tse.stats().reads == _reads(batches)


@pytest.mark.slow
def test_remote_reads_over_s3_pass_through_execute(tmp_path: Path, moto_s3: Any, batches: list) -> None:  # type: ignore[type-arg]
    values = _store(tmp_path / "a.zarr")
    url = moto_s3.upload(tmp_path / "a.zarr", "one-pipeline.zarr")
    da = tse.open_dataset(url, storage_options=moto_s3.storage_options(), prefetch="off")["v"]
    np.testing.assert_array_equal(da[7].values, values[7])
    assert batches and all(s.store.where.startswith("s3://") for s, _, _ in batches)
    assert tse.stats().reads == _reads(batches)


def test_a_reduction_a_loader_batch_and_the_explorer_read_through_execute(small_cube: Path, batches: list) -> None:  # type: ignore[type-arg]
    pytest.importorskip("anywidget")
    ds = tse.open_dataset(small_cube)
    truth = zarr.open_group(str(small_cube), mode="r")["temp"][...]
    mean = tse.reduce(ds["temp"], "mean", dim="time")
    np.testing.assert_allclose(mean.values, truth.mean(axis=0), rtol=1e-5)
    reduced = len(batches)
    assert reduced > 0
    for batch in tse.batches(ds["temp"], sample={"time": 4, "y": 32, "x": 32}, batch_size=2, seed=0):
        assert batch.shape == (2, 4, 32, 32)
        break
    loaded = len(batches)
    get_engine().cache.clear()  # the Explorer reads its frame anew
    with ds.tse.explore(width=200, height=200, stats=False) as ex:
        frame = ex.controller.wait(timeout=30)
        np.testing.assert_array_equal(frame.data, truth[0])
    time.sleep(0.1)
    assert reduced < loaded < len(batches)
    assert tse.stats().reads == _reads(batches)
