"""The prefetcher knows when it is guessing wrong: guesses earn an allowance (additive
increase, multiplicative decrease), random jumps keep it silent, a steady pattern brings it
back, and play reads ahead the next frames as parts of chunks."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import math
import random
import time
from pathlib import Path

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.codecs import BloscCodec

import tsexplore as tse
from tsexplore.engine import ChunkRequest
from tsexplore.engine.guesses import HORIZON_OBSERVATIONS, Guesses
from tsexplore.engine.prefetch import Observation, shifted_keys, steady_steps
from tsexplore.sources import SyntheticSource
from tsexplore.sources._cblosc2 import item_decoder
from tsexplore.testing.wrappers import CountingSource


def test_guesses_double_while_right_and_halve_when_wrong() -> None:
    g = Guesses(0)
    used, unused = 0, set()
    assert g.room(steady=False, unused=unused.__contains__) == 0  # nothing earned yet
    assert g.room(steady=True, unused=unused.__contains__) == 1  # a steady pattern may probe
    rooms = []
    for step in range(6):  # every guess is used at the next view
        g.settle(used, unused.__contains__)
        n = g.room(steady=True, unused=unused.__contains__)
        rooms.append(n)
        keys = [(step, k) for k in range(n)]
        g.made(keys)
        used += n  # a reader took them all
    assert rooms == [1, 1, 2, 4, 8, 16]
    # now every guess goes unused: each round of wrong guesses halves the allowance
    allowance, wasted = g.allowance, 0
    for round_ in range(6):
        n = g.room(steady=False, unused=unused.__contains__)
        keys = [("w", round_, k) for k in range(n)]
        g.made(keys)
        unused.update(keys)
        wasted += n
        for _ in range(HORIZON_OBSERVATIONS):
            g.settle(used, unused.__contains__)
    assert g.allowance == allowance // 2 ** 6 == 0
    assert g.room(steady=False, unused=unused.__contains__) == 0  # silent
    assert g.room(steady=True, unused=unused.__contains__) == 1  # until a pattern returns
    assert g.wrong == wasted and g.right == used


def _obs(positions: list[int]) -> list[Observation]:
    return [Observation(0.1 * i, (p, 0, 0), ((p // 4, p // 4), (0, 0), (0, 0))) for i, p in enumerate(positions)]


def test_steady_steps_tell_play_from_random_jumps() -> None:
    assert steady_steps(_obs([0, 1, 2, 3, 4])) == 4
    assert steady_steps(_obs([10, 8, 6, 4])) == 3
    assert steady_steps(_obs([0, 3, 5, 8, 10])) == 4  # a drag: uneven, within a factor 2
    assert steady_steps(_obs([0, 300, 310, 320])) == 2  # a jump, then steps
    assert steady_steps(_obs([5, 400, 30, 200])) == 1  # only the last step itself
    assert steady_steps(_obs([0, 10, 200])) == 1
    assert steady_steps(_obs([3])) == 0
    # moves of more than JUMP_CHUNKS chunks (here 4 frames each): a run only when equal
    assert steady_steps(_obs([0, 64, 128, 192])) == 3  # paging at a stride
    assert steady_steps(_obs([0, 100, 190, 270])) == 1  # alike jumps: random orders make them
    assert steady_steps(_obs([0, 100, 180, 260])) == 2


def test_momentum_takes_equal_jumps_for_a_pattern_and_alike_ones_for_chance() -> None:
    from tsexplore.engine.prefetch import momentum_targets

    grid, chunks = (128, 1, 1), (4, 16, 16)
    assert momentum_targets(_obs([0, 1, 2]), grid, chunks, 0.01, 2) is not None  # play
    assert momentum_targets(_obs([0, 3, 5]), grid, chunks, 0.01, 2) is not None  # a drag
    assert momentum_targets(_obs([0, 64, 128]), grid, chunks, 0.01, 2) is not None  # paging
    assert momentum_targets(_obs([88, 187, 280]), grid, chunks, 0.01, 2) is None  # random


def test_shifted_keys_are_the_next_views() -> None:
    shape = (10, 8, 8)
    assert shifted_keys((3,), shape, 0, 2, 3) == [(5, slice(None), slice(None)), (7, slice(None), slice(None)), (9, slice(None), slice(None))]
    assert shifted_keys((slice(2, 4), slice(0, 8)), shape, 0, -1, 5) == [
        (slice(1, 3, 1), slice(0, 8), slice(None)), (slice(0, 2, 1), slice(0, 8), slice(None))]
    assert shifted_keys(([1, 2], 0), shape, 0, 1, 2) == []  # an index array does not move


def test_random_jumps_keep_the_prefetcher_silent_and_play_brings_it_back() -> None:
    inner = SyntheticSource((512, 16, 16), (4, 16, 16), "float32", latency=0.002)
    src = CountingSource(inner)
    da = tse.open_dataset(src)["data"]
    rng = random.Random(1)
    for _ in range(150):
        t = rng.randrange(512)
        np.testing.assert_array_equal(da.isel(time=t).values, inner.evaluate((slice(t, t + 1), slice(0, 16), slice(0, 16)))[0])
    jumps = tse.stats()
    assert jumps.speculative_reads <= 15, jumps  # nearly silent (a steady run now and then)
    tse.get_engine().cache.clear()  # play on chunks not read yet (the guesses' record stays)
    for t in range(50, 500):  # play
        _ = da.isel(time=t).values
        time.sleep(0.004)
    play = tse.stats() - jumps
    assert play.speculative_reads >= 20, play
    assert play.prefetch_used_ratio >= 0.9, play
    assert play.misses <= 8, play


@pytest.fixture
def cube(tmp_path: Path) -> tuple[Path, np.ndarray]:
    shape = (128, 64, 64)
    values = (np.arange(math.prod(shape)) % 4093 * 0.25).astype("float32").reshape(shape)
    group = zarr.open_group(str(tmp_path / "c.zarr"), mode="w")
    arr = group.create_array("temp", shape=shape, chunks=(16, 32, 32), dtype="float32",
                             compressors=BloscCodec(cname="zstd", clevel=1, shuffle="shuffle", blocksize=4096),
                             dimension_names=("time", "y", "x"))
    arr[...] = values
    return tmp_path / "c.zarr", values


@pytest.mark.skipif(item_decoder() is None, reason="C-Blosc2 is not loaded")
def test_play_decodes_ahead_only_what_it_shows(cube) -> None:  # type: ignore[no-untyped-def]
    """The frames of the first chunk-row are read as parts; once play is a steady pattern the
    chunks ahead of it are read whole, once (it will show every frame of them): nothing
    decoded in vain."""
    path, values = cube
    da = tse.open_dataset(path)["temp"]
    for t in range(128):
        np.testing.assert_array_equal(da.isel(time=t).values, values[t])
        time.sleep(0.01)
    snap = tse.stats()
    assert 4 <= snap.part_reads <= 16 * 4, snap  # the first chunk-row in parts, then whole chunks
    assert snap.prefetch_used_ratio >= 0.9, snap
    assert snap.decoded_ratio <= 1.1, snap  # nothing decoded that play did not show
    assert snap.hits + snap.joined >= 0.8 * 128 * 4, snap


def test_steps_of_one_frame_make_play_steady_at_its_third_frame(cube) -> None:  # type: ignore[no-untyped-def]
    """Two steps of one frame (play, a slider's arrow key) start the read-ahead at once; two
    steps of two frames are not yet a pattern (random jumps make such pairs by chance)."""
    path, values = cube
    da = tse.open_dataset(path)["temp"]
    for t in (0, 2, 4):
        np.testing.assert_array_equal(da.isel(time=t).values, values[t])
        time.sleep(0.05)
    time.sleep(0.2)  # the engine's thread has planned from every read
    assert tse.stats().speculative_reads == 0
    for t in (64, 65, 66):
        np.testing.assert_array_equal(da.isel(time=t).values, values[t])
        time.sleep(0.05)
    time.sleep(0.2)
    assert tse.stats().speculative_reads >= 4  # at least a chunk-row of 2 x 2 chunks


def test_play_keeps_only_the_chunks_around_the_view_decoded(cube) -> None:  # type: ignore[no-untyped-def]
    """Once play is a steady pattern, the chunks it has passed leave the decoded tier (their
    buffers decode the chunks ahead): a second loop decodes them again, from a local store's
    files (the page cache holds their bytes), and equals the data."""
    path, values = cube
    da = tse.open_dataset(path)["temp"]
    for t in range(128):
        np.testing.assert_array_equal(da.isel(time=t).values, values[t])
        time.sleep(0.005)
    rows = {k.index[0] for k in tse.get_engine().cache.keys() if isinstance(k, ChunkRequest)}
    assert rows <= {6, 7}, rows  # the view's chunk-row (and the one just passed)
    before = tse.stats()
    for t in range(128):
        np.testing.assert_array_equal(da.isel(time=t).values, values[t])
    snap = tse.stats() - before
    assert 0 < snap.bytes_decoded <= 1.2 * values.nbytes, snap  # each chunk decoded again, once


def test_a_fast_scrub_of_one_frame_chunks_keeps_only_the_chunks_around_the_view(tmp_path: Path) -> None:
    """A scrub faster than the engine's thread plans (it plans once for the several views
    answered meanwhile, each a chunk one frame deep) still releases every chunk it passed,
    not only the one behind the last view: the decoded tier holds the view's neighbourhood."""
    shape = (128, 32, 32)
    values = np.random.default_rng(2).standard_normal(shape).astype("float32")
    arr = zarr.create_array(str(tmp_path / "f.zarr"), shape=shape, chunks=(1, 32, 32), dtype="float32",
                            dimension_names=("time", "y", "x"))
    arr[...] = values
    ds = tse.open_dataset(tmp_path / "f.zarr")
    da = ds[list(ds.data_vars)[0]]
    for t in range(100):  # the chunks after the last view are read ahead
        np.testing.assert_array_equal(da.isel(time=t).values, values[t])
    time.sleep(0.3)  # the engine's thread has planned from every read
    rows = sorted(k.index[0] for k in tse.get_engine().cache.keys() if isinstance(k, ChunkRequest))
    # around the last view, and at most the first views, read before play was a pattern
    assert rows and len([r for r in rows if r < 100 - 8]) <= 3, rows


