"""Sharded Zarr read natively, and the engine's batches of reads of one shard.

The truth is what zarr-python reads from the same store (its own sharding codec), and the
NumPy data written. Local stores are read by units of inner chunks; the inner grid (what
remote stores read) is forced with ``UNIT_BYTES = 0``: the ``grid`` fixture runs a test on
both. Batches are checked with a fake source that records what it is handed.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Hashable, Sequence
from pathlib import Path

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, ShardingCodec

import tsexplore as tse
from tsexplore.engine import Engine, Priority
from tsexplore.errors import CorruptChunkError, MissingChunkError, RequestCancelledError
from tsexplore.sources import SyntheticSource, sharding
from tsexplore.sources.bytes import ByteRange, coalesce
from tsexplore.sources.sharding import MAX_UINT64, layout_from_zarr
from tsexplore.xarray import sources_of

SHAPE = (8, 48, 40)  # shards 4 x 16 x 16 (edge shards along y and x), inner 1 x 8 x 8
SHARDS = 2 * 3 * 3


@pytest.fixture(params=["units", "inner"])
def grid(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """"units": a local store's units (here a whole 4 x 16 x 16 shard each); "inner": the
    inner grid, as remote stores read it."""
    if request.param == "inner":
        monkeypatch.setattr(sharding, "UNIT_BYTES", 0)
    return str(request.param)


def _write(path: Path, index_location: str = "end", inner: tuple[int, ...] = (1, 8, 8),
           fill: float = 0.0, values: np.ndarray | None = None) -> np.ndarray:
    if values is None:
        values = np.random.default_rng(5).standard_normal(SHAPE).astype("float32")
    codec = ShardingCodec(chunk_shape=inner, codecs=[BytesCodec(), BloscCodec(cname="zstd")],
                          index_codecs=[BytesCodec(), Crc32cCodec()], index_location=index_location)
    arr = zarr.create_array(str(path), shape=SHAPE, chunks=(4, 16, 16), dtype="float32",
                            serializer=codec, compressors=None, fill_value=fill,
                            dimension_names=("time", "y", "x"))
    arr[...] = values
    return values


@pytest.mark.parametrize("where", ["end", "start"])
def test_sharded_equals_zarr_and_reads_each_index_once(tmp_path: Path, where: str, grid: str) -> None:
    path = tmp_path / "s.zarr"
    values = _write(path, where)
    ds = tse.open_dataset(path)
    (src,) = sources_of(ds["data"])
    assert src.decoder == "tsexplore-sharded"
    assert src.chunks == ((4, 16, 16) if grid == "units" else (1, 8, 8))
    np.testing.assert_array_equal(ds["data"].values, zarr.open_array(str(path))[...])
    np.testing.assert_array_equal(ds["data"].values, values)
    snap = tse.stats()
    nshards = SHARDS
    assert snap.index_reads == nshards  # once each, although 8 x 6 x 5 inner chunks were read
    assert snap.reads == (nshards if grid == "units" else 8 * 6 * 5)
    # one range per shard for its index and at most a few for its (adjacent) inner chunks
    assert nshards < snap.range_requests <= 3 * nshards
    keys = [k for k in tse.get_engine().cache.keys() if getattr(k, "kind", None) == "index"]
    assert len(keys) == nshards


def test_shard_index_counts_in_the_cache_budget_and_is_read_again_when_evicted(tmp_path: Path, grid: str) -> None:
    path = tmp_path / "s.zarr"
    values = _write(path)
    tse.config.set(cache_bytes=64 * 1024)  # far less than the array (61 KiB decoded)
    ds = tse.open_dataset(path)
    for t in range(SHAPE[0]):
        np.testing.assert_array_equal(ds["data"][t].values, values[t])
    snap = tse.stats()
    assert snap.cache_high_water <= 64 * 1024
    assert snap.index_reads >= 9  # evicted indexes are read again, never served stale


def test_absent_inner_chunks_fill_and_raise_when_strict(tmp_path: Path, grid: str) -> None:
    path = tmp_path / "s.zarr"
    values = np.random.default_rng(1).standard_normal(SHAPE).astype("float32")
    values[0, :8, :8] = 7.0  # an inner chunk equal to the fill value: zarr leaves it out
    values[4:] = 7.0  # whole shards of fill: no shard objects at all
    _write(path, fill=7.0, values=values)
    layout = layout_from_zarr(zarr.open_array(str(path)).metadata)
    assert layout is not None
    ds = tse.open_dataset(path)
    np.testing.assert_array_equal(ds["data"].values, values)
    # counted per chunk of the grid the store lacks: a unit partly stored is not counted
    assert tse.stats().missing_filled == (SHARDS // 2 if grid == "units" else 1 + 4 * 6 * 5)
    tse.close()
    strict = tse.open_dataset(path, missing="raise")
    np.testing.assert_array_equal(strict["data"][0, 8:16, :8].values, values[0, 8:16, :8])
    with pytest.raises(MissingChunkError, match="missing='fill'") as info:
        _ = strict["data"][0, :8, :8].values
    assert info.value.index == (0, 0, 0)
    with pytest.raises(MissingChunkError):
        _ = strict["data"][5].values


def _shard_file(path: Path) -> Path:
    return path / "c" / "0" / "0" / "0"


def test_flipped_byte_in_the_index_is_a_checksum_error(tmp_path: Path, grid: str) -> None:
    path = tmp_path / "s.zarr"
    _write(path)
    f = _shard_file(path)
    data = bytearray(f.read_bytes())
    data[-10] ^= 0x01  # inside the index (at the end), before its crc32c
    f.write_bytes(bytes(data))
    ds = tse.open_dataset(path)
    with pytest.raises(CorruptChunkError, match="crc32c") as info:
        _ = ds["data"][0, :8, :8].values
    assert info.value.index == (0, 0, 0) and "shard" in str(info.value)
    np.testing.assert_array_equal(ds["data"][0, 16:24, :8].values,
                                  zarr.open_array(str(path))[0, 16:24, :8])


def test_truncated_shard_is_corrupt_not_wrong(tmp_path: Path, grid: str) -> None:
    path = tmp_path / "s.zarr"
    _write(path, "start")  # the index stays whole; the chunks it points to are cut off
    f = _shard_file(path)
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    ds = tse.open_dataset(path)
    with pytest.raises(CorruptChunkError, match="shorter than its index"):
        _ = ds["data"][3].values  # the last time step of the first shard: its bytes are gone


@given(st.lists(st.tuples(st.integers(0, 3000), st.integers(1, 500)), min_size=1, max_size=40),
       st.integers(0, 2000), st.integers(1, 4000), st.randoms(use_true_random=False))
def test_coalesce_covers_every_span_once_within_its_limits(pieces, gap, max_run, rnd) -> None:  # type: ignore[no-untyped-def]
    spans, at = [], 0
    for hole, n in pieces:  # disjoint spans as a shard holds them, in any order
        spans.append((at + hole, n))
        at += hole + n
    rnd.shuffle(spans)
    runs = coalesce([ByteRange(off, off + n) for off, n in spans], gap, max_run)
    members = sorted(m for r in runs for m in r.members)
    assert members == list(range(len(spans)))
    for r in runs:
        for m in r.members:
            off, n = spans[m]
            assert r.start <= off and off + n <= r.stop
        if len(r.members) > 1:
            assert r.stop - r.start <= max_run
        ordered = sorted(spans[m] for m in r.members)
        reach = ordered[0][0] + ordered[0][1]
        for off, n in ordered[1:]:
            assert off - reach <= gap  # no hole bigger than the gap inside a run
            reach = max(reach, off + n)
    bounds = sorted((r.start, r.stop) for r in runs)
    assert all(a[1] <= b[0] for a, b in zip(bounds, bounds[1:]))  # no byte read twice


def test_empty_entry_marker_is_all_ones() -> None:
    assert MAX_UINT64 == np.iinfo(np.uint64).max


# -- the engine's batches ------------------------------------------------------------------------


class BatchingSource(SyntheticSource):
    """A synthetic source whose reads of one group (4 chunks along the last axis) batch; its
    reads wait on a gate."""

    max_batch = 4

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.started: list[tuple[int, ...]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail: set[tuple[int, ...]] = set()

    def batch_key(self, index: Sequence[int]) -> Hashable | None:
        return (*index[:-1], index[-1] // 4)

    def read_chunk_sync(self, index):  # type: ignore[no-untyped-def]
        self.started.append(tuple(index))
        self.gate.wait(10)
        if tuple(index) in self.fail:
            raise CorruptChunkError("injected", index=tuple(index))
        return super().read_chunk_sync(index)


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[tuple[int, ...], ...]]:
    """The batches the engine runs through the pipeline (their chunk indices)."""
    from tsexplore.engine import scheduler

    seen: list[tuple[tuple[int, ...], ...]] = []
    execute = scheduler.execute

    def recorded(source, requests, services, nested=False):  # type: ignore[no-untyped-def]
        if isinstance(source, BatchingSource):
            seen.append(tuple(r.index for r in requests))
        return execute(source, requests, services, nested)

    monkeypatch.setattr(scheduler, "execute", recorded)
    return seen


def _src() -> BatchingSource:
    return BatchingSource((6, 8, 16), (1, 8, 2))  # rows of 8 chunks: two groups of 4 each


def _hold(eng: Engine, src: BatchingSource) -> list:
    """Fill every read slot with reads that wait on the source's gate (rows 2..5)."""
    src.gate.clear()
    held = eng.request(src, [(row, 0, 7) for row in range(2, 2 + eng.concurrency("sync"))])
    deadline = time.monotonic() + 10
    while len(src.started) < len(held) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert eng.snapshot().in_flight == len(held)
    return held


