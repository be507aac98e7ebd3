"""The engine: cache, scheduler (priorities, de-duplication, cancellation), prefetch, stats,
an 8-thread hammer, timeouts and shutdown.

Sources here are small and deterministic; slow stores are a :class:`LatencySource` or a
synthetic source with ``latency``; reads are counted by a :class:`CountingSource`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

import tsexplore as tse
from tsexplore.engine import ChunkCache, Priority, get_engine, set_cache_bytes
from tsexplore.engine.array import read_selection
from tsexplore.errors import (
    ChunkReadError,
    ConfigError,
    EngineClosedError,
    MissingChunkError,
    ReadTimeoutError,
    RequestCancelledError,
    WrongThreadError,
)
from tsexplore.sources import ArraySource, SyncChunkSource, SyntheticSource
from tsexplore.sources.base import SourceOptions
from tsexplore.testing.wrappers import CountingSource, FaultySource, LatencySource


def region(src: SyntheticSource, idx: tuple[int, ...]) -> np.ndarray:
    return src.evaluate(src.chunk_slices(idx))


def engine_threads() -> list[str]:
    return [
        t.name for t in threading.enumerate() if t.name.startswith("tsexplore-") and t.is_alive()
    ]


# -- ChunkCache ---------------------------------------------------------------------------------


def _arr(nbytes: int, value: int = 0) -> np.ndarray:
    return np.full(nbytes, value, dtype=np.uint8)


def test_cache_is_lru_within_its_budget() -> None:
    cache = ChunkCache(300)
    for k in "abc":
        assert cache.put(k, _arr(100))
    assert cache.get("a") is not None  # a is now the most recently used
    assert cache.put("d", _arr(100))
    assert "b" not in cache and {"a", "c", "d"} <= set(cache.keys())
    assert cache.bytes_now == 300 == cache.high_water
    assert cache.evictions == 1


def test_cache_refuses_a_chunk_larger_than_the_budget() -> None:
    cache = ChunkCache(100)
    assert cache.put("a", _arr(60))
    assert not cache.put("big", _arr(101))
    assert "big" not in cache and "a" in cache
    assert cache.bytes_now == 60 and cache.high_water == 60


def test_cache_values_are_read_only() -> None:
    cache = ChunkCache(100)
    cache.put("a", _arr(10))
    with pytest.raises(ValueError):
        cache.get("a")[0] = 1  # type: ignore[index]


def test_pins_protect_from_eviction_and_are_counted() -> None:
    cache = ChunkCache(200)
    cache.put("a", _arr(100))
    cache.pin(["a"])
    cache.pin(["a"])
    assert cache.pinned_bytes == 100 and cache.headroom == 100
    assert cache.put("b", _arr(100))
    assert cache.put("c", _arr(100))  # evicts b, never a
    assert "a" in cache and "b" not in cache and "c" in cache
    assert not cache.put("d", _arr(150))  # would need to evict the pinned chunk
    assert "a" in cache
    cache.unpin(["a"])
    assert cache.is_pinned("a")  # pinned twice, unpinned once
    cache.unpin(["a"])
    assert not cache.is_pinned("a") and cache.pinned_bytes == 0
    assert cache.put("d", _arr(150))
    assert "a" not in cache


def test_cache_resize_evicts_and_rejects_negative_budgets() -> None:
    cache = ChunkCache(1000)
    for k in range(10):
        cache.put(k, _arr(100))
    cache.resize(250)
    assert cache.bytes_now <= 250 and len(cache) == 2
    assert set(cache.keys()) == {8, 9}
    with pytest.raises(ConfigError):
        cache.resize(-1)
    cache.discard([9])
    assert cache.bytes_now == 100
    cache.clear()
    assert cache.bytes_now == 0 and len(cache) == 0
    assert "ChunkCache" in repr(cache) and "high water" in repr(cache)


# -- scheduler ------------------------------------------------------------------------------------


def test_hit_miss_joined_definitions() -> None:
    inner = SyntheticSource((8, 8), (4, 4), "float32")
    src = CountingSource(LatencySource(inner, 0.2))
    eng = get_engine()
    (first,) = eng.request(src, [(0, 0)])
    (second,) = eng.request(src, [(0, 0)])  # joins the read in flight
    assert second is first
    np.testing.assert_array_equal(second.result(5), region(inner, (0, 0)))
    (third,) = eng.request(src, [(0, 0)])  # served from the cache
    assert third.done()
    snap = tse.stats()
    assert (snap.misses, snap.joined, snap.hits, snap.reads) == (1, 1, 1, 1)
    assert src.reads == 1
    assert snap.hit_ratio == pytest.approx(1 / 3)


def test_wrapper_tokens_do_not_share_cache_entries() -> None:
    inner = SyntheticSource((8, 8), (4, 4), "float32")
    a, b = CountingSource(inner), CountingSource(inner)
    assert len({inner.token, a.token, b.token}) == 3
    eng = get_engine()
    eng.fetch(inner, [(0, 0)])
    eng.fetch(a, [(0, 0)])
    eng.fetch(b, [(0, 0)])
    assert (a.reads, b.reads) == (1, 1)
    assert a.shape == inner.shape and a.chunks == inner.chunks and a.dtype == inner.dtype
    assert a.evaluate is not None  # attributes not on the wrapper come from the inner source


def test_visible_requests_jump_the_queue() -> None:
    tse.config.set(io_threads=1)
    tse.close()
    inner = SyntheticSource((40, 4), (1, 4), "float32")
    src = CountingSource(LatencySource(inner, 0.02))
    eng = get_engine()
    blocker = eng.request(src, [(0, 0)], Priority.VISIBLE)
    time.sleep(0.01)  # the blocker is running; everything below queues behind it
    spec = eng.request(src, [(i, 0) for i in range(1, 11)], Priority.SPECULATIVE)
    planned = eng.request(src, [(i, 0) for i in range(11, 21)], Priority.PLANNED)
    (visible,) = eng.request(src, [(30, 0)], Priority.VISIBLE)
    np.testing.assert_array_equal(visible.result(10), region(inner, (30, 0)))
    for f in blocker + spec + planned:
        f.result(10)
    order = src.order
    assert order[0] == (0, 0)
    assert order[1] == (30, 0), order
    assert order[2:12] == [(i, 0) for i in range(11, 21)], "PLANNED before SPECULATIVE"
    assert src.max_active == 1


class _GatedSynthetic(SyntheticSource):
    """A synthetic source whose reads wait until ``gate`` opens (bounded, never forever)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()

    def read_chunk_sync(self, index):
        assert self.gate.wait(30), "the gate was never opened"
        return super().read_chunk_sync(index)


