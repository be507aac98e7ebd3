"""The view controller over a pyramid: the level that fits the screen, coarse first, tiles as
chunks arrive, reads per level (headless: a fake view and a mock one, counting sources)."""

from __future__ import annotations

import threading
import time
from unittest.mock import MagicMock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsexplore.controller import (
    PlaneGeometry,
    View,
    ViewController,
    ViewLevel,
    ViewState,
    plan_view,
    resolve,
    tile_requests,
    to_uint8,
)
from tsexplore.engine import get_engine
from tsexplore.errors import ConfigError
from tsexplore.sources import SourceOptions, SyntheticSource
from tsexplore.testing.wrappers import CountingSource

NO_PREFETCH = SourceOptions(prefetch="off")


def make_pyramid(n0=4096, chunk=128, count=6, t=4, options=NO_PREFETCH):
    """Counting synthetic levels n0, n0/2, ... (each its own values) and their ViewLevels."""
    sources = [CountingSource(SyntheticSource((t, n0 >> k, n0 >> k), (1, chunk, chunk), options=options))
               for k in range(count)]
    levels = [ViewLevel.of(s, "y", "x", (2.0**k,) * 2, ((2.0**k - 1) / 2,) * 2) for k, s in enumerate(sources)]
    return sources, levels


def flat(extent):
    return [v for pair in extent for v in pair]


def reads(sources):
    return [s.reads for s in sources]


def truth(src, t, region, step):
    (y0, y1), (x0, x1) = region
    return src.evaluate((slice(t, t + 1), slice(y0, y1), slice(x0, x1)))[0][:: step[0], :: step[1]]


class FakeView:
    def __init__(self) -> None:
        self.frames, self.errors, self.profiles = [], [], []
        self.lock = threading.Lock()

    def show_frame(self, frame) -> None:
        with self.lock:
            self.frames.append(frame)

    def show_error(self, exc) -> None:
        self.errors.append(exc)

    def show_profile(self, profile) -> None:
        self.profiles.append(profile)


# -- pure planning ----------------------------------------------------------------------------


def test_plan_picks_the_level_of_the_screen_and_a_quick_coarser_picture():
    _, levels = make_pyramid()
    full = ViewState(indices=(("time", 1),), height=512, width=512)
    plan = plan_view(full, levels)
    # 4096 on 512 pixels: level 3 (512 x 512, 16 chunks) cold -> level 4 (4 chunks) first
    assert plan.target == 3 and [s.level for s in plan.steps] == [4, 3]
    base, target = plan.steps
    assert target.region == ((0, 512), (0, 512)) and target.step == (1, 1) and len(target.chunks) == 16
    assert base.region == ((0, 256), (0, 256)) and len(base.chunks) == 4
    # both cover the whole plane, in level-0 index edges
    assert flat(target.extent) == pytest.approx([-0.5, 4095.5, -0.5, 4095.5])
    assert flat(base.extent) == pytest.approx([-0.5, 4095.5, -0.5, 4095.5])
    # the chosen level's chunks, nearest the middle first: the 4 central ones
    assert set(plan.order) == set(target.chunks)
    assert set(plan.order[:4]) == {(1, a, b) for a in (1, 2) for b in (1, 2)}
    # all cached: the chosen level alone
    plan = plan_view(full, levels, cached=lambda k, c: k == 3)
    assert [s.level for s in plan.steps] == [3]
    # zoomed in to 200 x 200 level-0 pixels: level 0, a cached coarser level first
    zoom = ViewState(indices=(("time", 1),), y_range=(999.5, 1199.5), x_range=(1999.5, 2199.5),
                     height=512, width=512)
    plan = plan_view(zoom, levels, cached=lambda k, c: k == 3)
    assert [s.level for s in plan.steps] == [3, 0]
    assert plan.steps[1].region == ((1000, 1200), (2000, 2200))
    assert plan.steps[0].region == ((125, 150), (250, 275))  # the same place at level 3


def test_one_level_plans_are_resolve():
    src = SyntheticSource((2, 300, 500), (1, 100, 100))
    geom = PlaneGeometry.of(src, "y", "x")
    lv = ViewLevel.of(src, "y", "x")
    state = ViewState(indices=(("time", 1),), y_range=(10, 200), height=50, width=80)
    plan = plan_view(state, [lv], 3)
    assert plan.steps == (resolve(state, geom, 3),) and not plan.progressive


@settings(max_examples=100, deadline=None)
@given(y0=st.integers(0, 300), ny=st.integers(1, 300), x0=st.integers(0, 300), nx=st.integers(1, 300),
       sy=st.integers(1, 7), sx=st.integers(1, 7), cy=st.integers(1, 90), cx=st.integers(1, 90))