def test_queued_reads_of_one_group_run_as_one_batch(batches: list) -> None:
    src = _src()
    with Engine() as eng:
        held = _hold(eng, src)
        futures = eng.request(src, [(0, 0, i) for i in range(8)])  # queued behind the held
        src.gate.set()
        for f in held:
            f.result(10)
        got = [f.result(10) for f in futures]
        for i, chunk in enumerate(got):
            np.testing.assert_array_equal(chunk, src.read_chunk_sync((0, 0, i))[0])
        assert sorted(b for b in batches if len(b) > 1) == [tuple((0, 0, i) for i in range(4)),
                                                            tuple((0, 0, i) for i in range(4, 8))]
        snap = eng.snapshot()
        assert snap.reads == 8 + len(held) and snap.errors == 0
        assert snap.batched == 8


def test_batches_keep_priorities_dedup_and_generations(batches: list) -> None:
    src = _src()
    with Engine() as eng:
        hold = _hold(eng, src)
        spec = eng.request(src, [(0, 0, 0), (0, 0, 1)], Priority.SPECULATIVE, channel="c", generation=0)
        vis = eng.request(src, [(0, 0, 2), (0, 0, 3)], channel="w", generation=0)
        again = eng.request(src, [(0, 0, 2)])  # joins the queued read: no second read
        stale = eng.request(src, [(0, 0, 4), (0, 0, 5)], channel="v", generation=0)
        eng.cancel("v", 1)  # cancels the queued reads only generation 0 of "v" wanted
        src.gate.set()
        for f in hold:
            f.result(10)
        np.testing.assert_array_equal(again[0].result(10), vis[0].result(10))
        for f in spec + vis:
            f.result(10)
        for f in stale:
            with pytest.raises(RequestCancelledError):
                f.result(10)
        ran = src.started
        assert (0, 0, 4) not in ran and (0, 0, 5) not in ran
        assert len(ran) == len(set(ran))  # no chunk read twice
        # the two priorities never share a batch (one group, two batches)
        assert sorted(b for b in batches if b[0][0] == 0) == [((0, 0, 0), (0, 0, 1)), ((0, 0, 2), (0, 0, 3))]


