"""A reader moving by a steady step with pauses gets its next view made ahead (engine.ahead):
the same values its own read gives, handed over; nothing made for a reader that leaves no
pause, a jump, a view whose chunks the engine does not hold; errors are the reader's own."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.codecs import BloscCodec

import tsexplore as tse
from tsexplore.engine import ChunkRequest, ahead
from tsexplore.engine.ahead import THREAD_PREFIX, Canon, ViewsAhead, canon, step
from tsexplore.engine.array import read_selection
from tsexplore.engine.scheduler import get_engine
from tsexplore.engine.types import WHOLE
from tsexplore.errors import ChunkReadError
from tsexplore.sources import ArraySource
from tsexplore.sources._cblosc2 import item_decoder
from tsexplore.sources.base import SourceOptions
from tsexplore.testing.wrappers import CountingSource, FaultySource
from tsexplore.xarray import sources_of

SHAPE = (40, 6, 10)


def test_views_compare_by_what_they_select() -> None:
    shape = (10, 8, 6)
    assert canon((3, slice(None), slice(None)), shape) == canon((-7, slice(0, 8, 1), slice(0, 6)), shape)
    assert canon((3,), shape) == canon((3, Ellipsis), shape) == canon((3, slice(None), slice(None)), shape)
    assert canon((np.array([1, 2]), slice(None), slice(None)), shape) is None  # not followed
    a, b = canon((3, slice(1, 5)), shape), canon((5, slice(1, 5)), shape)
    assert step(a, b) == (0, 2)
    # a slice moved along its axis, its length and stride kept
    assert step(canon((0, slice(0, 4, 2)), shape), canon((0, slice(3, 7, 2)), shape)) == (1, 3)
    assert step(canon((0, slice(0, 4)), shape), canon((0, slice(0, 6)), shape)) is None  # a zoom
    assert step(canon((0, slice(0, 4)), shape), canon((1, slice(1, 5)), shape)) is None  # two axes


class _Made:
    """A ``make`` for ViewsAhead that records the selections it was asked to make."""

    def __init__(self) -> None:
        self.keys: list[tuple[object, ...]] = []
        self.done = threading.Event()

    def __call__(self, key: tuple[object, ...]) -> np.ndarray:
        self.keys.append(key)
        self.done.set()
        return np.full(3, key[0])


def _answer(views: ViewsAhead, t: int, made: _Made, pause: bool, seconds: float = 0.0,
            token: str = "src") -> None:
    """Tell ``views`` the reader of ``token`` was answered frame ``t`` (24 bytes): after a
    pause (asked a second after the last answer), or at once (asked as the last answer came,
    the view taking 1 s)."""
    key = (t, slice(None))
    asked = time.monotonic() + (1.0 if pause else 0.0)
    views.answered(token, canon(key, (50, 4)), key, (50, 4), 24, asked, seconds if pause else 1.0, made)


def test_the_next_view_is_made_after_two_equal_steps_with_pauses() -> None:
    counts: dict[str, int] = {}
    views = ViewsAhead(lambda name, n: counts.__setitem__(name, counts.get(name, 0) + n))
    made = _Made()
    try:
        for t in (4, 7):  # one step: not yet a pattern
            assert views.take("src", canon((t, slice(None)), (50, 4)), 5) is None
            _answer(views, t, made, pause=True)
        assert made.keys == []
        _answer(views, 10, made, pause=True)  # two equal steps of 3
        assert made.done.wait(5)
        assert made.keys == [(13, slice(None))]
        got = views.take("src", canon((13,), (50, 4)), 5)
        assert got is not None and got[0].tolist() == [13, 13, 13]
        assert counts == {"views_ahead": 1, "views_ahead_used": 1}
        assert views.take("src", canon((13,), (50, 4)), 5) is None  # handed over once
    finally:
        views.close()


def test_no_view_is_made_for_a_reader_without_pauses_or_off_its_pattern() -> None:
    views = ViewsAhead(lambda name, n: None)
    made = _Made()
    try:
        for t in range(5):  # a scrub: each frame asked for as the last one came
            _answer(views, t, made, pause=False)
        assert made.keys == []
        for t in (10, 12, 14):  # steady, with pauses: frame 16 made ahead
            _answer(views, t, made, pause=True)
        assert made.done.wait(5) and made.keys == [(16, slice(None))]
        # the reader jumps elsewhere: what was made is dropped, nothing new is made
        assert views.take("src", canon((30,), (50, 4)), 5) is None
        assert views.take("src", canon((16,), (50, 4)), 5) is None
        _answer(views, 48, made, pause=True)  # the next step would leave the array
        _answer(views, 49, made, pause=True)
        assert made.keys == [(16, slice(None))]
    finally:
        views.close()


def test_play_with_pauses_takes_views_made_ahead_equal_to_its_own_reads() -> None:
    values = np.random.default_rng(0).standard_normal(SHAPE).astype("float32")
    src = ArraySource(values, chunks=(4, 3, 5))
    frames = []
    for t in range(0, 30, 2):  # every other frame: a step of two
        frames.append(read_selection(src, (t, slice(None), slice(None)), timeout=30))
        time.sleep(0.02)  # a pause: the next view is made meanwhile
    for t, frame in zip(range(0, 30, 2), frames):
        np.testing.assert_array_equal(frame, values[t])
        assert frame.flags.writeable
    snap = tse.stats()
    assert snap.views_ahead_used > 0, snap
    assert snap.views_ahead_used <= snap.views_ahead
    # a view handed over is the reader's own: writing to it changes nothing the engine holds
    frames[-1][...] = -1
    np.testing.assert_array_equal(read_selection(src, (28, slice(None), slice(None)), timeout=30), values[28])


def test_a_view_is_not_made_from_chunks_the_engine_does_not_hold() -> None:
    """A guess reads no whole chunk of its own: with the prefetch off, nothing is cached ahead, so
    every frame is read by the reader, once, and no view ahead is used."""
    values = np.arange(np.prod(SHAPE), dtype="float32").reshape(SHAPE)
    inner = ArraySource(values, chunks=(1, 6, 10))
    src = CountingSource(inner.with_options(replace(inner.options, prefetch="off")))
    for t in range(8):
        np.testing.assert_array_equal(read_selection(src, (t, slice(None), slice(None)), timeout=30), values[t])
        time.sleep(0.02)
    assert tse.stats().views_ahead_used == 0
    assert src.reads == 8 and all(n == 1 for n in src.counts.values())


def test_views_made_ahead_hold_at_most_the_limit_all_sources_together(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ahead, "MOST_BYTES", 30)  # room for one view of 24 bytes
    views = ViewsAhead(lambda name, n: None)
    made = _Made()
    try:
        for t in (0, 1, 2):
            _answer(views, t, made, pause=True, token="a")
        for t in (5, 6, 7):  # the view of b drops the one made for a
            _answer(views, t, made, pause=True, token="b")
        assert views.take("a", canon((3,), (50, 4)), 5) is None
        got = views.take("b", canon((8,), (50, 4)), 5)
        assert got is not None and got[0].tolist() == [8, 8, 8]
    finally:
        views.close()


def test_views_larger_than_the_limit_are_not_made_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    values = np.ones(SHAPE, dtype="float32")
    src = ArraySource(values, chunks=(4, 6, 10))
    monkeypatch.setattr(ahead, "MOST_BYTES", values[0].nbytes - 1)  # a frame is one byte over
    for t in range(8):
        read_selection(src, (t, slice(None), slice(None)), timeout=30)
        time.sleep(0.02)
    assert tse.stats().views_ahead == 0


def test_a_view_that_fails_ahead_is_read_by_the_reader_who_gets_the_error() -> None:
    values = np.ones(SHAPE, dtype="float32")
    err = ChunkReadError("chunk 6 is unreadable")
    src = FaultySource(ArraySource(values, chunks=(1, 6, 10)), fail={(6, 0, 0): err})
    for t in range(5):
        read_selection(src, (t, slice(None), slice(None)), timeout=30)
        time.sleep(0.02)
    read_selection(src, (5, slice(None), slice(None)), timeout=30)
    time.sleep(0.02)
    with pytest.raises(ChunkReadError, match="chunk 6 is unreadable"):
        read_selection(src, (6, slice(None), slice(None)), timeout=30)


def test_closing_the_engine_stops_the_thread_that_makes_views() -> None:
    values = np.zeros(SHAPE, dtype="float32")
    src = ArraySource(values, chunks=(2, 6, 10))
    for t in range(6):
        read_selection(src, (t, slice(None), slice(None)), timeout=30)
        time.sleep(0.02)
    assert tse.stats().views_ahead > 0
    assert any(t.name.startswith(THREAD_PREFIX) for t in threading.enumerate())
    get_engine().close()
    assert not any(t.name.startswith(THREAD_PREFIX) and t.is_alive() for t in threading.enumerate())


def test_play_of_a_store_written_by_xarray_equals_xarrays_own_reads(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    ds = xr.Dataset(
        {"v": (("time", "y", "x"), rng.standard_normal((24, 8, 12)).astype("float32"))},
        coords={"time": np.arange(24), "y": np.arange(8.0), "x": np.arange(12.0)},
    )
    path = tmp_path / "play.zarr"
    ds.chunk({"time": 4, "y": 4, "x": 6}).to_zarr(path)  # xarray's writer, default codecs
    ours, theirs = tse.open_dataset(path)["v"], xr.open_zarr(path)["v"]
    for t in range(24):
        xr.testing.assert_identical(ours.isel(time=t).load(), theirs.isel(time=t).load())
        time.sleep(0.02)
    assert tse.stats().views_ahead_used > 0


def _blosc_store(path: Path, seed: int) -> zarr.Array:
    """A (64, 64, 64) float32 store of chunks (16, 32, 32) in blosc blocks of 4 KiB (a frame
    of a chunk is one block), written by zarr; returned as zarr reads it."""
    values = np.random.default_rng(seed).standard_normal((64, 64, 64)).astype("float32")
    arr = zarr.create_array(str(path), shape=values.shape, chunks=(16, 32, 32), dtype="float32",
                            compressors=BloscCodec(cname="zstd", clevel=1, shuffle="shuffle", blocksize=4096),
                            dimension_names=("time", "y", "x"))
    arr[...] = values
    return zarr.open_array(str(path), mode="r")


@pytest.mark.skipif(item_decoder() is None, reason="C-Blosc2 is not loaded")
def test_a_paced_play_has_its_first_chunk_row_made_by_parts_in_its_pauses(tmp_path: Path) -> None:
    """Play on a blosc store: the frames of the chunks it is on are made ahead by parts in its
    pauses, so those chunks are not read whole for it (the rows ahead are); every frame
    equals zarr's own read."""
    truth = _blosc_store(tmp_path / "p.zarr", seed=5)
    ds = tse.open_dataset(tmp_path / "p.zarr")
    da = ds[list(ds.data_vars)[0]]
    engine = get_engine()
    whole_rows = set()
    for t in range(14):  # inside the first chunk-row
        np.testing.assert_array_equal(da.isel(time=t).values, truth[t])
        whole_rows |= {k.index[0] for k in engine.cache.keys() if isinstance(k, ChunkRequest) and k.part is WHOLE}
        time.sleep(0.03)
    snap = tse.stats()
    assert snap.views_ahead_used > 0 and snap.part_reads > 0, snap
    assert 0 not in whole_rows, whole_rows  # the row it is on: by parts
    assert snap.speculative_reads > 0, snap  # the rows ahead: whole


