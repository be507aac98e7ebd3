"""Property tests of the pure sample plan (no data is read here)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsexplore.errors import ConfigError
from tsexplore.loader.plan import WindowGrid, epoch_plan, lag1_correlation, shuffle_quality


@st.composite
def grids(draw: st.DrawFn) -> WindowGrid:
    ndim = draw(st.integers(1, 3))
    shape, window, stride, chunks, origin = [], [], [], [], []
    for _ in range(ndim):
        n = draw(st.integers(1, 40))
        shape.append(n)
        window.append(draw(st.integers(1, n)))
        stride.append(draw(st.integers(1, 12)))
        chunks.append(draw(st.integers(1, 16)))
        origin.append(draw(st.integers(0, 20)))
    return WindowGrid(tuple(shape), tuple(window), tuple(stride), tuple(chunks), tuple(origin))


def brute_windows(g: WindowGrid) -> set[tuple[int, ...]]:
    ranges = [range(0, n - w + 1, s) for n, w, s in zip(g.shape, g.window, g.stride)]
    return set(map(tuple, np.stack(np.meshgrid(*ranges, indexing="ij"), -1).reshape(-1, len(g.shape)).tolist()))


@settings(max_examples=60, deadline=None)
@given(grids(), st.booleans(), st.integers(0, 2**31), st.integers(1, 8), st.integers(1, 4))
def test_every_window_once_and_inside_its_block(g, shuffle, seed, buffer, nshards):
    expected = brute_windows(g)
    assert g.n_windows == len(expected)
    seen: list[tuple[int, ...]] = []
    for shard in range(nshards):
        plan = epoch_plan(g, shuffle=shuffle, seed=seed, buffer=buffer, shard=shard, nshards=nshards)
        starts = g.starts(plan.windows)
        seen.extend(map(tuple, starts.tolist()))
        for (pos, start) in zip(plan.block_pos.tolist(), starts.tolist()):
            block = int(plan.blocks[pos])
            region = g.block_region(block)
            # the window lies in its block's region, and its start in the block's chunk
            for a, (sl, s0, w) in enumerate(zip(region, start, g.window)):
                assert sl.start <= s0 and s0 + w <= sl.stop
                bidx = np.unravel_index(block, g.block_counts)[a]
                chunk = (g.origin[a] + s0) // g.chunks[a]
                first = (g.origin[a] + int(g.block_runs[a][bidx]) * g.stride[a]) // g.chunks[a]
                assert chunk == first
        # a rolling buffer of `buffer` blocks is enough for a window-by-window consumer
        if shuffle:
            assert plan.max_live_blocks() <= buffer
        assert np.all(plan.first_use <= plan.last_use)
    assert len(seen) == len(expected) and set(seen) == expected


@settings(max_examples=30, deadline=None)
@given(grids(), st.integers(2, 4), st.integers(0, 1000))
def test_shards_read_disjoint_blocks(g, nshards, seed):
    blocks = [set(epoch_plan(g, seed=seed, shard=s, nshards=nshards).blocks.tolist()) for s in range(nshards)]
    for i in range(nshards):
        for j in range(i + 1, nshards):
            assert not blocks[i] & blocks[j]
    assert set().union(*blocks) == set(range(g.n_blocks))


def test_seed_and_epoch_determinism():
    g = WindowGrid((64, 96, 96), (8, 16, 16), (8, 16, 16), (16, 32, 32))
    a = epoch_plan(g, seed=3, epoch=0, buffer=4).windows
    assert np.array_equal(a, epoch_plan(g, seed=3, epoch=0, buffer=4).windows)
    assert not np.array_equal(a, epoch_plan(g, seed=4, epoch=0, buffer=4).windows)
    assert not np.array_equal(a, epoch_plan(g, seed=3, epoch=1, buffer=4).windows)
    ordered = epoch_plan(g, shuffle=False).windows
    # no shuffle: blocks in C order, windows in C order inside each block
    starts = g.starts(ordered)
    first_block = [tuple(s) for s in starts[: g.block_sizes()[0]].tolist()]
    assert first_block == sorted(first_block)
    assert sorted(ordered.tolist()) == list(range(g.n_windows))


def test_shuffle_quality_against_random_permutation():
    # the full-size geometry: 512 x 1024 x 1024 in 16 x 256 x 256 chunks, 16 x 64 x 64 samples
    g = WindowGrid((512, 1024, 1024), (16, 64, 64), (16, 64, 64), (16, 256, 256))
    q16 = shuffle_quality(g, epoch_plan(g, buffer=16))
    q1 = shuffle_quality(g, epoch_plan(g, buffer=1))
    assert abs(q16["random_permutation"]) < 0.05
    assert q16["plan"] < 0.15  # about 1 / buffer
    assert q1["plan"] > 0.5  # one block at a time: consecutive samples are neighbours
    assert q16["storage_order"] > 0.5


def test_lag1_correlation_hand_values():
    assert lag1_correlation(np.arange(100)[:, None]) == pytest.approx(1.0)
    alternating = np.array([0, 10] * 50)[:, None]
    assert lag1_correlation(alternating) == pytest.approx(-1.0)
    assert lag1_correlation(np.zeros((10, 2))) == 0.0


def test_bad_grids_are_refused():
    with pytest.raises(ConfigError, match="only 10 long"):
        WindowGrid((10,), (11,), (1,), (5,))
    with pytest.raises(ConfigError, match=">= 1"):
        WindowGrid((10,), (2,), (0,), (5,))
    with pytest.raises(ConfigError, match="one entry per dimension"):
        WindowGrid((10, 10), (2,), (1,), (5,))
    with pytest.raises(ConfigError, match="buffer_chunks"):
        epoch_plan(WindowGrid((10,), (2,), (2,), (5,)), buffer=0)


def test_blocks_share_chunks_only_when_windows_cross_chunk_boundaries():
    from tsexplore.loader.plan import WindowGrid

    tiles = WindowGrid((32, 128), (8, 32), (8, 32), (8, 64))
    assert not tiles.blocks_share_chunks()  # every window inside one chunk
    half = WindowGrid((32, 128), (8, 32), (8, 16), (8, 64))
    assert half.blocks_share_chunks()  # x windows at 48 reach into the next chunk
    shifted = WindowGrid((32, 120), (8, 32), (8, 32), (8, 64), origin=(0, 8))
    assert shifted.blocks_share_chunks()  # an offset view: windows straddle stored chunks
    # brute force on a few random grids: a chunk is shared iff two blocks' regions touch it
    rng = np.random.default_rng(1)
    for _ in range(50):
        n, c = int(rng.integers(8, 40)), int(rng.integers(2, 10))
        w = int(rng.integers(1, n + 1))
        s, o = int(rng.integers(1, 8)), int(rng.integers(0, c))
        g = WindowGrid((n,), (w,), (s,), (c,), (o,))
        owners: dict[int, set[int]] = {}
        for b in range(g.n_blocks):
            (sl,) = g.block_region(b)
            for cell in range(sl.start, sl.stop):
                owners.setdefault((o + cell) // c, set()).add(b)
        assert g.blocks_share_chunks() == any(len(v) > 1 for v in owners.values()), (n, c, w, s, o)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(1, 30), min_size=1, max_size=3),
    data=st.data(),
)
def test_windows_of_blocks_matches_block_by_block(shape, data):
    nd = len(shape)
    window = [data.draw(st.integers(1, n)) for n in shape]
    stride = [data.draw(st.integers(1, 6)) for _ in shape]
    chunks = [data.draw(st.integers(1, 9)) for _ in shape]
    origin = [data.draw(st.integers(0, c - 1)) for c in chunks]
    g = WindowGrid(tuple(shape), tuple(window), tuple(stride), tuple(chunks), tuple(origin))
    order = np.random.default_rng(len(shape)).permutation(g.n_blocks)[: max(1, g.n_blocks // 2)]
    want = np.concatenate([g.block_windows(int(b)) for b in order])
    np.testing.assert_array_equal(g.windows_of_blocks(order), want)
    assert g.windows_of_blocks(np.empty(0, dtype=np.int64)).size == 0
    assert nd == len(g.counts)
