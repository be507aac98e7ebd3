"""Remote Zarr over real HTTP and a real S3 API, with latency and injected faults.

Every fault test runs four ways: a StoreServer on 127.0.0.1 read with fsspec/aiohttp and
with obstore, and moto's S3 server (behind a fault-injecting StoreServer proxy) read with
s3fs and with obstore. What zarr + fsspec do by default (silent fill on 404, no retry on
500, a 300 s hang on a stall) is what these tests rule out; the outcomes are the same on
every transport: one 500 then success is exactly two requests, a stall is a
ReadTimeoutError within its bound, a body cut short is retried, nothing is silently wrong.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
from tsexplore.xarray import sources_of

pytestmark = pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")

SHAPE, CHUNKS = (4, 64, 64), (1, 16, 16)  # 16 chunks per frame
#: the S3 ones start moto's server (through ``request.getfixturevalue``, which the
#: fixture-based ``s3`` mark of tests/conftest.py cannot see): marked here
TRANSPORTS = ["http-fsspec", "http-obstore",
              *(pytest.param(t, marks=pytest.mark.s3) for t in ("s3-s3fs", "s3-obstore"))]


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


@pytest.fixture(scope="module")
def s3_store(store: tuple[Path, np.ndarray], moto_s3: Any) -> str:
    """The same store uploaded to the moto server; its key prefix."""
    prefix = f"http-{uuid.uuid4().hex[:6]}/remote.zarr"
    moto_s3.upload(store[0], prefix)
    return prefix


@dataclass
class Remote:
    """One way of reaching the store: its URL, options and the server that sees requests."""

    name: str
    url: str
    server: StoreServer
    storage_options: dict[str, Any] | None = None

    def open(self, **kwargs: Any) -> Any:
        return tse.open_dataset(self.url, storage_options=self.storage_options, **kwargs)


def _remote(name: str, store: Path, latency: float, request: pytest.FixtureRequest) -> Remote:
    protocol, reader = name.split("-")
    tse.config.set(remote_reader="fsspec" if reader in ("fsspec", "s3fs") else "obstore")
    if protocol == "http":
        server = StoreServer(store, latency=latency)
        request.addfinalizer(server.close)
        return Remote(name, server.url, server)
    moto = request.getfixturevalue("moto_s3")
    prefix = request.getfixturevalue("s3_store")
    server = StoreServer(upstream=moto.endpoint, latency=latency)
    request.addfinalizer(server.close)
    return Remote(name, moto.url(prefix), server, moto.storage_options(server.url))


@pytest.fixture(params=TRANSPORTS)
def remote(request: pytest.FixtureRequest, store: tuple[Path, np.ndarray]) -> Remote:
    return _remote(request.param, store[0], 0.0, request)


CHUNK = "/v/c/0/1/2"  # chunk (0, 1, 2): rows 16..32, columns 32..48 of frame 0


def _read_chunk_region(ds) -> np.ndarray:  # type: ignore[no-untyped-def]
    return ds["v"][0, 16:32, 32:48].values


def _statuses(server: StoreServer, match: str) -> list[int]:
    return [s for _, p, s in server.requests if p.endswith(match)]


@pytest.mark.parametrize("name", TRANSPORTS)
def test_latency_is_hidden_by_concurrency(
    name: str, store: tuple[Path, np.ndarray], request: pytest.FixtureRequest
) -> None:
    remote = _remote(name, store[0], 0.05, request)
    values = store[1]
    ds = remote.open()
    _ = ds["v"][3, :16, :16].values  # sessions and connections are set up
    remote.server.reset_peak()
    frame0 = ds["v"].isel(time=0).values
    first = remote.server.max_in_flight
    remote.server.reset_peak()
    frame1 = ds["v"].isel(time=1).values
    second = remote.server.max_in_flight
    np.testing.assert_array_equal(frame0, values[0])
    np.testing.assert_array_equal(frame1, values[1])
    # the 16 chunks of a frame were asked for together, not one after the other
    assert first > 1 and second > 1, (first, second)
    assert remote.server.count("/v/c/1/") == 16
    snap = tse.stats()
    assert snap.latency_p50 >= 0.05
    assert snap.store_requests == 33 and snap.range_requests == 0


def test_one_500_is_retried_once(remote: Remote, store: tuple[Path, np.ndarray]) -> None:
    tse.config.set(retry_backoff=0.01)
    ds = remote.open()
    remote.server.fail(CHUNK, 500, times=1)
    np.testing.assert_array_equal(_read_chunk_region(ds), store[1][0, 16:32, 32:48])
    assert remote.server.count(CHUNK) == 2
    assert _statuses(remote.server, CHUNK) == [500, 200]
    snap = tse.stats()
    assert snap.retries == 1 and snap.errors == 0


def test_persistent_503_gives_up_after_the_retries(remote: Remote) -> None:
    tse.config.set(retries=2, retry_backoff=0.01)
    ds = remote.open()
    remote.server.fail(CHUNK, 503, times=100)
    with pytest.raises(RemoteReadError, match=r"3 attempt") as info:
        _read_chunk_region(ds)
    assert info.value.index == (0, 1, 2)
    assert remote.server.count(CHUNK) == 3
    assert tse.stats().retries == 2


def test_403_is_not_retried(remote: Remote) -> None:
    ds = remote.open()
    remote.server.fail(CHUNK, 403, times=100)
    with pytest.raises(RemoteReadError) as info:
        _read_chunk_region(ds)
    assert "(0, 1, 2)" in str(info.value) and "403" in str(info.value) or "Forbidden" in str(info.value)
    assert remote.server.count(CHUNK) == 1
    assert tse.stats().retries == 0


@pytest.mark.slow
def test_stall_raises_read_timeout_within_its_bound(remote: Remote) -> None:
    """Every attempt stalls: (retries + 1) x http_timeout plus the backoff, then an error."""
    tse.config.set(http_timeout=1, retries=1, retry_backoff=0.01)
    ds = remote.open()
    stall = remote.server.stall(CHUNK, 20, times=100)
    with pytest.raises(ReadTimeoutError, match="http_timeout") as info:
        _read_chunk_region(ds)
    # the attempts gave up on their own timeout: every one that reached the server is still
    # stalling there (the second may not have reached it yet)
    assert 1 <= stall.stalling == remote.server.count(CHUNK) <= 2
    assert info.value.index == (0, 1, 2)
    assert tse.stats().retries == 1


@pytest.mark.slow
def test_one_stall_is_retried(remote: Remote, store: tuple[Path, np.ndarray]) -> None:
    tse.config.set(http_timeout=1, retry_backoff=0.01)
    ds = remote.open()
    stall = remote.server.stall(CHUNK, 20, times=1)
    np.testing.assert_array_equal(_read_chunk_region(ds), store[1][0, 16:32, 32:48])
    assert stall.stalling == 1  # the first attempt was abandoned, not answered
    assert _statuses(remote.server, CHUNK) == [0, 200]
    # (on a loaded machine s3fs may count its late second attempt as a retry too)
    assert tse.stats().retries >= 1 and tse.stats().errors == 0


def test_body_cut_short_is_retried(remote: Remote, store: tuple[Path, np.ndarray]) -> None:
    tse.config.set(retry_backoff=0.01)
    ds = remote.open()
    remote.server.cut(CHUNK, 0.5, times=1)
    np.testing.assert_array_equal(_read_chunk_region(ds), store[1][0, 16:32, 32:48])
    assert remote.server.count(CHUNK) == 2
    snap = tse.stats()
    assert snap.retries == 1 and snap.errors == 0


def test_body_always_cut_short_fails_after_the_retries(remote: Remote) -> None:
    tse.config.set(retries=2, retry_backoff=0.01)
    ds = remote.open()
    remote.server.cut(CHUNK, 0.5, times=100)
    with pytest.raises(RemoteReadError, match=r"3 attempt"):
        _read_chunk_region(ds)
    assert remote.server.count(CHUNK) == 3
    assert tse.stats().retries == 2


def test_404_raises_missing_chunk_when_strict(remote: Remote) -> None:
    ds = remote.open(missing="raise")
    remote.server.fail(CHUNK, 404, times=100)
    with pytest.raises(MissingChunkError, match="missing='fill'") as info:
        _read_chunk_region(ds)
    assert info.value.index == (0, 1, 2)
    assert isinstance(info.value, TsExploreError)
    assert tse.stats().retries == 0 and remote.server.count(CHUNK) == 1


def test_404_reads_as_fill_by_default(remote: Remote, store: tuple[Path, np.ndarray]) -> None:
    ds = remote.open()
    remote.server.fail(CHUNK, 404, times=100)
    frame = ds["v"].isel(time=0).values
    expected = store[1][0].copy()
    expected[16:32, 32:48] = -1.0  # the array's fill value
    np.testing.assert_array_equal(frame, expected)
    assert tse.stats().missing_filled == 1


def test_sharded_reads_ranges_once_per_index(remote: Remote, store: tuple[Path, np.ndarray]) -> None:
    """A frame of the sharded array: one index read per shard, inner chunks by range."""
    ds = remote.open()
    (src,) = sources_of(ds["s"])
    assert src.decoder == "tsexplore-sharded"
    np.testing.assert_array_equal(ds["s"].isel(time=0).values, store[1][0] * 2)
    snap = tse.stats()
    assert snap.index_reads == 4  # 2 x 2 shards cover a frame
    shards = [p for m, p, s in remote.server.requests if "/s/c/" in p]
    assert len(shards) == snap.store_requests == snap.range_requests
    assert snap.range_requests <= 8  # an index and (coalesced) inner chunks per shard
    before = len(shards)
    np.testing.assert_array_equal(ds["s"].isel(time=1).values, store[1][1] * 2)
    after = tse.stats()
    assert after.index_reads == 4  # the indexes came from the cache
    assert after.range_requests - snap.range_requests == 4
    assert sum(1 for _, p, _ in remote.server.requests if "/s/c/" in p) == before + 4


def test_sharded_range_500_is_retried(remote: Remote, store: tuple[Path, np.ndarray]) -> None:
    tse.config.set(retry_backoff=0.01)
    ds = remote.open()
    np.testing.assert_array_equal(ds["s"].isel(time=0).values, store[1][0] * 2)  # indexes cached
    remote.server.fail("/s/c/0/0/0", 500, times=1)
    np.testing.assert_array_equal(ds["s"].isel(time=1).values, store[1][1] * 2)
    assert _statuses(remote.server, "/s/c/0/0/0")[-2:] == [500, 206]
    assert tse.stats().retries == 1 and tse.stats().errors == 0


def test_sharded_missing_shard_fills_and_raises_when_strict(remote: Remote, store) -> None:  # type: ignore[no-untyped-def]
    remote.server.fail("/s/c/0/0/0", 404, times=100)
    ds = remote.open()
    frame = ds["s"].isel(time=0).values
    expected = store[1][0] * 2
    expected[:32, :32] = 0.0  # the sharded array's fill value
    np.testing.assert_array_equal(frame, expected)
    assert tse.stats().missing_filled == 4  # the shard's four inner chunks of this frame
    tse.close()
    strict = remote.open(missing="raise")
    with pytest.raises(MissingChunkError, match="missing='fill'"):
        _ = strict["s"].isel(time=0).values


def test_missing_metadata_is_a_source_error(remote: Remote) -> None:
    with pytest.raises(SourceError, match="nope.zarr"):
        tse.open_dataset(
            f"{remote.url.rsplit('/', 1)[0]}/nope.zarr", storage_options=remote.storage_options
        )


def test_range_requests_are_served(store: tuple[Path, np.ndarray]) -> None:
    """The test server answers byte ranges (sharded stores read shard indexes that way)."""
    import urllib.request

    with StoreServer(store[0]) as server:
        req = urllib.request.Request(f"{server.url}/zarr.json", headers={"Range": "bytes=2-5"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            body = resp.read()
            assert resp.status == 206
    full = (store[0] / "zarr.json").read_bytes()
    assert body == full[2:6]


def test_sharded_store_reads_again_after_close(remote: Remote, store) -> None:  # type: ignore[no-untyped-def]
    """Sessions are rebuilt on the new engine's loop after tse.close()."""
    ds = remote.open()
    np.testing.assert_array_equal(ds["s"].isel(time=0).values, store[1][0] * 2)
    tse.close()
    np.testing.assert_array_equal(ds["s"].isel(time=3).values, store[1][3] * 2)
    assert tse.stats().errors == 0
