"""The headless view controller, driven by a fake view and a mock one (no widgets, no browser)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tsexplore.controller import (
    PlaneGeometry,
    View,
    ViewController,
    ViewState,
    resolve,
    robust_range,
    stream_profile,
    to_uint8,
)
from tsexplore.engine import get_engine
from tsexplore.errors import ConfigError, TsExploreError
from tsexplore.sources import SourceOptions, SyntheticSource

NO_PREFETCH = SourceOptions(prefetch="off")


def chunks_of(key, chunks):
    """Ground truth: the chunk indices an orthogonal key touches, by brute force."""
    per_axis = []
    for k, c in zip(key, chunks):
        if isinstance(k, int):
            per_axis.append({k // c})
        else:
            per_axis.append({i // c for i in range(k.start, k.stop, k.step)})
    import itertools

    return set(itertools.product(*(sorted(s) for s in per_axis)))


class FakeView:
    """Collects frames the way the Explorer would paint them (a :class:`View`)."""

    def __init__(self) -> None:
        self.frames = []
        self.errors = []
        self.profiles = []
        self.lock = threading.Lock()

    def show_frame(self, frame) -> None:
        with self.lock:
            self.frames.append(frame)

    def show_error(self, exc) -> None:
        self.errors.append(exc)

    def show_profile(self, profile) -> None:
        self.profiles.append(profile)


# -- resolve (pure) -------------------------------------------------------------------------


def test_resolve_full_view_is_strided_to_screen_resolution():
    geom = PlaneGeometry((4, 1000, 2000), (1, 100, 100), ("t", "y", "x"), "y", "x")
    req = resolve(ViewState(indices=(("t", 2),), height=250, width=500), geom, 7)
    assert req.generation == 7
    assert req.key == (2, slice(0, 1000, 4), slice(0, 2000, 4))
    assert req.out_shape == (250, 500)
    assert set(req.chunks) == chunks_of(req.key, geom.chunks)
    assert len(req.chunks) == 10 * 20


def test_resolve_zoomed_viewport_reads_only_visible_chunks():
    geom = PlaneGeometry((4, 1000, 2000), (1, 100, 100), ("t", "y", "x"), "y", "x")
    state = ViewState(indices=(("t", 0),), y_range=(100.2, 199.7), x_range=(350.0, 449.4),
                      height=400, width=400)
    req = resolve(state, geom)
    # pixel i covers [i - 0.5, i + 0.5): 100.2 -> row 100, 199.7 -> row 200 (inclusive)
    assert req.region == ((100, 201), (350, 450))
    assert req.step == (1, 1)
    assert set(req.chunks) == {(0, 1, 3), (0, 1, 4), (0, 2, 3), (0, 2, 4)}


def test_resolve_huge_plane_stays_under_the_chunk_budget():
    geom = PlaneGeometry((10, 10**7, 10**7), (1, 256, 256), ("t", "y", "x"), "y", "x")
    req = resolve(ViewState(height=1000, width=1000), geom, max_chunks=256)
    assert len(req.chunks) <= 256
    assert set(req.chunks) == chunks_of(req.key, geom.chunks)
    ny, nx = req.out_shape
    assert 1 <= ny <= 1000 and 1 <= nx <= 1000
    # still spans the whole plane
    assert req.region == ((0, 10**7), (0, 10**7))


def test_resolve_transposed_dims_and_errors():
    geom = PlaneGeometry((5, 30, 40), (5, 10, 10), ("t", "y", "x"), "x", "y")
    req = resolve(ViewState(indices=(("t", 1),)), geom)
    assert req.transpose and req.key == (1, slice(0, 30, 1), slice(0, 40, 1))
    with pytest.raises(ConfigError, match="outside"):
        resolve(ViewState(indices=(("t", 5),)), geom)
    with pytest.raises(ConfigError, match="not a dimension"):
        PlaneGeometry((5, 30, 40), (5, 10, 10), ("t", "y", "x"), "z", "x")
    with pytest.raises(ConfigError, match="different"):
        PlaneGeometry((5, 30, 40), (5, 10, 10), ("t", "y", "x"), "x", "x")


def test_colour_mapping():
    data = np.array([[0.0, 5.0, 10.0], [np.nan, -3.0, 99.0]], dtype=np.float32)
    img = to_uint8(data, (0.0, 10.0))
    assert img.dtype == np.uint8
    np.testing.assert_array_equal(img, [[1, 128, 255], [0, 1, 255]])
    lo, hi = robust_range(np.arange(1001, dtype=np.float32), (2, 98))
    assert (lo, hi) == pytest.approx((20.0, 980.0))
    assert robust_range(np.full(4, np.nan)) == (0.0, 1.0)


# -- the controller ---------------------------------------------------------------------------


def expected(src, req):
    (y0, y1), (x0, x1) = req.region
    t = req.key[0]
    full = src.evaluate((slice(t, t + 1), slice(y0, y1), slice(x0, x1)))[0]
    return full[:: req.step[0], :: req.step[1]]


class Gated(SyntheticSource):
    """A synthetic source whose reads of the slices in ``gated`` wait until ``gate`` opens.

    It records the threads that read (never the caller's: ``update`` does no I/O) and
    whether a read gave up waiting (a test that blocked on I/O would show it).
    """

    def __init__(self, *args, gated=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.gated = gated  # None: every slice waits
        self.gate = threading.Event()
        self.started = threading.Event()  # a gated read has begun
        self.finished = threading.Event()  # a gated read has returned
        self.threads: set[int] = set()
        self.gave_up = False

    def read_chunk_sync(self, index):
        self.threads.add(threading.get_ident())
        if self.gated is None or index[0] in self.gated:
            self.started.set()
            if not self.gate.wait(30):
                self.gave_up = True
            out = super().read_chunk_sync(index)
            self.finished.set()
            return out
        return super().read_chunk_sync(index)


def wait_idle(ctl, timeout=30.0):
    """Until the controller has nothing pending or in flight (its view thread is idle)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with ctl._cond:
            if ctl._pending is None and ctl._outstanding is None:
                return
        time.sleep(0.01)
    raise AssertionError(f"the view controller is still busy after {timeout} s: {ctl.counts}")


def test_frames_match_the_source_and_update_never_blocks():
    src = Gated((6, 300, 400), (1, 100, 100))
    geom = PlaneGeometry.of(src, "y", "x")
    view = FakeView()
    with ViewController(src, geom, engine=get_engine(), state=ViewState(height=150, width=200),
                        view=view) as ctl:
        gen = ctl.update(indices={"time": 3})
        # update returned while every read is held back: it waited for no I/O ...
        assert src.started.wait(30) and not src.gate.is_set() and not src.gave_up
        assert threading.get_ident() not in src.threads  # ... and did none on this thread
        src.gate.set()
        frame = ctl.wait(gen, timeout=30)
        assert frame.request.state.index("time") == 3
        np.testing.assert_array_equal(frame.data, expected(src, frame.request))
        np.testing.assert_array_equal(frame.image, to_uint8(frame.data, frame.clim))
        assert frame.data.shape == (150, 200)
        # zoom into one chunk: full resolution there, only that chunk read
        gen = ctl.update(y_range=(100, 199), x_range=(200, 299))
        frame = ctl.wait(gen, timeout=30)
        assert frame.request.chunks == ((3, 1, 2),)
        np.testing.assert_array_equal(frame.data, src.evaluate((slice(3, 4), slice(100, 200), slice(200, 300)))[0])
    assert threading.get_ident() not in src.threads
    assert [f.generation for f in view.frames] == sorted({f.generation for f in view.frames})


def test_thousand_events_coalesce_into_two_reads():
    """1,000 slider events while the first slice's read is held: one read in flight, then
    the newest request only (every one in between dropped), and the last slice is shown."""
    src = Gated((1000, 128, 128), (1, 128, 128), options=NO_PREFETCH)
    geom = PlaneGeometry.of(src, "y", "x")
    view = FakeView()
    with ViewController(src, geom, engine=get_engine(), view=view) as ctl:
        ctl.update(indices={"time": 0})
        assert src.started.wait(30)  # slice 0's read is in flight, held at the gate
        for i in range(1, 1000):
            ctl.update(indices={"time": i})
        assert not src.gave_up and ctl.counts["reads"] == 1  # no update waited for the read
        src.gate.set()
        final = ctl.wait(timeout=30)
        assert final.request.state.index("time") == 999
        np.testing.assert_array_equal(final.data, src.evaluate((slice(999, 1000), slice(0, 128), slice(0, 128)))[0])
        wait_idle(ctl)
        assert ctl.counts["updates"] == 1000
        assert ctl.counts["reads"] == 2, ctl.counts
    gens = [f.generation for f in view.frames]
    times = [f.request.state.index("time") for f in view.frames]
    assert gens == sorted(gens) and len(set(gens)) == len(gens)
    assert times == sorted(times) and times[-1] == 999
    assert set(times) <= {0, 999}


def test_an_older_slice_is_never_painted_after_a_newer_one():
    src = Gated((4, 64, 64), (1, 64, 64), gated={0}, options=NO_PREFETCH)
    view = FakeView()
    with ViewController(src, PlaneGeometry.of(src, "y", "x"), engine=get_engine(), view=view) as ctl:
        ctl.update(indices={"time": 0})
        assert src.started.wait(30)  # slice 0's read is in flight
        gen = ctl.update(indices={"time": 2})
        src.gate.set()
        ctl.wait(gen, timeout=30)
        assert src.finished.wait(30)  # slice 0's read has returned ...
        wait_idle(ctl)  # ... and the controller has handled it
        assert not src.gave_up
    shown = [f.request.state.index("time") for f in view.frames]
    assert shown[-1] == 2
    assert 0 not in shown[shown.index(2):]


def test_newer_generation_cancels_queued_chunk_reads():
    src = SyntheticSource((4, 800, 800), (1, 100, 100), latency=0.05, options=NO_PREFETCH)  # 64 chunks per slice
    with ViewController(src, PlaneGeometry.of(src, "y", "x"), engine=get_engine(),
                        state=ViewState(height=800, width=800)) as ctl:
        ctl.update(indices={"time": 0})
        time.sleep(0.08)
        gen = ctl.update(indices={"time": 1})
        frame = ctl.wait(gen, timeout=20)
        assert frame.request.state.index("time") == 1
        assert get_engine().snapshot().cancelled > 0
        assert ctl.counts["cancelled"] == 1 and ctl.counts["reads"] == 2
        # slice 0 was abandoned: fewer than its 64 chunks were read
        assert get_engine().snapshot().reads < 128


def test_visible_chunks_are_pinned_and_chunk_map_reports_them():
    src = SyntheticSource((4, 200, 200), (2, 100, 100), options=NO_PREFETCH)
    eng = get_engine()
    ctl = ViewController(src, PlaneGeometry.of(src, "y", "x"), engine=eng)
    frame = ctl.wait(ctl.update(indices={"time": 0}), timeout=10)
    keys0 = [eng.key(src, i) for i in frame.request.chunks]
    assert all(eng.cache.is_pinned(k) for k in keys0)
    frame = ctl.wait(ctl.update(indices={"time": 3}), timeout=10)
    assert not any(eng.cache.is_pinned(k) for k in keys0)
    assert all(eng.cache.is_pinned(eng.key(src, i)) for i in frame.request.chunks)
    ctl.close()
    assert not any(eng.cache.is_pinned(eng.key(src, i)) for i in frame.request.chunks)
    assert not any(t.name == f"tsexplore-view-{ctl.id}" for t in threading.enumerate())
    with pytest.raises(TsExploreError, match="closed"):
        ctl.update(indices={"time": 1})


def test_read_errors_reach_the_view_and_the_thread_survives():
    class Broken(SyntheticSource):
        def read_chunk_sync(self, index):
            if index[0] == 1:
                raise OSError("disk on fire")
            return super().read_chunk_sync(index)

    src = Broken((3, 32, 32), (1, 32, 32))
    view = FakeView()
    with ViewController(src, PlaneGeometry.of(src, "y", "x"), engine=get_engine(), view=view) as ctl:
        with pytest.raises(TsExploreError, match="disk on fire"):
            ctl.wait(ctl.update(indices={"time": 1}), timeout=10)
        assert view.errors and ctl.counts["errors"] == 1
        frame = ctl.wait(ctl.update(indices={"time": 2}), timeout=10)
        assert frame.request.state.index("time") == 2


def test_stream_profile_matches_the_source():
    src = SyntheticSource((50, 40, 30), (8, 16, 16))
    geom = PlaneGeometry.of(src, "y", "x")
    chunks = []
    values = None
    for values, filled in stream_profile(src, geom, {"y": 17, "x": 29}, "time", engine=get_engine()):  # noqa: B007
        chunks.append(filled)
    assert chunks == [8, 16, 24, 32, 40, 48, 50]
    np.testing.assert_array_equal(values, src.evaluate((slice(0, 50), slice(17, 18), slice(29, 30)))[:, 0, 0])
    with pytest.raises(ConfigError):
        list(stream_profile(src, geom, {"y": 40, "x": 0}, "time", engine=get_engine()))


# -- the view seam: a mock View, the engine passed in, profiles, selections ---------------------


def test_a_mock_view_sees_frames_errors_and_profiles_through_the_protocol():
    from unittest.mock import MagicMock

    class Broken(SyntheticSource):
        def read_chunk_sync(self, index):
            if index[0] == 2:
                raise OSError("bad sector")
            return super().read_chunk_sync(index)

    src = Broken((4, 40, 30), (1, 20, 15))
    view = MagicMock(spec=View)
    with ViewController(src, PlaneGeometry.of(src, "y", "x"), engine=get_engine(), view=view) as ctl:
        frame = ctl.wait(ctl.update(indices={"time": 1}), timeout=10)
        view.show_frame.assert_called_with(frame)
        with pytest.raises(TsExploreError, match="bad sector"):
            ctl.wait(ctl.update(indices={"time": 2}), timeout=10)
        (exc,), _ = view.show_error.call_args
        assert "bad sector" in str(exc)
        # a profile along time crosses the broken slice: the view is told, no profile is done
        ctl.profile_at({"y": 7, "x": 11}, "time").join(10)
    assert view.show_error.call_count == 2
    (exc,), _ = view.show_error.call_args
    assert "bad sector" in str(exc) and "(2, 0, 0)" in str(exc)
    assert not any(c.args[0].done for c in view.show_profile.call_args_list)


def test_the_newest_profile_wins():
    class Slow(SyntheticSource):
        def read_chunk_sync(self, index):
            time.sleep(0.05)
            return super().read_chunk_sync(index)

    src = Slow((40, 16, 16), (4, 16, 16), options=NO_PREFETCH)
    view = FakeView()
    with ViewController(src, PlaneGeometry.of(src, "y", "x"), engine=get_engine(), view=view) as ctl:
        first = ctl.profile_at({"y": 1, "x": 1}, "time")
        time.sleep(0.08)
        second = ctl.profile_at({"y": 5, "x": 9}, "time")
        first.join(10)
        second.join(10)
    gens = [p.generation for p in view.profiles]
    assert gens == sorted(gens)  # never an older profile after a newer one
    assert [p.done for p in view.profiles if p.generation == 1] in ([], [False] * gens.count(1))
    last = view.profiles[-1]
    assert last.done and last.generation == 2
    np.testing.assert_array_equal(last.values, src.evaluate((slice(0, 40), slice(5, 6), slice(9, 10)))[:, 0, 0])


def test_the_controller_reads_through_the_engine_it_is_given():
    from tsexplore.engine import Engine, current_engine

    src = SyntheticSource((3, 32, 32), (1, 16, 16))
    with Engine() as eng, ViewController(src, PlaneGeometry.of(src, "y", "x"), engine=eng) as ctl:
        frame = ctl.wait(ctl.update(indices={"time": 2}), timeout=10)
        np.testing.assert_array_equal(frame.data, src.evaluate((slice(2, 3), slice(0, 32), slice(0, 32)))[0])
        assert eng.snapshot().reads >= 4
        assert current_engine() is None  # the process-wide engine was never started


def test_a_selection_is_shown_exactly():
    import xarray as xr

    import tsexplore as tse

    values = np.arange(8 * 64 * 64, dtype="float32").reshape(8, 64, 64)
    ds = tse.open_dataset(xr.Dataset({"v": (("t", "y", "x"), values)}), grid=(2, 16, 16))
    sel = ds.v.isel(y=slice(10, 20), x=slice(5, 50, 3), t=[6, 1, 3])
    from tsexplore.resolve import resolve as resolve_selection

    found = resolve_selection(sel)
    geom = PlaneGeometry.of(found, "y", "x")
    assert geom.shape == (3, 10, 15)
    with ViewController(found, geom, engine=get_engine()) as ctl:
        for t in range(3):
            frame = ctl.wait(ctl.update(indices={"t": t}), timeout=10)
            np.testing.assert_array_equal(frame.data, sel.values[t])
        ctl.profile_at({"y": 4, "x": 2}, "t").join(10)
    values_along, _ = list(stream_profile(found.source, geom, {"y": 4, "x": 2}, "t", engine=get_engine()))[-1]
    np.testing.assert_array_equal(values_along, sel.values[:, 4, 2])


def test_inline_cached_views_are_shown_before_update_returns():
    src = SyntheticSource((4, 64, 64), (1, 32, 32), options=NO_PREFETCH)
    threads = []

    class Where(FakeView):
        def show_frame(self, frame):
            threads.append(threading.current_thread().name)
            super().show_frame(frame)

    view = Where()
    with ViewController(src, PlaneGeometry.of(src, "y", "x"), engine=get_engine(), view=view,
                        inline_cached=True) as ctl:
        ctl.wait(ctl.update(indices={"time": 1}), timeout=10)  # not cached: the view thread
        assert threads == [f"tsexplore-view-{ctl.id}"]
        gen = ctl.update()  # the same slice, cached now: shown before update returns
        assert view.frames[-1].generation == gen and threads[-1] == threading.current_thread().name
        np.testing.assert_array_equal(view.frames[-1].data, src.evaluate((slice(1, 2), slice(0, 64), slice(0, 64)))[0])
        gen = ctl.update(indices={"time": 2})  # not cached: handed to the view thread
        assert ctl.wait(gen, timeout=10).request.state.index("time") == 2
        assert threads[-1] == f"tsexplore-view-{ctl.id}"
        assert ctl.counts["reads"] == 3 and ctl.counts["frames"] == 3


# -- frames made ahead (a steadily stepping slider) ------------------------------------------------


def test_a_steady_slider_gets_its_next_frame_made_ahead_and_it_is_the_right_one():
    """inline_cached: after two moves of the same step, the next step's frame is made on the
    view thread; the move that asks for it gets it (the same data and colours as a frame made
    then), and a frame made ahead for other colour settings or another view is never shown."""
    src = SyntheticSource((12, 96, 128), (2, 32, 64), options=NO_PREFETCH)
    engine = get_engine()
    engine.fetch(src, [(t, y, x) for t in range(6) for y in range(3) for x in range(2)])  # all cached
    view = FakeView()
    state = ViewState(height=96, width=128)
    with ViewController(src, PlaneGeometry.of(src, "y", "x"), engine=engine, view=view, state=state,
                        inline_cached=True) as ctl:

        def shown(t, clim=None):
            frame = view.frames[-1]
            want = src.evaluate((slice(t, t + 1), slice(0, 96), slice(0, 128)))[0]
            assert frame.request.state.index("time") == t and frame.generation == ctl.generation
            np.testing.assert_array_equal(frame.data, want)
            np.testing.assert_array_equal(frame.image, to_uint8(want, clim or robust_range(want)))
            return frame

        ctl.update(indices={"time": 1})
        ctl.update(indices={"time": 2})  # the same step twice: the frame of time 3 is made ahead
        wait_for(lambda: ctl.ahead.made == 1, "the frame of time 3 made ahead")
        assert ctl.ahead.used == 0
        ctl.update(indices={"time": 3})
        assert ctl.ahead.used == 1
        shown(3)
        wait_for(lambda: ctl.ahead.made == 2, "the frame of time 4 made ahead")
        ctl.clim = (-1.0, 1.0)  # made with the robust range: not shown
        ctl.update(indices={"time": 4})
        assert ctl.ahead.used == 1
        shown(4, (-1.0, 1.0))
        wait_for(lambda: ctl.ahead.made == 3, "the frame of time 5 made ahead")
        ctl.update(indices={"time": 5}, y_range=(-0.5, 47.5))  # another view: not the one made
        assert ctl.ahead.used == 1
        assert view.frames[-1].data.shape[0] < 96
        ctl.update(indices={"time": 3}, y_range=None)  # a jump back, the whole view: nothing made
        assert ctl.ahead.used == 1 and not ctl.ahead.has_job and ctl.ahead.made == 3
        ctl.update(indices={"time": 4})  # one step is no steady step either
        ctl.update(indices={"time": 5})
        wait_for(lambda: ctl.ahead.made == 4, "the frame of time 6 made ahead")
        ctl.update(indices={"time": 6})
        assert ctl.ahead.used == 2
        shown(6, (-1.0, 1.0))
    assert ctl.counts["errors"] == 0 and not view.errors


def wait_for(cond, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_the_plans_of_a_long_session_of_pans_and_zooms_stay_a_few_megabytes():
    """Every pan and zoom plans a new region (and the part decodes a new box of each chunk):
    the memos of plans and of box layouts are full after a warm-up and hold at most a few MB.
    With 4,096 entries each they held ~17 MB and were still filling after a 10-minute soak
    of random moves (the kernel's memory grew with them)."""
    import random
    import tracemalloc

    from tsexplore.engine import planning
    from tsexplore.sources import blosc_partial

    planning._plans.clear()
    planning._dims.clear()
    blosc_partial.layout.cache_clear()
    rng = random.Random(3)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(3 * max(planning.PLAN_MEMORY, blosc_partial.LAYOUTS)):  # a long session
            y0, x0, n = rng.randrange(0, 700), rng.randrange(0, 700), rng.randrange(100, 324)
            planning.plan_selection((rng.randrange(64), slice(y0, y0 + n), slice(x0, x0 + n)),
                                    (64, 1024, 1024), (16, 256, 256))
            t = rng.randrange(16)
            blosc_partial.layout((16, 256, 256), 4, ((t, t + 1), (y0 % 200, y0 % 200 + 50), (x0 % 200, 256)),
                                 1 << 18, 1 << 22)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(planning._plans) <= planning.PLAN_MEMORY and len(planning._dims) <= planning.PLAN_MEMORY
    assert blosc_partial.layout.cache_info().currsize <= blosc_partial.LAYOUTS
    assert held <= 6 << 20, f"the plan and layout memos hold {held / 2**20:.1f} MiB"