@pytest.mark.parametrize("in_flight", [False, True], ids=["cached", "in-flight"])
def test_a_release_planned_after_a_fetch_leaves_what_the_fetch_cached(in_flight: bool) -> None:
    """The engine's thread plans from a view a while after it was answered (a drain): the
    chunks a steady pattern had passed by then leave the decoded tier, and their reads in
    flight are not kept; but not what another reader fetched after that view (a dask
    reduction's last tasks, then ``fetch`` of every chunk: its next reduction must find them
    all cached), whether its reads had ended or were still running when the plan was made."""
    from tsexplore.engine.planning import plan_selection
    from tsexplore.sources import ArraySource
    from tsexplore.testing.wrappers import LatencySource

    values = np.arange(32 * 16, dtype="float32").reshape(32, 4, 4)
    every = slice(None)
    engine = tse.get_engine()

    def cached_after(views_answered_before_the_fetch: bool) -> set[int]:
        source = ArraySource(values, dims=("time", "y", "x"), chunks=(1, 4, 4),
                             name=f"late-{views_answered_before_the_fetch}")
        if in_flight:  # the fetch's reads are still running when the plan is made
            source = LatencySource(source, 1.0)  # (the 16 views below are planned well within it)
        t0 = time.monotonic() - 1.0
        futures = engine.request(source, [(t, 0, 0) for t in range(16)])
        if not in_flight:
            cf.wait(futures, timeout=30)
        if not views_answered_before_the_fetch:
            t0 = time.monotonic()
        for t in range(16):  # a one-pass reader's steady views, planned from now
            plan = plan_selection((t, every, every), values.shape, (1, 4, 4))
            engine.prefetcher.observe(source, plan, True, when=t0 + 0.01 * t)
        assert all(f.result(timeout=30).shape == (1, 4, 4) for f in futures)
        return {k.index[0] for k in engine.cache.keys()
                if isinstance(k, ChunkRequest) and k.array == source.token and k.index[0] < 16}

    assert cached_after(True) == set(range(16))  # fetched after the views: all stay
    left = cached_after(False)  # fetched before them: the views passed them, they leave
    assert len(left) <= 3, left