def test_a_reader_moving_by_a_steady_step_without_pauses_scrubs() -> None:
    """A view that goes on with a scrub (steady step, no pause, shorter than the chunks)
    reads whole chunks: the views after it take the rest of them. A step of one element is a
    scrub the second time in a row, a longer step the third (as the prefetcher's pattern).
    Not so for a step as long as a chunk, a paced reader, a view off the pattern (a jump), or
    another source."""
    views = ViewsAhead(lambda name, n: None)
    made = _Made()

    def view(t: int) -> Canon:
        return canon((t, slice(None)), (50, 4))

    try:
        _answer(views, 0, made, pause=False)
        assert not views.scrubs("src", view(1), (16, 4))  # no step yet
        _answer(views, 1, made, pause=False)
        assert views.scrubs("src", view(2), (16, 4))  # a step of one element, twice
        assert not views.scrubs("src", view(3), (16, 4))  # another step
        _answer(views, 3, made, pause=False)
        assert not views.scrubs("src", view(5), (16, 4))  # a step of two, twice: not yet
        _answer(views, 5, made, pause=False)
        assert views.scrubs("src", view(7), (16, 4))  # three times
        for t in (0, 1, 2):
            _answer(views, t, made, pause=False)
        assert views.scrubs("src", view(3), (16, 4))
        assert not views.scrubs("src", view(3), (1, 4))  # a step of one chunk: each view elsewhere
        assert not views.scrubs("src", view(20), (16, 4))  # a jump off the pattern
        assert not views.scrubs("other", view(3), (16, 4))
        _answer(views, 3, made, pause=True)  # paused: play, made by parts in its pauses
        assert not views.scrubs("src", view(4), (16, 4))
        _answer(views, 4, made, pause=False)
        assert views.scrubs("src", view(5), (16, 4))
        _answer(views, 30, made, pause=False)  # a jump
        assert not views.scrubs("src", view(31), (16, 4))
    finally:
        views.close()