def test_a_failed_member_fails_alone(batches: list) -> None:
    src = _src()
    src.fail = {(0, 0, 1)}
    with Engine() as eng:
        held = _hold(eng, src)
        futures = eng.request(src, [(0, 0, i) for i in range(4)])
        src.gate.set()
        for f in held:
            f.result(10)
        assert [b for b in batches if b[0][0] == 0] == [tuple((0, 0, i) for i in range(4))]
        with pytest.raises(CorruptChunkError) as info:
            futures[1].result(10)
        assert info.value.index == (0, 0, 1)
        for k in (0, 2, 3):
            futures[k].result(10)
        assert eng.snapshot().errors == 1


def test_a_batch_of_inner_chunks_decodes_in_jobs_over_the_read_threads(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A frame's inner chunks of one local shard are read as one batch and decoded on the
    read thread that read them and the read threads free meanwhile."""
    from tsexplore.sources.zarr_source import ZarrSource

    path = tmp_path / "s.zarr"
    monkeypatch.setattr(sharding, "UNIT_BYTES", 0)  # the inner grid (a frame's 16 inner chunks)
    values = _write(path, inner=(1, 4, 4))  # a shard's frame: 4 x 4 inner chunks
    threads: list[str] = []
    decode = ZarrSource.decode

    def recorded(self, request, located, data):  # type: ignore[no-untyped-def]
        threads.append(threading.current_thread().name)
        return decode(self, request, located, data)

    monkeypatch.setattr(ZarrSource, "decode", recorded)
    tse.config.set(io_threads=4)
    da = tse.open_dataset(path)["data"]
    np.testing.assert_array_equal(da[0, :16, :16].values, values[0, :16, :16])
    assert len(threads) == 16 and all(name.startswith("tsexplore-read") for name in threads), threads
    assert tse.stats().batched == 16 and tse.stats().range_requests <= 2  # its index, its frame


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_units_and_their_boxes_read_what_zarr_reads(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    """Units of inner chunks (a whole shard, or part of its trailing axes; at the array's
    edges; with inner chunks the shards lack; either byte order) and boxes of them read as
    parts give what zarr-python reads, for any selection."""
    from unittest import mock

    ndim = data.draw(st.integers(1, 3))
    inner = tuple(data.draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    per = tuple(data.draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim)))
    shard = tuple(i * p for i, p in zip(inner, per))
    shape = tuple(data.draw(st.integers(1, 3 * s)) for s in shard)
    values = np.arange(math.prod(shape), dtype="float32").reshape(shape)
    flat = values.reshape(-1)
    for k in data.draw(st.lists(st.integers(0, flat.size - 1), max_size=3)):
        flat[k: k + data.draw(st.integers(1, 64))] = -1.0  # runs of fill: inner chunks left out
    path = tmp_path_factory.mktemp("units") / "u.zarr"
    # either byte order of the inner chunks (a big-endian chunk is swapped as it is placed)
    endian = data.draw(st.sampled_from(["little", "big"]))
    codec = ShardingCodec(chunk_shape=inner, codecs=[BytesCodec(endian=endian), BloscCodec(cname="lz4")])
    arr = zarr.create_array(str(path), shape=shape, chunks=shard, dtype="float32", serializer=codec,
                            compressors=None, fill_value=-1.0)
    arr[...] = values
    truth = zarr.open_array(str(path))
    # units from one inner chunk's bytes (the inner grid) to a whole shard
    unit_bytes = data.draw(st.sampled_from([0, 4 * math.prod(inner) * per[-1], sharding.UNIT_BYTES]))
    with mock.patch.object(sharding, "UNIT_BYTES", unit_bytes):
        ds = tse.open_dataset(path)
    got = ds[list(ds.data_vars)[0]]
    (src,) = sources_of(got)
    assert src.decoder == "tsexplore-sharded"
    key = tuple(slice(*sorted(data.draw(st.tuples(st.integers(0, n), st.integers(0, n))))) for n in shape)
    np.testing.assert_array_equal(got[key].values, truth[key])
    np.testing.assert_array_equal(got.values, truth[...])
    np.testing.assert_array_equal(got[key].values, truth[key])  # again, from the cache
    tse.close()