def test_tiles_hold_every_sample_once(y0, ny, x0, nx, sy, sx, cy, cx):
    src = SyntheticSource((1, 600, 600), (1, cy, cx))
    lv = ViewLevel.of(src, "y", "x")
    state = ViewState(y_range=(y0 - 0.5, y0 + ny - 0.5), x_range=(x0 - 0.5, x0 + nx - 0.5),
                      height=max(1, -(-ny // sy)), width=max(1, -(-nx // sx)))
    req = resolve(state, lv.plane, max_chunks=10**6)
    tiles = tile_requests(req, req.chunks, lv)
    seen = np.zeros(req.out_shape, dtype=int)
    (ry0, _), (rx0, _) = req.region
    for tile in tiles:
        (a0, a1), (b0, b1) = tile.region
        assert tile.step == req.step and (a0 - ry0) % req.step[0] == 0 and (b0 - rx0) % req.step[1] == 0
        i, j = (a0 - ry0) // req.step[0], (b0 - rx0) // req.step[1]
        h, w = tile.out_shape
        seen[i:i + h, j:j + w] += 1
        assert len(tile.chunks) == 1
    assert (seen == 1).all()


def test_bad_levels_are_refused():
    src = SyntheticSource((4, 64, 64), (1, 32, 32))
    other_t = SyntheticSource((5, 32, 32), (1, 32, 32))
    half = SyntheticSource((4, 32, 32), (1, 32, 32))
    geom = PlaneGeometry.of(src, "y", "x")
    eng = get_engine()
    with pytest.raises(ConfigError, match="only the shown dims"):
        ViewController(src, geom, engine=eng, levels=[ViewLevel.of(src, "y", "x"),
                                                      ViewLevel.of(other_t, "y", "x", (2, 2))])
    with pytest.raises(ConfigError, match="not the array shown"):
        ViewController(src, geom, engine=eng, levels=[ViewLevel.of(half, "y", "x")])
    with pytest.raises(ConfigError, match="fine to coarse"):
        ViewController(src, geom, engine=eng, levels=[ViewLevel.of(src, "y", "x"), ViewLevel.of(half, "y", "x", (2, 2)),
                                                      ViewLevel.of(half, "y", "x", (1, 1))])


# -- the controller over a pyramid ---------------------------------------------------------------


def test_cold_overview_paints_coarse_first_then_tiles_and_reads_only_those_levels():
    sources, levels = make_pyramid()
    view = FakeView()
    state = ViewState(indices=(("time", 2),), height=512, width=512)
    with ViewController(sources[0], PlaneGeometry.of(sources[0], "y", "x"), engine=get_engine(),
                        levels=levels, view=view, state=state) as ctl:
        frame = ctl.wait(ctl.update(), timeout=30)
        assert reads(sources) == [0, 0, 0, 16, 4, 0]  # the chosen level and the quick picture
        # the complete frame is level 3's data at screen resolution
        assert frame.level == 3 and frame.mode == "replace"
        np.testing.assert_array_equal(frame.data, truth(sources[3], 2, ((0, 512), (0, 512)), (1, 1)))
        shown = [f for f in view.frames if f.generation == frame.generation]
        assert [f.mode for f in shown] == ["base"] + ["tile"] * 16
        assert [f.final for f in shown] == [False] * 16 + [True]
        base = shown[0]
        assert base.level == 4 and flat(base.extent) == pytest.approx([-0.5, 4095.5, -0.5, 4095.5])
        np.testing.assert_array_equal(base.data, truth(sources[4], 2, ((0, 256), (0, 256)), (1, 1)))
        # the tiles are level 3's chunks (asked for middle first, painted as they arrive),
        # coloured over the base's range
        canvas = np.zeros((512, 512), np.uint8)
        for tile in shown[1:]:
            assert tile.clim == base.clim and tile.level == 3 and tile.whole == frame.request
            (y0, y1), (x0, x1) = tile.request.region
            np.testing.assert_array_equal(tile.data, truth(sources[3], 2, tile.request.region, (1, 1)))
            np.testing.assert_array_equal(tile.image, to_uint8(tile.data, base.clim))
            (ey0, ey1), (ex0, ex1) = tile.extent  # level-0 edges of the tile
            assert (ey0, ey1, ex0, ex1) == pytest.approx((8 * y0 - 0.5, 8 * y1 - 0.5, 8 * x0 - 0.5, 8 * x1 - 0.5))
            canvas[y0:y1, x0:x1] = tile.image
        np.testing.assert_array_equal(canvas, frame.image)
        assert {t.request.chunks[0] for t in shown[1:]} == set(frame.request.chunks)  # each chunk once
        assert ctl.counts["progressive"] == 1
        # the same view again: cached, one frame, no read
        frame2 = ctl.wait(ctl.update(), timeout=30)
        assert reads(sources) == [0, 0, 0, 16, 4, 0]
        assert view.frames[-1] is frame2 and frame2.mode == "replace" and frame2.level == 3
        # pan into a corner at full resolution: level 0, only its visible chunks, level 3 first
        frame3 = ctl.wait(ctl.update(y_range=(-0.5, 511.5), x_range=(3583.5, 4095.5)), timeout=30)
        assert frame3.level == 0 and frame3.request.region == ((0, 512), (3584, 4096))
        np.testing.assert_array_equal(frame3.data, truth(sources[0], 2, ((0, 512), (3584, 4096)), (1, 1)))
        assert reads(sources) == [16, 0, 0, 16, 4, 0]  # the base came from the cached level 3
        pieces = [f for f in view.frames if f.generation == frame3.generation]
        assert [f.mode for f in pieces] == ["base"] + ["tile"] * 16
        assert pieces[0].level == 3 and pieces[0].request.region == ((0, 64), (448, 512))
        # chunks on screen are pinned at the level shown
        eng = get_engine()
        assert all(eng.cache.is_pinned(eng.key(sources[0], i)) for i in frame3.request.chunks)


def test_a_newer_view_stops_the_tiles_of_an_older_one():
    class Slow(SyntheticSource):
        def read_chunk_sync(self, index):
            time.sleep(0.03)
            return super().read_chunk_sync(index)

    sources = [CountingSource(Slow((2, 2048 >> k, 2048 >> k), (1, 128, 128), options=NO_PREFETCH))
               for k in range(4)]
    levels = [ViewLevel.of(s, "y", "x", (2.0**k,) * 2, ((2.0**k - 1) / 2,) * 2) for k, s in enumerate(sources)]
    view = MagicMock(spec=View)
    with ViewController(sources[0], PlaneGeometry.of(sources[0], "y", "x"), engine=get_engine(), levels=levels,
                        view=view, state=ViewState(height=1024, width=1024), cancel_after=0.05) as ctl:
        ctl.update(indices={"time": 0})  # level 1: 64 slow chunks
        time.sleep(0.3)
        gen = ctl.update(indices={"time": 1})
        frame = ctl.wait(gen, timeout=30)
        assert frame.request.state.index("time") == 1
        np.testing.assert_array_equal(frame.data, truth(sources[1], 1, ((0, 1024), (0, 1024)), (1, 1)))
        assert ctl.counts["cancelled"] == 1
    gens = [c.args[0].generation for c in view.show_frame.call_args_list]
    assert gens == sorted(gens)  # never an older generation's piece after a newer one
    # slice 0 was abandoned: not all of its 64 chunks were read
    assert sources[1].reads < 128


def test_slider_moves_at_a_coarse_level_are_read_ahead_at_that_level():
    sources, levels = make_pyramid(n0=2048, chunk=128, count=5, t=32, options=SourceOptions(prefetch="auto"))
    with ViewController(sources[0], PlaneGeometry.of(sources[0], "y", "x"), engine=get_engine(), levels=levels,
                        state=ViewState(height=256, width=256)) as ctl:
        for t in range(6):
            frame = ctl.wait(ctl.update(indices={"time": t}), timeout=30)
            assert frame.level == 3
            time.sleep(0.05)
        deadline = time.monotonic() + 10
        while sources[3].reads <= 6 * 4 and time.monotonic() < deadline:
            time.sleep(0.02)
    eng = get_engine()
    assert eng.prefetcher.last_policy.get(sources[3].token) == "momentum"
    assert sources[3].reads > 6 * 4  # slices ahead of the slider were read at level 3
    assert sources[0].reads == sources[1].reads == 0


def test_label_samples_are_the_images_at_level_0_and_block_centres_above():
    from tsexplore.controller import ViewRequest, ViewState, label_samples

    req = ViewRequest(generation=1, state=ViewState(), key=(), region=((10, 50), (0, 64)), step=(2, 4), chunks=())
    assert label_samples(req, (128, 128)) == (slice(10, 50, 2), slice(0, 64, 4))
    # level 2 (4 x 4 blocks), 8 coarse pixels from level-0 edge -0.5: the pixel nearest each
    # block's centre, one per block
    coarse = ViewRequest(generation=1, state=ViewState(), key=(), region=((0, 8), (0, 8)), step=(1, 1), chunks=(),
                         level=2, extent=((-0.5, 31.5), (-0.5, 31.5)))
    ys, xs = label_samples(coarse, (32, 32))
    assert list(range(32))[ys] == [2, 6, 10, 14, 18, 22, 26, 30] and ys == xs