@pytest.mark.skipif(item_decoder() is None, reason="C-Blosc2 is not loaded")
def test_a_scrub_reads_whole_chunks_once_it_is_steady(tmp_path: Path) -> None:
    """A scrub through a blosc store with small blocks, nothing read ahead for it: its first
    frames are read by parts (no pattern yet: frames 0 and 1; the third is the second step of
    one frame), then each chunk whole once, and the frames after are cut from it; every frame
    equals zarr's own read."""
    truth = _blosc_store(tmp_path / "s.zarr", seed=9)
    ds = tse.open_dataset(tmp_path / "s.zarr", prefetch="off")
    da = ds[list(ds.data_vars)[0]]
    frames = [da.isel(time=t).values for t in range(48)]  # as fast as it can: a scrub
    for t, frame in enumerate(frames):
        np.testing.assert_array_equal(frame, truth[t])
    snap = tse.stats()
    # 4 chunks a frame: the first two frames by parts (192 if every frame were); a frame
    # that happened to wait a moment (the machine busy) reads by parts too
    assert 8 <= snap.part_reads <= 24, snap
    assert snap.reads - snap.part_reads == 12, snap  # chunk-rows 0-2, each chunk once


# -- views taken over from the cache ----------------------------------------------------------


def _one_frame_chunks(path: Path) -> np.ndarray:
    """A Zarr group whose array ``frames`` (zarr's default codec) has chunks one frame deep."""
    values = np.random.default_rng(3).standard_normal((12, 32, 24)).astype("float32")
    group = zarr.open_group(str(path), mode="w")
    arr = group.create_array("frames", shape=values.shape, chunks=(1, 32, 24), dtype="float32",
                             dimension_names=("time", "y", "x"))
    arr[...] = values
    return values