def test_a_second_loop_of_remote_play_decodes_from_the_encoded_tier(cube) -> None:  # type: ignore[no-untyped-def]
    """A remote store: the frames of the chunks play passed stay in the encoded tier, so a
    second loop asks the store for nothing."""
    from tsexplore.testing.http import StoreServer

    path, values = cube
    zarr.consolidate_metadata(str(path))
    with StoreServer(path, latency=0.002) as srv:
        da = tse.open_dataset(srv.url)["temp"]
        for t in range(128):
            np.testing.assert_array_equal(da.isel(time=t).values, values[t])
            time.sleep(0.005)
        time.sleep(0.3)  # the last guesses land
        asked = len(srv.requests)
        before = tse.stats()
        for t in range(128):
            np.testing.assert_array_equal(da.isel(time=t).values, values[t])
        snap = tse.stats() - before
        assert len(srv.requests) == asked, srv.requests[asked:]
        assert snap.encoded_hits > 0 and snap.bytes_read == 0, snap


def test_random_rereads_are_cache_hits() -> None:
    """Random jumps (which now and then go the same way twice) keep every chunk they read."""
    from tsexplore.engine.array import read_selection
    from tsexplore.sources import ArraySource

    n = 2000
    values = np.arange(n * 16, dtype="float32").reshape(n, 4, 4)
    source = ArraySource(values, dims=("time", "y", "x"), chunks=(1, 4, 4), name="tiny")
    rng = np.random.default_rng(0)
    every = slice(None)
    for i in rng.permutation(n).tolist():
        read_selection(source, (i, every, every))
    time.sleep(0.1)  # plans made after cached reads run on the engine's thread
    before = tse.stats()
    for i in rng.integers(0, n, 2000).tolist():
        np.testing.assert_array_equal(read_selection(source, (i, every, every)), values[i])
    snap = tse.stats() - before
    # every read a hit; a chance run of equal steps with pauses between them (a slow machine)
    # can have a view made ahead of the reader, whose read of a cached chunk is a hit too
    assert snap.misses == 0 and snap.hits >= 2000, snap


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 5)), min_size=0, max_size=60))
def test_a_batch_of_reads_leaves_the_history_one_at_a_time_would(reads) -> None:  # type: ignore[no-untyped-def]
    """The engine's thread records a drain's batch of reads answered from the cache at once,
    and only those whose views the history can keep: the histories (views and their order,
    same view twice in a row collapsed, the last ``HISTORY`` kept) are those of recording
    every read one by one."""
    from tsexplore.engine.planning import plan_selection
    from tsexplore.engine.prefetch import Prefetcher

    sources = [SyntheticSource((32, 8, 8), chunks=(4, 8, 8), name=f"s{k}") for k in range(2)]
    batch = [(sources[s], plan_selection((t, slice(None), slice(None)), (32, 8, 8), (4, 8, 8)), float(n))
             for n, (s, t) in enumerate(reads)]
    one, many = Prefetcher(None), Prefetcher(None)  # type: ignore[arg-type]
    for source, plan, when in batch:
        one._record(source, plan, when)
    many._record_all(batch)
    for source in sources:
        views = [(o.lo, o.time) for o in one._history.get(source.token, ())]
        assert [(o.lo, o.time) for o in many._history.get(source.token, ())] == views


