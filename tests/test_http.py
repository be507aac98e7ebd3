"""Remote Zarr over real HTTP: a StoreServer on 127.0.0.1 with latency and injected faults.

What zarr + fsspec do by default (silent fill on 404, no retry on 500, a 300 s hang on a
stall) is what these tests rule out.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

import tsexplore as tse
from tsexplore.errors import (
    MissingChunkError,
    ReadTimeoutError,
    RemoteReadError,
    SourceError,
    TsExploreError,
)
from tsexplore.testing.http import StoreServer

pytestmark = pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")

SHAPE, CHUNKS = (4, 64, 64), (1, 16, 16)  # 16 chunks per frame


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    root = tmp_path_factory.mktemp("http") / "remote.zarr"
    values = np.random.default_rng(3).standard_normal(SHAPE).astype("float32")
    group = zarr.open_group(str(root), mode="w")
    arr = group.create_array(
        "v",
        shape=SHAPE,
        chunks=CHUNKS,
        dtype="float32",
        compressors=ZstdCodec(level=1),
        fill_value=-1.0,
        dimension_names=("time", "y", "x"),
    )
    arr[...] = values
    sharded = group.create_array(
        "s",
        shape=SHAPE,
        chunks=CHUNKS,
        shards=(2, 32, 32),
        dtype="float32",
        compressors=ZstdCodec(level=1),
        dimension_names=("time", "y", "x"),
    )
    sharded[...] = values * 2
    zarr.consolidate_metadata(str(root))
    return root, values


@pytest.fixture(autouse=True)
def restore_settings():
    before = tse.config.get()
    yield
    tse.close()
    tse.config.set(**dataclasses.asdict(before))


@pytest.fixture
def server(store: tuple[Path, np.ndarray]):  # type: ignore[no-untyped-def]
    with StoreServer(store[0]) as srv:
        yield srv


CHUNK = "/v/c/0/1/2"  # chunk (0, 1, 2): rows 16..32, columns 32..48 of frame 0


def _read_chunk_region(ds) -> np.ndarray:  # type: ignore[no-untyped-def]
    return ds["v"][0, 16:32, 32:48].values


def test_latency_is_hidden_by_concurrency(store: tuple[Path, np.ndarray]) -> None:
    root, values = store
    with StoreServer(root, latency=0.05) as srv:
        ds = tse.open_dataset(srv.url)
        t0 = time.perf_counter()
        frame0 = ds["v"].isel(time=0).values
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        frame1 = ds["v"].isel(time=1).values
        second = time.perf_counter() - t0
        np.testing.assert_array_equal(frame0, values[0])
        np.testing.assert_array_equal(frame1, values[1])
        assert first >= 0.05 and second >= 0.05  # every chunk really waited for the server
        # 16 chunks one after the other would take 16 x 50 ms = 0.8 s
        assert first < 0.5, first
        assert second < 0.3, second  # concurrency adapted to the measured latency
        assert srv.count("/v/c/1/") == 16
        snap = tse.stats()
        assert snap.latency_p50 >= 0.05


def test_one_500_is_retried_once(server: StoreServer, store: tuple[Path, np.ndarray]) -> None:
    tse.config.set(retry_backoff=0.01)
    ds = tse.open_dataset(server.url)
    server.fail(CHUNK, 500, times=1)
    np.testing.assert_array_equal(_read_chunk_region(ds), store[1][0, 16:32, 32:48])
    assert server.count(CHUNK) == 2
    assert [s for _, p, s in server.requests if p.endswith(CHUNK)] == [500, 200]
    snap = tse.stats()
    assert snap.retries == 1 and snap.errors == 0


def test_persistent_503_gives_up_after_the_retries(server: StoreServer) -> None:
    tse.config.set(retries=2, retry_backoff=0.01)
    ds = tse.open_dataset(server.url)
    server.fail(CHUNK, 503, times=100)
    with pytest.raises(RemoteReadError, match=r"3 attempt"):
        _read_chunk_region(ds)
    assert server.count(CHUNK) == 3
    assert tse.stats().retries == 2


def test_403_is_not_retried(server: StoreServer) -> None:
    ds = tse.open_dataset(server.url)
    server.fail(CHUNK, 403, times=100)
    with pytest.raises(RemoteReadError) as info:
        _read_chunk_region(ds)
    assert "(0, 1, 2)" in str(info.value) and "403" in str(info.value)
    assert server.count(CHUNK) == 1
    assert tse.stats().retries == 0


def test_stall_raises_read_timeout_within_its_bound(server: StoreServer) -> None:
    tse.config.set(http_timeout=1)
    ds = tse.open_dataset(server.url)
    server.stall(CHUNK, 20)
    t0 = time.perf_counter()
    with pytest.raises(ReadTimeoutError, match="http_timeout"):
        _read_chunk_region(ds)
    elapsed = time.perf_counter() - t0
    assert 0.9 <= elapsed < 3.0, elapsed


def test_404_raises_missing_chunk_when_strict(server: StoreServer) -> None:
    ds = tse.open_dataset(server.url, missing="raise")
    server.fail(CHUNK, 404, times=100)
    with pytest.raises(MissingChunkError, match="missing='fill'") as info:
        _read_chunk_region(ds)
    assert info.value.index == (0, 1, 2)
    assert isinstance(info.value, TsExploreError)
    assert tse.stats().retries == 0 and server.count(CHUNK) == 1


def test_404_reads_as_fill_by_default(server: StoreServer, store: tuple[Path, np.ndarray]) -> None:
    ds = tse.open_dataset(server.url)
    server.fail(CHUNK, 404, times=100)
    frame = ds["v"].isel(time=0).values
    expected = store[1][0].copy()
    expected[16:32, 32:48] = -1.0  # the array's fill value
    np.testing.assert_array_equal(frame, expected)
    assert tse.stats().missing_filled == 1


def test_missing_metadata_is_a_source_error(server: StoreServer) -> None:
    with pytest.raises(SourceError, match="nope.zarr"):
        tse.open_dataset(f"{server.url}/nope.zarr")


def test_range_requests_are_served(server: StoreServer) -> None:
    """The test server answers byte ranges (sharded stores read shard indexes that way)."""
    import urllib.request

    req = urllib.request.Request(f"{server.url}/zarr.json", headers={"Range": "bytes=2-5"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        body = resp.read()
        assert resp.status == 206
    full = (Path(server.root) / "zarr.json").read_bytes()
    assert body == full[2:6]


def test_sharded_store_reads_again_after_close(server: StoreServer, store) -> None:  # type: ignore[no-untyped-def]
    """zarr's own decoder (sharding) is rebuilt on the new engine's loop after tse.close()."""
    ds = tse.open_dataset(server.url)
    np.testing.assert_array_equal(ds["s"].isel(time=0).values, store[1][0] * 2)
    tse.close()
    np.testing.assert_array_equal(ds["s"].isel(time=3).values, store[1][3] * 2)
    assert tse.stats().errors == 0