def test_a_scrub_of_one_frame_chunks_takes_its_frames_over_and_owns_them(tmp_path: Path) -> None:
    """Frames that are each one whole chunk, read by a steady step that passes them, are
    the cached chunks handed over (no copy): each equals zarr's frame, is the reader's to
    write, and a later read of it reads it again, unchanged."""
    values = _one_frame_chunks(tmp_path / "f.zarr")
    da = tse.open_dataset(tmp_path / "f.zarr")["frames"]
    frames = [da.isel(time=t).values for t in range(12)]
    assert tse.stats().taken_over > 0
    for t, frame in enumerate(frames):
        np.testing.assert_array_equal(frame, values[t])
        frame[...] = -1.0  # the reader's own array
    for t in range(12):
        np.testing.assert_array_equal(da.isel(time=t).values, values[t])


def test_a_frame_another_reader_holds_is_copied_not_taken_over(tmp_path: Path) -> None:
    """A chunk a dask task holds a read-only view of is not handed to the scrubbing reader:
    the reader gets a copy, and writing it leaves the task's view as it was."""
    values = _one_frame_chunks(tmp_path / "f.zarr")
    da = tse.open_dataset(tmp_path / "f.zarr")["frames"]
    (source,) = sources_of(da)
    for t in range(6):  # a steady scrub: the frames after it are read ahead
        np.testing.assert_array_equal(da.isel(time=t).values, values[t])
    held = read_selection(source, (6, slice(None), slice(None)), copy=False, observe=False)
    assert not held.flags.writeable
    taken = tse.stats().taken_over
    frame = da.isel(time=6).values
    assert tse.stats().taken_over == taken  # frame 6 was copied
    assert not np.shares_memory(frame, held)
    frame[...] = -1.0
    np.testing.assert_array_equal(held, values[6])
    np.testing.assert_array_equal(da.isel(time=7).values, values[7])