def test_reads_answered_from_the_cache_are_timed_when_answered_not_when_drained() -> None:
    """A drain records the cached reads queued since the last one; each keeps the time it was
    answered (a momentum's speed is measured from these times: stamped at the drain, reads
    answered milliseconds apart looked simultaneous, a scrub infinitely fast)."""
    from tsexplore.engine import prefetch
    from tsexplore.engine.array import read_selection
    from tsexplore.engine.scheduler import get_engine
    from tsexplore.sources import ArraySource

    values = np.arange(64 * 16, dtype="float32").reshape(64, 4, 4)
    source = ArraySource(values, dims=("time", "y", "x"), chunks=(1, 4, 4), name="timed")
    every = slice(None)
    for t in range(64):
        read_selection(source, (t, every, every))  # cache every chunk
    time.sleep(0.1)
    spans = []
    for t in (10, 20, 30):  # cached: each queued for the engine's thread to record later
        before = time.monotonic()
        read_selection(source, (t, every, every))
        spans.append((before, time.monotonic()))
        time.sleep(prefetch.DRAIN_DELAY / 4)
    time.sleep(prefetch.DRAIN_DELAY + 0.2)
    history = get_engine().prefetcher._history[source.token]
    seen = {obs.lo[0]: obs.time for obs in history}
    for t, (before, after) in zip((10, 20, 30), spans):
        assert before <= seen[t] <= after, (t, before, seen[t], after)