def test_rapid_generations_cancel_stale_reads() -> None:
    """1,000 slider moves while the store is stuck: only the reads already running and the
    newest are made, each answered with its own slice; every other move is cancelled."""
    inner = _GatedSynthetic((1000, 8, 8), (1, 8, 8), "float32")
    src = CountingSource(inner)
    eng = get_engine()
    threads = tse.config.get().io_threads
    futures = []
    for t in range(1000):
        futures += eng.request(src, [(t, 0, 0)], Priority.VISIBLE, channel="c", generation=t)
    inner.gate.set()
    last = futures[-1].result(10)
    np.testing.assert_array_equal(last, region(inner, (999, 0, 0)))
    ok = cancelled = 0
    for t, fut in enumerate(futures[:-1]):
        try:
            np.testing.assert_array_equal(fut.result(10), region(inner, (t, 0, 0)))
            ok += 1
        except RequestCancelledError:
            cancelled += 1
    snap = tse.stats()
    # the reads that had started before the gate opened (at most one per read thread), then
    # the newest move's: the 1,000 moves were all issued while nothing could finish
    assert src.reads <= threads + 1, (src.reads, threads)
    assert snap.reads == src.reads
    assert ok + 1 == src.reads
    assert cancelled == 999 - ok and snap.cancelled == cancelled
    assert src.max_active <= threads


def test_older_generation_does_not_cancel_newer() -> None:
    inner = SyntheticSource((20, 4), (1, 4), "float32")
    src = LatencySource(inner, 0.05)
    eng = get_engine()
    eng.request(src, [(i, 0) for i in range(10)], channel="v", generation=5)
    late = eng.request(src, [(19, 0)], channel="v", generation=2)  # a stale generation
    np.testing.assert_array_equal(late[0].result(5), region(inner, (19, 0)))


def test_planned_reads_survive_new_generations() -> None:
    inner = SyntheticSource((30, 4), (1, 4), "float32")
    src = LatencySource(inner, 0.02)
    eng = get_engine()
    planned = eng.request(src, [(i, 0) for i in range(20)], Priority.PLANNED)
    for g in range(5):
        eng.request(src, [(20 + g, 0)], channel="view", generation=g)
    for i, f in enumerate(planned):
        np.testing.assert_array_equal(f.result(10), region(inner, (i, 0)))


def test_stream_yields_in_order_with_planned_reads() -> None:
    inner = SyntheticSource((12, 6, 6), (2, 3, 3), "int16")
    src = CountingSource(LatencySource(inner, 0.01))
    eng = get_engine()
    order = [idx for idx in inner.iter_chunks()][::-1]
    got = list(eng.stream(src, order, ahead=4))
    assert [i for i, _ in got] == order
    for idx, chunk in got:
        np.testing.assert_array_equal(chunk, region(inner, idx))
    snap = tse.stats()
    assert snap.prefetch_reads == len(order) and snap.misses == 0
    assert src.reads == len(order)


def test_errors_reach_the_waiter_and_are_counted() -> None:
    inner = SyntheticSource((4, 4), (2, 2), "float32")
    boom = ChunkReadError("disk on fire", source="x", index=(0, 0))
    src = FaultySource(inner, fail={(0, 0): boom, (1, 1): 1})
    eng = get_engine()
    with pytest.raises(ChunkReadError, match="disk on fire"):
        eng.fetch(src, [(0, 0)])
    with pytest.raises(ChunkReadError, match="transient"):
        eng.fetch(src, [(1, 1)])
    np.testing.assert_array_equal(eng.fetch(src, [(1, 1)])[0], region(inner, (1, 1)))
    snap = tse.stats()
    assert snap.errors == 2 and src.failures[(0, 0)] == 1 and src.failures[(1, 1)] == 1
    # a non-tsexplore exception is wrapped, naming the chunk
    src2 = FaultySource(inner, fail={(0, 1): ZeroDivisionError("odd")})
    with pytest.raises(ChunkReadError, match=r"\(0, 1\)"):
        eng.fetch(src2, [(0, 1)])


def test_waits_have_timeouts() -> None:
    """A wait gives up after wait_timeout while its read is still stuck in the store."""
    tse.config.set(wait_timeout=0.3)
    src = _GatedSynthetic((4, 4), (2, 2), "float32")
    try:
        with pytest.raises(ReadTimeoutError, match="wait_timeout"):
            get_engine().fetch(src, [(0, 0)])
        assert not src.gate.is_set()  # the read had not finished: the wait itself timed out
    finally:
        src.gate.set()


def test_blocking_read_on_the_io_loop_is_refused() -> None:
    eng = get_engine()
    src = SyntheticSource((4, 4), (2, 2), "float32")

    async def inside() -> None:
        eng.fetch(src, [(0, 0)])

    with pytest.raises(WrongThreadError, match="own I/O loop"):
        eng.run_coroutine(inside(), timeout=5)