def test_a_scrub_takes_over_the_frames_it_waited_for_and_owns_them(tmp_path: Path) -> None:
    """With nothing read ahead, each frame of a scrub of one-frame chunks is the chunk its own
    read delivered (no cache hit): handed over, not copied, once the step is steady; each
    equals zarr's frame and is the reader's to write."""
    values = _one_frame_chunks(tmp_path / "f.zarr")
    da = tse.open_dataset(tmp_path / "f.zarr", prefetch="off")["frames"]
    frames = [da.isel(time=t).values for t in range(12)]
    snap = tse.stats()
    assert snap.hits == 0, snap  # every frame waited for its read
    assert snap.taken_over > 0, snap
    for t, frame in enumerate(frames):
        np.testing.assert_array_equal(frame, values[t])
        frame[...] = -1.0
    for t in range(12):
        np.testing.assert_array_equal(da.isel(time=t).values, values[t])


def test_a_jump_that_goes_the_same_way_twice_keeps_its_chunk() -> None:
    """Jumps of many chunks that happen to repeat their step are not a scrub: the frames they
    land on stay cached (a jump's chunks may be seen again), so reading it again is a hit."""
    values = np.random.default_rng(4).standard_normal((40, 6, 10)).astype("float32")
    src = ArraySource(values, chunks=(1, 6, 10)).with_options(SourceOptions(prefetch="off"))
    for t in (0, 13, 26, 39):  # the same step of 13 one-frame chunks, three times
        np.testing.assert_array_equal(read_selection(src, (t, slice(None), slice(None)), timeout=30), values[t])
    before = tse.stats()
    np.testing.assert_array_equal(read_selection(src, (39, slice(None), slice(None)), timeout=30), values[39])
    snap = tse.stats() - before
    assert (snap.hits, snap.misses, snap.taken_over) == (1, 0, 0), snap


class _Gated(ArraySource):
    """An in-memory source whose reads (on the engine's read threads) wait until ``gate``
    is set."""

    gate: threading.Event

    def read_chunk_sync(self, index: Any) -> Any:
        self.gate.wait(30)
        return super().read_chunk_sync(index)


def test_a_frame_whose_read_another_caller_waits_on_is_copied_not_taken_over() -> None:
    """A scrubbing reader and another caller wait on the same read of a one-frame chunk: the
    reader gets a copy (the other caller's future holds the chunk), and writing it leaves
    what the other caller got as it was."""
    values = np.random.default_rng(5).standard_normal(SHAPE).astype("float32")
    src = _Gated(values, chunks=(1, 6, 10)).with_options(SourceOptions(prefetch="off"))
    gate = src.gate = threading.Event()
    gate.set()
    engine = get_engine()
    for t in range(6):  # a steady scrub, nothing read ahead of it
        np.testing.assert_array_equal(read_selection(src, (t, slice(None), slice(None)), timeout=30), values[t])
    gate.clear()
    other = engine.request(src, [(6, 0, 0)])[0]  # waits on the read of frame 6
    joined, taken = tse.stats().joined, tse.stats().taken_over
    got: list[np.ndarray] = []
    reader = threading.Thread(target=lambda: got.append(read_selection(src, (6, slice(None), slice(None)), timeout=30)))
    reader.start()
    deadline = time.monotonic() + 30
    while tse.stats().joined == joined and time.monotonic() < deadline:  # the reader joined the read
        time.sleep(0.005)
    gate.set()
    reader.join(30)
    held = other.result(30)
    assert tse.stats().taken_over == taken  # frame 6 was copied
    (frame,) = got
    assert not np.shares_memory(frame, held)
    frame[...] = -1.0
    np.testing.assert_array_equal(held[0], values[6])
    # the next frame, whose read only the reader waits on, is handed over
    np.testing.assert_array_equal(read_selection(src, (7, slice(None), slice(None)), timeout=30), values[7])
    assert tse.stats().taken_over == taken + 1