def test_a_drain_due_while_the_engine_closes_does_nothing() -> None:
    """Reads answered from the cache just before ``close()`` leave a drain due on the loop;
    it must not plan ahead on the closed engine (it raised EngineClosedError in a callback,
    printed at interpreter exit)."""
    from tsexplore.engine.planning import plan_selection
    from tsexplore.engine.scheduler import Engine

    source = SyntheticSource((32, 8, 8), chunks=(1, 8, 8), name="closing")
    engine = Engine()
    every = slice(None)
    now = time.monotonic()
    engine.prefetcher._pending = [
        (source, plan_selection((t, every, every), source.shape, source.chunks), False,
         (t, every, every), now + t * 0.01, None)
        for t in range(4)
    ]
    engine.close()

    async def due() -> None:  # what the timer runs, on a loop (the engine's is gone)
        engine.prefetcher._drain()

    asyncio.run(due())
    assert engine.prefetcher._pending  # nothing was taken


def test_a_drain_that_plans_while_a_bounded_reduction_ends_stays_in_its_bounds() -> None:
    """A read answered inside :meth:`Prefetcher.bounded` keeps those bounds when the engine's
    thread plans from it after the bounded reader has left: a drain that took the read just
    before the reduction ended guessed past its last chunk (one chunk too many, now and then,
    in a reduction over a selection)."""
    import threading

    from tsexplore.engine.array import read_selection
    from tsexplore.engine.planning import plan_selection
    from tsexplore.engine.scheduler import Engine

    source = SyntheticSource((64, 8, 8), chunks=(1, 8, 8), name="bounded-drain")
    engine = Engine()
    pf = engine.prefetcher
    every = slice(None)
    try:
        for t in range(8):  # cached, unobserved: the reads below are answered from the cache
            read_selection(source, (t, every, every), observe=False, engine=engine)
        planning, ended, done = threading.Event(), threading.Event(), threading.Event()
        chosen: list[list[ChunkRequest]] = []
        targets, select = pf._targets, pf._select

        def held_targets(*args, **kwargs):  # type: ignore[no-untyped-def]
            planning.set()
            ended.wait(30)  # the bounded reader leaves while the drain plans
            return targets(*args, **kwargs)

        def recorded_select(*args, **kwargs):  # type: ignore[no-untyped-def]
            chosen.append(select(*args, **kwargs))
            done.set()
            return chosen[-1]

        pf._targets, pf._select = held_targets, recorded_select  # type: ignore[method-assign]
        now = time.monotonic()
        with pf.bounded(source, ((0, 7), (0, 0), (0, 0))):
            for t in range(7):  # a steady play of frames 0..6, 30 frames a second
                pf._record(source, plan_selection((t, every, every), source.shape, source.chunks),
                           now - (7 - t) / 30)
            read_selection(source, (7, every, every), engine=engine)  # a hit: planned on the loop
            assert planning.wait(30)
        ended.set()
        assert done.wait(30)
        beyond = [k.index for keys in chosen for k in keys if k.index[0] > 7]
        assert not beyond, beyond
        # the next frame's plan, made outside any bounds, guesses past frame 7
        guessed = pf.observe(source, plan_selection((8, every, every), source.shape, source.chunks))
        assert guessed and max(i[0] for i in guessed) > 7, guessed
    finally:
        engine.close()
