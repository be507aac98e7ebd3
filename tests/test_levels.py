"""Level choice and progressive overview plans (``tsexplore.controller.geometry``), property-tested."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsexplore.controller.geometry import LevelGeometry, choose_level, overview_plan
from tsexplore.errors import ConfigError


def pyramid(n0: int, chunk: int, count: int) -> list[LevelGeometry]:
    """A factor-2 block-mean pyramid of an n0 x n0 plane."""
    return [LevelGeometry((n0 >> k, n0 >> k), (min(chunk, n0 >> k),) * 2, (2.0**k,) * 2,
                          ((2.0**k - 1) / 2,) * 2) for k in range(count)]


views = st.tuples(
    st.floats(-0.2, 1.0), st.floats(0.002, 1.5), st.floats(-0.2, 1.0), st.floats(0.002, 1.5),
    st.integers(64, 2048), st.integers(64, 2048))


def extent_of(v, n0):
    y0, dy, x0, dx, h, w = v
    return ((y0 * n0 - 0.5, (y0 + dy) * n0 - 0.5), (x0 * n0 - 0.5, (x0 + dx) * n0 - 0.5)), (h, w)


def test_a_65536_plane_on_a_1024_screen_reads_the_1024_level():
    levels = pyramid(65536, 256, 9)
    full = ((-0.5, 65535.5), (-0.5, 65535.5))
    assert choose_level(levels, full, (1024, 1024)) == 6  # 1024 x 1024: one pixel per pixel
    plan = overview_plan(levels, full, (1024, 1024))
    target = plan.steps[-1]
    assert target.level == 6 and target.region == ((0, 1024), (0, 1024)) and len(target.chunks) == 16
    # the first picture is the finest level that takes at most 4 reads: 512 x 512 (4 chunks)
    assert [s.level for s in plan.steps] == [7, 6] and plan.steps[0].reads == 4
    # decoded at the chosen level: 1 x the screen, far under the 4 x limit
    assert target.reads * 256 * 256 <= 4 * 1024 * 1024
    # zoomed in to 100 x 100 level-0 pixels: level 0
    assert choose_level(levels, ((999.5, 1099.5), (999.5, 1099.5)), (1024, 1024)) == 0


def test_cached_levels_come_first():
    levels = pyramid(8192, 256, 6)
    full = ((-0.5, 8191.5), (-0.5, 8191.5))
    cached = {(4, c) for c in [(0, 0), (0, 1), (1, 0), (1, 1)]} | {(5, (0, 0))}
    plan = overview_plan(levels, full, (512, 512), cached=lambda k, c: (k, c) in cached)
    assert plan.target == 4 and [s.level for s in plan.steps] == [4]  # all cached: nothing else
    plan = overview_plan(levels, full, (1024, 1024), cached=lambda k, c: (k, c) in cached)
    assert plan.target == 3 and [s.level for s in plan.steps] == [4, 3]
    assert plan.steps[0].reads == 0 and plan.reads == 16


@settings(max_examples=150, deadline=None)
@given(v=views, count=st.integers(1, 7), chunk=st.sampled_from([128, 200, 256]))
def test_plans_cover_the_view_at_screen_resolution(v, count, chunk):
    n0 = 4096
    levels = pyramid(n0, chunk, count)
    extent, screen = extent_of(v, n0)
    k = choose_level(levels, extent, screen)
    lev = levels[k]
    # nothing upsampled unless at level 0; not more than twice the screen unless the coarsest
    assert k == 0 or lev.density(extent, screen) >= 1 - 1e-9
    if k < count - 1:
        assert levels[k + 1].density(extent, screen) < 1
        (i0, i1), (j0, j1) = lev.region(extent)
        assert i1 - i0 <= 2 * screen[0] + 2 and j1 - j0 <= 2 * screen[1] + 2
    plan = overview_plan(levels, extent, screen)
    assert plan.target == k and plan.steps[-1].level == k
    assert [s.level for s in plan.steps] == sorted({s.level for s in plan.steps}, reverse=True)
    for step in plan.steps:
        g = levels[step.level]
        (i0, i1), (j0, j1) = step.region
        # the chunks hold every pixel of the region, and each holds some (chunks are disjoint,
        # so the areas they share with the region add up to the region's area)
        area = 0
        for c in step.chunks:
            (a0, a1), (b0, b1) = g.chunk_region(c)
            shared = max(0, min(a1, i1) - max(a0, i0)) * max(0, min(b1, j1) - max(b0, j0))
            assert shared > 0
            area += shared
        assert area == (i1 - i0) * (j1 - j0)
        assert len(set(step.chunks)) == len(step.chunks)
        # nearest the middle of the view first
        (ylo, yhi), (xlo, xhi) = g.to_level(extent)
        d = [math.hypot((g.chunk_region(c)[0][0] + g.chunk_region(c)[0][1] - 1) / 2 - (ylo + yhi) / 2,
                        (g.chunk_region(c)[1][0] + g.chunk_region(c)[1][1] - 1) / 2 - (xlo + xhi) / 2)
             for c in step.chunks]
        assert d == sorted(d)
    if len(plan.steps) == 2:
        assert plan.steps[0].reads <= 4 < plan.steps[1].reads


@settings(max_examples=100, deadline=None)
@given(v=views, k=st.integers(0, 5))
def test_level_coordinates_round_trip(v, k):
    g = pyramid(4096, 256, 6)[k]
    extent, _ = extent_of(v, 4096)
    back = g.to_base(g.to_level(extent))
    for (a, b), (c, d) in zip(back, extent):
        assert a == pytest.approx(c, abs=1e-6) and b == pytest.approx(d, abs=1e-6)
    # a level pixel's edges in level 0 are its block's edges
    (y0, y1), _ = g.region_extent(((3, 4), (0, 1)))
    assert (y0, y1) == pytest.approx((3 * 2**k - 0.5, 4 * 2**k - 0.5))


def test_levels_must_go_fine_to_coarse():
    with pytest.raises(ConfigError, match="fine to coarse"):
        choose_level(list(reversed(pyramid(1024, 256, 3))), ((0, 1), (0, 1)), (10, 10))
    with pytest.raises(ConfigError, match="no levels"):
        choose_level([], ((0, 1), (0, 1)), (10, 10))
    with pytest.raises(ConfigError, match="positive"):
        LevelGeometry((10, 10), (0, 4))