# -- the 8-thread hammer ----------------------------------------------------------------------------


def test_eight_thread_hammer_stays_within_budget() -> None:
    rng = np.random.default_rng(0)
    values = rng.standard_normal((40, 48, 48)).astype("float32")
    src = ArraySource(values, chunks=(4, 16, 16))
    budget = 10 * src.chunk_nbytes() + 123  # far less than the 90 chunks of the array
    tse.close()
    set_cache_bytes(budget)
    cache = get_engine().cache
    stop = threading.Event()
    peaks: list[int] = []
    errors: list[BaseException] = []

    def monitor() -> None:
        while not stop.is_set():
            peaks.append(cache.bytes_now)
            time.sleep(0.0005)

    def worker(seed: int) -> None:
        r = random.Random(seed)
        try:
            for _ in range(60):
                key = []
                for n in values.shape:
                    a = r.randrange(n)
                    b = r.randrange(a, n) + 1
                    key.append(slice(a, b, r.choice([1, 1, 2])))
                if r.random() < 0.3:
                    key[0] = r.randrange(values.shape[0])
                got = read_selection(src, tuple(key), timeout=30)
                np.testing.assert_array_equal(got, values[tuple(key)])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    mon = threading.Thread(target=monitor, name="hammer-monitor")
    mon.start()
    threads = [threading.Thread(target=worker, args=(i,), name=f"hammer-{i}") for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    stop.set()
    mon.join(5)
    assert not errors, errors[0]
    assert peaks and max(peaks) <= budget
    assert cache.high_water <= budget
    assert cache.bytes_now <= budget
    snap = tse.stats()
    assert snap.evictions > 0 and snap.hits > 0
    assert snap.cache_high_water <= snap.cache_budget == budget


# -- the one budget, resized live ---------------------------------------------------------------


def test_config_set_resizes_the_running_cache_at_once() -> None:
    values = np.arange(16 * 256 * 256, dtype="float32").reshape(16, 256, 256)
    src = ArraySource(values, chunks=(1, 256, 256))  # 16 chunks of 256 KiB
    tse.config.set(cache_bytes=1 << 24)
    engine = get_engine()
    # back and forth (0, 15, 1, 14, ...): no pattern, so no chunk is read ahead or recycled
    order = [t for pair in zip(range(8), range(15, 7, -1)) for t in pair]
    for t in order:
        read_selection(src, (t, slice(None), slice(None)), timeout=30)
    assert tse.stats().cache_bytes == 16 * src.chunk_nbytes()
    before = tse.stats()
    small = 3 * src.chunk_nbytes() + 7
    tse.config.set(cache_bytes=small)  # shrinking evicts before set() returns
    assert engine.cache.usage() == (3 * src.chunk_nbytes(), small)
    snap = tse.stats()
    assert snap.cache_budget == small and snap.cache_bytes <= small
    assert (snap - before).evictions == 13
    assert f"cache 0.8/{small / 1e6:.1f} MB" in repr(snap)
    # the three most recent frames stay, and are hits
    hits = tse.stats().hits
    for t in order[-3:]:
        np.testing.assert_array_equal(read_selection(src, (t,), timeout=30), values[t])
    assert tse.stats().hits - hits == 3
    tse.config.set(cache_bytes=1 << 24)  # growing keeps what is there
    assert engine.cache.usage() == (3 * src.chunk_nbytes(), 1 << 24)
    assert get_engine() is engine


def test_an_engine_with_its_own_budget_does_not_follow_the_settings() -> None:
    from tsexplore.engine import Engine

    with Engine(cache_bytes=1000) as own:
        tse.config.set(cache_bytes=5000)
        assert own.cache.budget == 1000
        assert get_engine().cache.budget == 5000
    tse.close()
    tse.config.set(cache_bytes=7000)  # a closed engine no longer listens
    assert own.cache.budget == 1000 and get_engine().cache.budget == 7000


def test_shrinking_the_budget_while_eight_threads_read_never_exceeds_it() -> None:
    rng = np.random.default_rng(1)
    values = rng.standard_normal((40, 48, 48)).astype("float32")
    src = ArraySource(values, chunks=(4, 16, 16))
    chunk = src.chunk_nbytes()
    tse.config.set(cache_bytes=40 * chunk)
    cache = get_engine().cache
    stop = threading.Event()
    over: list[tuple[int, int]] = []
    errors: list[BaseException] = []
    budgets = [int(b * chunk) for b in (40, 2.5, 17, 0, 9, 30, 1, 60, 5)]

    def monitor() -> None:
        while not stop.is_set():
            used, budget = cache.usage()
            if used > budget:
                over.append((used, budget))

    def resizer() -> None:
        r = random.Random(7)
        while not stop.is_set():
            b = r.choice(budgets)
            tse.config.set(cache_bytes=b)
            used, budget = cache.usage()
            if used > b or budget != b:
                over.append((used, b))
            time.sleep(0.001)

    def worker(seed: int) -> None:
        r = random.Random(seed)
        try:
            for _ in range(40):
                key = tuple(slice(a := r.randrange(n), r.randrange(a, n) + 1) for n in values.shape)
                np.testing.assert_array_equal(read_selection(src, key, timeout=30), values[key])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    helpers = [threading.Thread(target=monitor), threading.Thread(target=resizer)]
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in helpers + threads:
        t.start()
    for t in threads:
        t.join(60)
    stop.set()
    for t in helpers:
        t.join(5)
    assert not errors, errors[0]
    assert not over, over[:5]
    used, budget = cache.usage()
    assert used <= budget == tse.stats().cache_budget == tse.config.get().cache_bytes


# -- prefetch ---------------------------------------------------------------------------------


def _scan(da, dim: str, n: int, pause: float = 0.03) -> None:  # type: ignore[no-untyped-def]
    for i in range(n):
        _ = da.isel({dim: i}).values
        time.sleep(pause)


@pytest.mark.parametrize("axis", ["time", "x"])
def test_momentum_prefetches_ahead_of_a_scan(axis: str) -> None:
    shape = {"time": (64, 16, 16), "x": (8, 16, 64)}[axis]
    chunks = {"time": (4, 16, 16), "x": (8, 16, 4)}[axis]
    inner = SyntheticSource(shape, chunks, "float32", latency=0.01)
    src = CountingSource(inner)
    ds = tse.open_dataset(src)
    da = ds["data"]
    n = shape[inner.dims.index(axis)]
    _scan(da, axis, n)
    snap = tse.stats()
    assert get_engine().prefetcher.last_policy[src.token] == "momentum"
    assert snap.prefetch_reads >= 8, snap
    assert snap.prefetch_used >= 8, snap
    assert snap.misses <= 2, snap  # the first chunk (and at most one before the run is seen)
    assert snap.hits + snap.joined >= n - 2
    # every chunk read exactly once: the prefetched slabs were the ones later shown
    assert set(src.counts) == set(inner.iter_chunks())
    assert max(src.counts.values()) == 1
    # and the values are right
    np.testing.assert_array_equal(
        da.isel({axis: n - 1}).values,
        inner.evaluate(
            tuple(slice(n - 1, n) if d == axis else slice(0, s) for d, s in zip(inner.dims, shape))
        ).squeeze(),
    )


def test_momentum_backwards() -> None:
    inner = SyntheticSource((32, 8, 8), (4, 8, 8), "float32", latency=0.01)
    src = CountingSource(inner)
    da = tse.open_dataset(src)["data"]
    for t in range(31, -1, -1):
        _ = da.isel(time=t).values
        time.sleep(0.03)
    snap = tse.stats()
    assert snap.prefetch_used >= 4 and snap.misses <= 2, snap


def test_panning_triggers_a_neighbourhood_ring() -> None:
    inner = SyntheticSource((256, 256), (16, 16), "float32", dims=("y", "x"))
    src = CountingSource(inner)
    da = tse.open_dataset(src)["data"]
    for k in range(4):
        y0 = x0 = 40 + 12 * k
        np.testing.assert_array_equal(
            da[y0 : y0 + 40, x0 : x0 + 40].values,
            inner.evaluate((slice(y0, y0 + 40), slice(x0, x0 + 40))),
        )
        time.sleep(0.05)
    eng = get_engine()
    assert eng.prefetcher.last_policy[src.token] == "neighbourhood"
    snap = tse.stats()
    assert snap.prefetch_reads > 0
    # the ring around the last view (chunks 5..6 on both axes) was read or is coming
    y0 = 40 + 36
    lo, hi = y0 // 16, (y0 + 39) // 16
    ring = {(i, j) for i in range(lo - 1, hi + 2) for j in range(lo - 1, hi + 2)} - {
        (i, j) for i in range(lo, hi + 1) for j in range(lo, hi + 1)
    }
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if all(eng.key(src, idx) in eng.cache for idx in ring):
            break
        time.sleep(0.02)
    assert all(eng.key(src, idx) in eng.cache for idx in ring)


def test_prefetch_off_issues_no_speculative_reads() -> None:
    inner = SyntheticSource((32, 8, 8), (4, 8, 8), "float32")
    src = CountingSource(inner)
    da = tse.open_dataset(src, prefetch="off")["data"]
    _scan(da, "time", 32, pause=0.005)
    snap = tse.stats()
    assert snap.prefetch_reads == 0 and snap.misses == 8 == src.reads


def test_prefetch_respects_cache_headroom() -> None:
    inner = SyntheticSource((64, 16, 16), (4, 16, 16), "float32")
    src = CountingSource(inner)
    tse.close()
    set_cache_bytes(int(1.5 * inner.chunk_nbytes()))  # no room for a second chunk
    da = tse.open_dataset(src)["data"]
    _scan(da, "time", 32, pause=0.005)
    snap = tse.stats()
    assert snap.prefetch_reads == 0, snap
    assert snap.cache_high_water <= snap.cache_budget


def test_prefetch_never_evicts_pinned_chunks() -> None:
    inner = SyntheticSource((64, 16, 16), (4, 16, 16), "float32", latency=0.005)
    src = CountingSource(inner)
    budget = 5 * inner.chunk_nbytes()
    tse.close()
    set_cache_bytes(budget)
    eng = get_engine()
    da = tse.open_dataset(src)["data"]
    _ = da.isel(time=0).values
    pinned = [eng.key(src, (0, 0, 0))]
    eng.cache.pin(pinned)
    try:
        _scan(da, "time", 64, pause=0.01)
        assert pinned[0] in eng.cache
        np.testing.assert_array_equal(eng.cache.get(pinned[0]), region(inner, (0, 0, 0)))
        snap = tse.stats()
        assert snap.prefetch_reads > 0
        assert snap.cache_high_water <= budget and snap.evictions > 0
    finally:
        eng.cache.unpin(pinned)


# -- stats ------------------------------------------------------------------------------------------


def test_snapshot_is_frozen_and_readable() -> None:
    src = SyntheticSource((8, 8), (4, 4), "float32")
    before = tse.stats()
    get_engine().fetch(src, [(0, 0), (1, 1)])
    get_engine().fetch(src, [(0, 0)])
    snap = tse.stats()
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.hits = 99  # type: ignore[misc]
    text = repr(snap)
    assert "hits=1" in text and "misses=2" in text and "MB/s" in text and "latency" in text
    delta = snap - before
    assert (delta.hits, delta.misses, delta.reads) == (1, 2, 2)
    assert delta.bytes_decoded == 2 * 4 * 4 * 4
    d = snap.as_dict()
    assert d["hit_ratio"] == snap.hit_ratio and d["queue_depth"] == 0
    assert 0 < snap.latency_p50 <= snap.latency_p95 <= snap.latency_p99
    assert set(snap.queued) == {"visible", "planned", "speculative"}
    json.dumps(d)  # plain data, ready for a UI
    tse.reset_stats()
    assert tse.stats().hits == 0 and tse.stats().reads == 0


def test_bytes_read_are_the_encoded_bytes_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    values = np.tile(np.arange(50, dtype="float32"), (20, 50)).reshape(20, 50, 50)
    arr = zarr.create_array(
        str(path),
        shape=values.shape,
        chunks=(5, 25, 25),
        dtype="float32",
        compressors=ZstdCodec(level=3),
        dimension_names=("t", "y", "x"),
    )
    arr[...] = values
    chunk_files = [p for p in (path / "c").rglob("*") if p.is_file()]
    assert len(chunk_files) == 16
    on_disk = sum(p.stat().st_size for p in chunk_files)
    assert on_disk < values.nbytes / 4  # compressible data: encoded != decoded
    ds = tse.open_dataset(path)
    np.testing.assert_array_equal(ds[next(iter(ds.data_vars))].values, values)
    snap = tse.stats()
    assert snap.bytes_read == on_disk
    assert snap.bytes_decoded == values.nbytes
    assert snap.read_rate > 0 and snap.decode_rate > 0


def test_merge_remote_adds_worker_counters() -> None:
    eng = get_engine()
    src = SyntheticSource((4, 4), (2, 2), "float32")
    eng.fetch(src, [(0, 0)])
    remote = dataclasses.replace(tse.stats(), reads=10, bytes_read=1000)
    eng.stats.merge_remote("worker-1", remote)
    snap = tse.stats()
    assert snap.reads == 11 and snap.workers == 1


def test_a_local_chunk_is_read_on_the_read_threads_while_the_io_loop_is_busy(small_cube: Path) -> None:
    """A blocking source's reads are dispatched to the read threads and settled there: a
    busy I/O loop does not hold up a reader of local chunks."""
    import threading

    ds = tse.open_dataset(small_cube)
    engine = get_engine()
    release, busy = threading.Event(), threading.Event()

    def hold_the_loop() -> None:
        busy.set()
        release.wait(60)  # a bound if the test fails, not a speed

    engine.call_soon(hold_the_loop)
    try:
        assert busy.wait(30)
        reads = engine.snapshot().reads
        got = ds["temp"].isel(time=slice(8, 16)).values  # chunk row 1, whole: not read yet
        assert engine.snapshot().reads > reads
        assert release.is_set() is False  # answered while the loop was still held
    finally:
        release.set()
    np.testing.assert_array_equal(got, zarr.open_group(str(small_cube))["temp"][8:16])


# -- shutdown -----------------------------------------------------------------------------------


def test_close_stops_every_thread_and_the_engine_restarts(small_cube: Path) -> None:
    from tsexplore.testing.http import StoreServer

    ds = tse.open_dataset(small_cube)
    _ = ds["temp"].isel(time=0).values  # local
    with StoreServer(small_cube) as srv:
        remote = tse.open_dataset(srv.url)
        _ = remote["temp"].isel(time=1).values  # http
        counted = CountingSource(SyntheticSource((64, 8, 8), (1, 8, 8), latency=0.2))
        slow = tse.open_dataset(counted)["data"]
        for t in range(5):  # four equal steps: a steady pattern the prefetcher follows
            _ = slow.isel(time=t).values  # momentum: speculative reads now queued/in flight
        assert get_engine().snapshot().prefetch_reads > 0
        old = get_engine()
        tse.close()
        reads_at_close = counted.reads
        assert old.closed
    deadline = time.monotonic() + 30  # a bound on a loaded machine, not a speed
    while engine_threads() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not engine_threads(), engine_threads()
    # the speculative reads still queued at close() were dropped, not run
    assert counted.reads == reads_at_close < 64, (reads_at_close, counted.reads)
    with pytest.raises(EngineClosedError):
        old.request(SyntheticSource((2,), (1,)), [(0,)])
    # the next read starts a fresh engine
    np.testing.assert_array_equal(
        ds["temp"].isel(time=0).values, zarr.open_group(str(small_cube))["temp"][0]
    )
    assert get_engine() is not old and engine_threads()


def test_a_loop_closed_before_its_thread_runs_it_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine closed as soon as it starts, on a loaded machine: its loop thread reaches
    run_forever only after close() returned; it must stop there, not run forever."""
    import threading

    from tsexplore.engine.loop import IOLoop

    go = threading.Event()
    run = IOLoop._run

    def late_run(self: IOLoop) -> None:
        go.wait(30)  # the thread is scheduled late
        run(self)

    monkeypatch.setattr(IOLoop, "_run", late_run)
    io = IOLoop(dataclasses.replace(tse.config.get(), io_threads=1), name="tsexplore-io-late")
    io.close(timeout=0.2)  # gives up waiting on the thread
    go.set()
    io.thread.join(30)  # a bound on a loaded machine
    assert not io.thread.is_alive()


def test_close_fails_pending_waiters() -> None:
    src = LatencySource(SyntheticSource((4, 4), (2, 2), "float32"), 5.0)
    futures = get_engine().request(src, [(0, 0), (1, 1)])
    tse.close()
    for f in futures:
        with pytest.raises(EngineClosedError):
            f.result(3)


def test_session_and_engine_are_context_managers() -> None:
    with tse.session():
        get_engine().fetch(SyntheticSource((4,), (2,)), [(0,)])
        eng = get_engine()
    assert eng.closed
    from tsexplore.engine import Engine

    with Engine(cache_bytes=1000) as own:
        assert own.fetch(SyntheticSource((4,), (2,)), [(1,)])[0].shape == (2,)
    assert own.closed


# -- memory ----------------------------------------------------------------------------------------

PETABYTE_SCRIPT = r"""
import json, os, time
import psutil
import tsexplore as tse
tse.get_engine()
proc = psutil.Process()
rss0 = proc.memory_info().rss
ds = tse.synthetic((10**5, 10**5, 10**5), chunks=(1, 1000, 1000))
rss1 = proc.memory_info().rss
reads_at_open = tse.stats().reads
corner = ds["data"][12345, :3, :3].values
reads = tse.stats().reads
tse.close()
print(json.dumps({"reads_at_open": reads_at_open, "reads": reads, "rss": rss1 - rss0,
                  "size": int(ds["data"].size), "corner": corner.tolist()}))
"""


@pytest.mark.slow
def test_opening_a_petabyte_array_reads_nothing_and_stays_small() -> None:
    env = {**os.environ, "TSEXPLORE_SAMPLE_SIZE": "small"}
    out = subprocess.run(
        [sys.executable, "-c", PETABYTE_SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["size"] == 10**15
    # opening reads no chunk (10^9 of them: nothing is listed or planned per chunk) ...
    assert result["reads_at_open"] == 0, result
    assert result["reads"] == 1, result  # ... and a corner reads the one chunk it needs
    assert result["rss"] < 50 * 2**20, result
    src = SyntheticSource((10**5, 10**5, 10**5), (1, 1000, 1000))
    np.testing.assert_array_equal(
        result["corner"], src.evaluate((slice(12345, 12346), slice(0, 3), slice(0, 3)))[0]
    )


def test_one_pass_readers_take_read_ahead_chunks_out_of_the_cache() -> None:
    """A chunk read ahead (SPECULATIVE) stays cached for a keeping reader, but a one-pass
    reader (cache=False) takes it: whether it arrives before or after the read ends."""
    inner = SyntheticSource((6, 8), (1, 8), "float32")
    src = CountingSource(LatencySource(inner, 0.2))
    eng = get_engine()
    key = lambda i: eng.key(src, (i, 0))  # noqa: E731
    eng.request(src, [(i, 0) for i in range(4)], Priority.SPECULATIVE)
    # 0: a one-pass reader joins the read in flight; the prefetcher asking again changes nothing
    (f0,) = eng.submit(src, [eng.key(src, (0, 0))], Priority.PLANNED, keep=False)
    eng.request(src, [(0, 0)], Priority.SPECULATIVE)
    np.testing.assert_array_equal(f0.result(5), region(inner, (0, 0)))
    # 1: a keeping reader joins: the chunk stays
    (f1,) = eng.request(src, [(1, 0)], Priority.PLANNED)  # in flight or already cached
    f1.result(5)
    eng.request(src, [(3, 0)])[0].result(5)  # a keeping (VISIBLE) reader joins 3
    deadline = time.monotonic() + 5
    while key(2) not in eng.cache and time.monotonic() < deadline:
        time.sleep(0.01)
    # 2: read ahead and finished; a one-pass reader takes it out of the cache
    (v2,) = eng.submit(src, [eng.key(src, (2, 0))], Priority.PLANNED, keep=False)
    np.testing.assert_array_equal(v2, region(inner, (2, 0)))
    assert key(0) not in eng.cache and key(2) not in eng.cache
    assert key(1) in eng.cache and key(3) in eng.cache  # kept: a keeping reader wanted them
    assert src.reads == 4  # nothing was read twice
    # a cached chunk that was not read ahead for anyone stays, also for a one-pass reader
    (v3,) = eng.submit(src, [eng.key(src, (3, 0))], Priority.PLANNED, keep=False)
    assert key(3) in eng.cache and v3 is not None


def test_the_prefetch_speeds_up_only_for_a_reader_on_its_heels(monkeypatch) -> None:
    """Taking a chunk read ahead a moment ago (a scrub) lets the prefetch use every read
    thread; taking one it read long before (a 30 fps play) keeps its cap, or restores it after
    a catch-up, so that a core stays free for the reader; joining a read ahead still in flight
    is catching up too."""
    import tsexplore.engine.scheduler as scheduler

    src = CountingSource(SyntheticSource((6, 8), (1, 8), "float32"))
    eng = get_engine()
    table = eng._table

    def read_ahead(i: int) -> None:
        eng.request(src, [(i, 0)], Priority.SPECULATIVE)[0].result(5)
        deadline = time.monotonic() + 5
        while eng.key(src, (i, 0)) not in eng.cache and time.monotonic() < deadline:
            time.sleep(0.01)

    table.catching_up_until = 0.0
    monkeypatch.setattr(scheduler, "CATCH_UP_LEAD", 0.0)  # every read ahead ended "long ago"
    read_ahead(0)
    eng.request(src, [(0, 0)])[0].result(5)
    assert table.catching_up_until == 0.0
    assert eng.speculative_cap("sync") == min(eng._io.threads, max(1, (os.cpu_count() or 2) - 1))
    monkeypatch.setattr(scheduler, "CATCH_UP_LEAD", 1e9)  # every read ahead ended a moment ago
    read_ahead(1)
    eng.request(src, [(1, 0)])[0].result(5)
    assert table.catching_up_until > time.monotonic()
    assert eng.speculative_cap("sync") == eng.concurrency("sync")
    # the reader then takes a chunk read ahead long before: the prefetch is ahead again
    monkeypatch.setattr(scheduler, "CATCH_UP_LEAD", 0.0)
    read_ahead(2)
    eng.request(src, [(2, 0)])[0].result(5)
    assert table.catching_up_until == 0.0
    assert eng.speculative_cap("sync") == min(eng._io.threads, max(1, (os.cpu_count() or 2) - 1))
    assert src.reads == 3  # each was a read ahead the reader used


def test_a_scrub_reads_the_chunks_it_is_on_itself_once_it_is_a_pattern_and_only_those_ahead_as_guesses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A scrub of a local blosc store starts by reading frames by parts; at the view that
    makes it a pattern (the second step of one frame) the reader reads the chunks it is on
    whole itself, at its own priority (no guess of them, under no cap for guesses), and the
    prefetcher guesses the chunks ahead. Chunks already cached are not read again, and
    reading only the chunks ahead keeps the guesses' cap. (A reader that paces its views has
    them made by parts instead: no pause here counts as one, however busy the machine.)"""
    import xarray as xr

    from tsexplore.engine import ahead
    from tsexplore.engine.types import WHOLE, ChunkRequest

    monkeypatch.setattr(ahead, "MIN_PAUSE", 3600.0)

    data = np.random.default_rng(3).normal(size=(48, 256, 256)).astype("float32")
    path = tmp_path / "blosc.zarr"
    xr.Dataset({"v": (("time", "y", "x"), data)}).to_zarr(  # blocks: frames are read by parts
        path, encoding={"v": {"chunks": (16, 256, 256), "compressors": zarr.codecs.BloscCodec(cname="lz4")}},
        zarr_format=3)
    da = tse.open_dataset(path)["v"]
    eng = get_engine()

    def whole_rows() -> set[int]:
        return {k.index[0] for k in eng.cache.keys() if isinstance(k, ChunkRequest) and k.part is WHOLE}

    for t in range(2):  # frames by parts: no pattern yet
        np.testing.assert_array_equal(da.isel(time=t).values, data[t])
    assert tse.stats().part_reads == 2 and 0 not in whole_rows()
    np.testing.assert_array_equal(da.isel(time=2).values, data[2])  # the pattern: its chunk whole
    snap = tse.stats()
    assert snap.part_reads == 2 and 0 in whole_rows(), snap  # read for it, as it waited
    deadline = time.monotonic() + 5  # the engine's thread plans from the read just after it
    while (1 not in whole_rows() or tse.stats().in_flight) and time.monotonic() < deadline:
        time.sleep(0.01)
    snap = tse.stats()
    assert snap.speculative_reads > 0 and 1 in whole_rows(), snap  # the chunks ahead, guessed
    assert snap.reads - snap.part_reads == 1 + snap.speculative_reads, snap  # row 0 not guessed

    tse.close()  # a new engine; the first chunk row read whole (cached) before the scrub
    da = tse.open_dataset(path)["v"]
    np.testing.assert_array_equal(da.isel(time=slice(0, 16)).values, data[:16])
    eng = get_engine()
    table = eng._table
    table.catching_up_until = 0.0
    for t in range(4):  # the pattern reads only the chunks ahead
        np.testing.assert_array_equal(da.isel(time=t).values, data[t])
    deadline = time.monotonic() + 5
    while tse.stats().speculative_reads == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert tse.stats().speculative_reads > 0
    assert table.catching_up_until == 0.0


def test_a_guess_of_a_chunk_a_one_pass_reader_took_is_refused_when_admitted() -> None:
    """The prefetcher's own check (not cached, not taken) and its request are two steps: the
    one-pass reader may take the chunk, and its read end uncached, in between. The read
    table decides at admission (the interleaving forced here), so the chunk is read once."""
    src = CountingSource(SyntheticSource((6, 8), (1, 8), "float32"))
    eng = get_engine()
    (f0,) = eng.submit(src, [eng.key(src, (0, 0))], Priority.PLANNED, keep=False)  # a dask task
    f0.result(5)
    assert eng.key(src, (0, 0)) not in eng.cache  # one pass: not kept
    # ... and the guess for a one-pass reader, checked before the task took the chunk, arrives
    (g0, g1) = eng.request(src, [(0, 0), (1, 0)], Priority.SPECULATIVE, skip_taken=True)
    with pytest.raises(RequestCancelledError, match="one-pass"):
        g0.result(5)
    g1.result(5)
    assert src.counts[(0, 0)] == 1 and src.reads == 2
    # a guess for a keeping reader is still made
    eng.request(src, [(0, 0)], Priority.SPECULATIVE)[0].result(5)
    assert src.counts[(0, 0)] == 2


def test_a_read_that_ends_between_the_look_up_and_the_admission_is_not_read_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A request looks the cache up, then admits its misses; a read of the same chunk may end
    (fill the cache and leave the read table) in between -- forced here by a look-up that
    misses once. The admission looks again under the table's lock: a hit, no second read."""
    src = CountingSource(SyntheticSource((6, 8), (1, 8), "float32"))
    eng = get_engine()
    eng.fetch(src, [(0, 0)])
    real = eng.cache.get_many
    stale = [True]

    def get_many(keys):  # type: ignore[no-untyped-def]
        if stale[0]:
            stale[0] = False
            return [None] * len(keys)  # as if looked up just before the read ended
        return real(keys)

    monkeypatch.setattr(eng.cache, "get_many", get_many)
    hits = tse.stats().hits
    (item,) = eng.submit(src, [eng.key(src, (0, 0))])
    np.testing.assert_array_equal(item, region(src.inner, (0, 0)))  # an array: a hit
    assert src.reads == 1 and tse.stats().hits == hits + 1


def test_streams_hint_the_chunks_after_their_reads_to_the_source() -> None:
    """Engine.stream passes read-ahead hints (ChunkSource.advise) for the indices after the
    reads it keeps in flight, once each, and never for cached chunks."""
    inner = SyntheticSource((40, 4), (1, 4), "float32")
    hints: list[tuple[int, ...]] = []

    class Hinted(CountingSource):
        def advise(self, indices):
            hints.extend(tuple(i) for i in indices)

    src = Hinted(inner)
    eng = get_engine()
    eng.fetch(src, [(0, 0), (1, 0)])  # cached: never hinted
    order = [(i, 0) for i in range(40)]
    got = [idx for idx, _ in eng.stream(src, order, ahead=4)]
    assert got == order
    assert (0, 0) not in hints and (1, 0) not in hints
    assert sorted(hints) == [(i, 0) for i in range(2, 40)]  # every other index, once
    assert src.reads == 40


def test_zarr_advise_is_a_harmless_hint(tmp_path: Path) -> None:
    """Hints on present and missing chunk files neither fail nor change what is read."""
    data = np.arange(64, dtype="float32").reshape(8, 8)
    arr = zarr.create_array(str(tmp_path / "a.zarr"), shape=(8, 8), chunks=(4, 4), dtype="float32",
                            fill_value=np.nan, dimension_names=("y", "x"))
    arr[:4] = data[:4]  # the lower chunks are never written
    ds = tse.open_dataset(tmp_path / "a.zarr", missing="fill")
    (src,) = ds[list(ds.data_vars)[0]].tse.sources
    src.advise([(0, 0), (0, 1), (1, 0), (1, 1)])
    got = ds[list(ds.data_vars)[0]].values
    np.testing.assert_array_equal(got[:4], data[:4])
    assert np.isnan(got[4:]).all()


# -- one checked read, scheduled or nested ------------------------------------------------------


class Quirky(SyncChunkSource):
    """A 4 x 4 source (2 x 2 chunks) with one quirk per chunk, opened with missing="fill"."""

    def __init__(self) -> None:
        self.shape, self.chunks, self.dims = (4, 4), (2, 2), ("y", "x")
        self.dtype, self.fill_value, self.attrs = np.dtype("float32"), -1.0, {}
        self.options = SourceOptions(missing="fill")
        self.token = f"quirky-{id(self)}"

    def read_chunk_sync(self, index):
        if index == (0, 0):
            raise MissingChunkError("chunk (0, 0) is not in the store", source=self.token, index=index)
        if index == (0, 1):
            return np.full((2, 2), 7.0, dtype="float64"), 32  # wrong dtype: cast
        if index == (1, 0):
            raise OSError("disk on fire")
        return np.zeros((3, 2), dtype="float32"), 24  # wrong shape


class Nested(SyncChunkSource):
    """Reads another source through the engine from inside a read thread (a nested read)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.shape, self.chunks, self.dims = inner.shape, inner.chunks, inner.dims
        self.dtype, self.fill_value, self.attrs = inner.dtype, inner.fill_value, {}
        self.token = f"nested-{id(self)}"

    def read_chunk_sync(self, index):
        return get_engine().fetch(self.inner, [index])[0], 0


@pytest.mark.parametrize("via", ["scheduled", "nested", "nested-async"])
def test_every_read_is_checked_the_same_way(via) -> None:
    quirky = Quirky()
    src = quirky if via == "scheduled" else Nested(quirky if via == "nested" else LatencySource(quirky, 0.0))
    eng = get_engine()
    filled = eng.fetch(src, [(0, 0)])[0]
    np.testing.assert_array_equal(filled, np.full((2, 2), -1.0, dtype="float32"))
    cast = eng.fetch(src, [(0, 1)])[0]
    assert cast.dtype == np.float32 and (cast == 7).all()
    with pytest.raises(ChunkReadError, match=r"chunk \(1, 0\).*disk on fire"):
        eng.fetch(src, [(1, 0)])
    with pytest.raises(ChunkReadError, match=r"returned shape \(3, 2\) for chunk \(1, 1\)"):
        eng.fetch(src, [(1, 1)])
    snap = eng.snapshot()
    assert snap.missing_filled == 1
    assert snap.errors >= 2 and snap.reads >= 4
    assert snap.latency_p50 > 0


def test_cancel_drops_the_queued_reads_of_older_generations() -> None:
    inner = SyntheticSource((40, 4), (1, 4), "float32")
    src = LatencySource(inner, 0.05)
    eng = get_engine()
    futures = eng.request(src, [(i, 0) for i in range(40)], channel="c", generation=3)
    wanted = eng.request(src, [(39, 0)])[0]  # someone else waits for this one: not cancelled
    assert eng.cancel("c", 3) == 0  # not a newer generation
    n = eng.cancel("c", 4)
    assert n > 20
    cancelled = 0
    for i, fut in enumerate(futures):
        try:
            np.testing.assert_array_equal(fut.result(10), region(inner, (i, 0)))
        except RequestCancelledError:
            cancelled += 1
    assert cancelled == n == eng.snapshot().cancelled
    np.testing.assert_array_equal(wanted.result(10), region(inner, (39, 0)))
    fresh = LatencySource(inner, 0.05)  # nothing of it cached
    busy = eng.request(fresh, [(i, 0) for i in range(12)])  # anonymous: never cancelled
    later = eng.request(fresh, [(30, 0)], channel="c", generation=4)[0]  # queued behind them
    assert eng.cancel("c") == 1  # every generation so far
    with pytest.raises(RequestCancelledError):
        later.result(10)
    assert all(f.result(10) is not None for f in busy)
