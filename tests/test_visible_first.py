"""Visible reads win: lower priorities wait for VISIBLE reads, background streams for busy views.

No wall-clock thresholds: reads are held at a gate, and the engine's own state (what is queued,
what has started, who waits) is read at points where the loop has run.
"""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

import tsexplore as tse
from tsexplore.controller import PlaneGeometry, ViewController
from tsexplore.engine import Priority, get_engine
from tsexplore.sources import SourceOptions, SyntheticSource

NO_PREFETCH = SourceOptions(prefetch="off")


class Gated(SyntheticSource):
    """Reads of the slices in ``gated`` wait for ``gate``; every read's start is recorded."""

    def __init__(self, *args, gated=(0,), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.gated = set(gated)
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.starts: list[tuple[int, ...]] = []
        self.held = 0  # reads waiting at the gate now
        self.gave_up = False

    def read_chunk_sync(self, index):
        with self.lock:
            self.starts.append(tuple(index))
        if index[0] in self.gated:
            with self.lock:
                self.held += 1
            if not self.gate.wait(60):
                self.gave_up = True
        return super().read_chunk_sync(index)


def until(cond, what, timeout=60.0):
    done = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if cond():
            return
        done.wait(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def loop_ran(engine) -> None:
    """Every callback queued on the engine's loop so far has run (the loop runs them in order)."""
    async def nothing() -> None:
        await asyncio.sleep(0)

    engine.run_coroutine(nothing(), timeout=30)


@pytest.mark.parametrize("visible_first", [True, False])
def test_planned_reads_wait_while_visible_reads_are_queued_or_running(visible_first):
    """Two VISIBLE reads held at the gate (slots left free), then PLANNED reads of other
    slices: none of them starts until the VISIBLE reads end; then all run. With
    ``visible_first=False`` they start at once (the free slots take them)."""
    tse.config.set(visible_first=visible_first, io_threads=4)
    src = Gated((8, 64, 128), (1, 64, 64), options=NO_PREFETCH)  # 2 chunks a slice
    engine = get_engine()
    visible = engine.request(src, [(0, 0, 0), (0, 0, 1)], Priority.VISIBLE)
    until(lambda: src.held == 2, "the VISIBLE reads at the gate")
    planned_idx = [(t, 0, x) for t in range(1, 5) for x in range(2)]
    planned = engine.request(src, planned_idx, Priority.PLANNED)
    loop_ran(engine)  # the dispatch that followed the request has run
    queued = engine.queued()
    if visible_first:
        assert queued["planned"] == len(planned_idx), queued
        with src.lock:
            assert all(i[0] == 0 for i in src.starts), src.starts  # no PLANNED read began
    else:
        assert queued["planned"] < len(planned_idx), queued  # the free slots took some
    src.gate.set()
    for fut, idx in zip(visible + planned, [(0, 0, 0), (0, 0, 1), *planned_idx]):
        t, _, x = idx
        want = src.evaluate((slice(t, t + 1), slice(0, 64), slice(64 * x, 64 * x + 64)))
        np.testing.assert_array_equal(fut.result(60), want)
    assert not src.gave_up
    assert engine.queued()["planned"] == 0


def test_a_visible_join_holds_the_planned_reads_behind_it():
    """A queued PLANNED read that a VISIBLE request joins becomes VISIBLE: it takes the free
    slot at once, and the other PLANNED reads still wait for both."""
    tse.config.set(io_threads=2)
    src = Gated((8, 64, 64), (1, 64, 64), gated=(0, 3), options=NO_PREFETCH)
    engine = get_engine()
    (first,) = engine.request(src, [(0, 0, 0)], Priority.VISIBLE)
    until(lambda: src.held == 1, "the first read at the gate")
    planned = engine.request(src, [(t, 0, 0) for t in (1, 2, 3)], Priority.PLANNED)
    loop_ran(engine)
    assert engine.queued()["planned"] == 3  # a slot is free, yet none started
    (joined,) = engine.request(src, [(3, 0, 0)], Priority.VISIBLE)  # joins slice 3's read
    assert joined is planned[2]
    until(lambda: src.held == 2, "the joined read at the gate")
    loop_ran(engine)
    assert engine.queued() == {"visible": 0, "planned": 2, "speculative": 0}
    with src.lock:
        assert src.starts == [(0, 0, 0), (3, 0, 0)], src.starts
    src.gate.set()
    for fut in (first, *planned):
        fut.result(60)
    with src.lock:
        assert sorted(src.starts[2:]) == [(1, 0, 0), (2, 0, 0)]


class HeldView:
    """A view whose ``show_frame`` waits for ``gate`` (a frame being painted)."""

    def __init__(self) -> None:
        self.frames = []
        self.gate = threading.Event()
        self.entered = threading.Event()

    def show_frame(self, frame) -> None:
        self.entered.set()
        assert self.gate.wait(60), "the test never let the frame through"
        self.frames.append(frame)

    def show_error(self, exc) -> None:
        raise AssertionError(f"read failed: {exc!r}")

    def show_profile(self, profile) -> None:
        pass


def test_a_background_reduction_pauses_while_a_view_is_busy_and_resumes_after():
    """A view busy with its frame (read, not yet delivered): the controller holds the
    engine's activity, so a background ``tse.reduce`` reads its first chunk but waits before
    reducing it (nothing reduced, one consumer waiting); once the frame is delivered the
    reduction resumes and equals NumPy."""
    tse.config.set(visible_grace=0.0, background_wait=120.0)
    view_src = SyntheticSource((4, 64, 64), (1, 64, 64), options=NO_PREFETCH)
    view = HeldView()
    engine = get_engine()
    ds = tse.synthetic((16, 32, 48), chunks=(4, 32, 48), prefetch="off")
    data_src = next(iter(ds.tse.sources))
    with ViewController(view_src, PlaneGeometry.of(view_src, "y", "x"), engine=engine, view=view) as ctl:
        gen = ctl.update(indices={"time": 2})
        assert view.entered.wait(60)
        assert engine.activity.busy() and engine.activity.holders == 1
        job = tse.reduce(ds["data"], "mean", dim="time", background=True, progress=False)
        until(lambda: engine.activity.waiting == 1, "the reduction to wait for the view")
        assert job.progress.chunks_done == 0 and not job.done()
        view.gate.set()
        frame = ctl.wait(gen, timeout=60)
        assert frame.request.state.index("time") == 2
        result = job.result(timeout=120)
    want = data_src.evaluate((slice(0, 16), slice(0, 32), slice(0, 48))).astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(result.values, want, rtol=1e-5, atol=1e-6)
    assert job.progress.chunks_done == 4
    assert engine.activity.pauses >= 1 and engine.activity.holders == 0
    assert not engine.activity.busy()


def test_background_streams_do_not_wait_with_visible_first_off():
    tse.config.set(visible_first=False, background_wait=120.0)
    engine = get_engine()
    engine.activity.hold("a view")
    try:
        ds = tse.synthetic((8, 16, 16), chunks=(2, 16, 16), prefetch="off")
        out = tse.reduce(ds["data"], "max", dim="time")
        assert out.shape == (16, 16)
        assert engine.activity.pauses == 0
    finally:
        engine.activity.release("a view")


def test_a_pause_ends_after_background_wait():
    """A view that never finishes: each chunk waits at most ``background_wait`` (the
    reduction always moves on)."""
    tse.config.set(visible_grace=0.0, background_wait=0.01)
    engine = get_engine()
    engine.activity.hold("a stuck view")
    try:
        ds = tse.synthetic((8, 16, 16), chunks=(2, 16, 16), prefetch="off")
        src = next(iter(ds.tse.sources))
        out = tse.reduce(ds["data"], "sum", dim="time")
        np.testing.assert_allclose(out.values, src.evaluate((slice(0, 8), slice(0, 16), slice(0, 16))).sum(0),
                                   rtol=1e-5)
        assert engine.activity.pauses == 4
    finally:
        engine.activity.release("a stuck view")
