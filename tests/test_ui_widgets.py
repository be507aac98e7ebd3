"""The Explorer and StatsPanel widgets, headless (no kernel: updates run inline)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

pytest.importorskip("holoviews")
pytest.importorskip("ipywidgets")
zarr = pytest.importorskip("zarr")

import tsexplore as tse  # noqa: E402
from tsexplore.controller import to_uint8  # noqa: E402
from tsexplore.errors import ConfigError, TsExploreError  # noqa: E402


def wait_for(cond, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def painted(ex):
    """The image glyph's data now (what the browser is sent): (uint8 image, x, y, dw, dh)."""
    d = ex.image_source.data
    return d["image"][0], d["x"][0], d["y"][0], d["dw"][0], d["dh"][0]


@pytest.fixture
def cube(small_cube):
    ds = tse.open_dataset(small_cube)
    truth = zarr.open_group(str(small_cube), mode="r")["temp"]
    return ds, truth


def tse_threads():
    return [t.name for t in threading.enumerate()
            if t.name.startswith(("tsexplore-view", "tsexplore-stats", "tsexplore-profile"))]


def test_slider_shows_the_new_slice_as_uint8(cube):
    ds, truth = cube
    with ds.tse.explore(width=400, height=300) as ex:
        assert set(ex.sliders) == {"time"}
        wait_for(lambda: ex.painted_generation >= 1, what="first frame")
        ex.sliders["time"].value = 7
        frame = ex.controller.wait(timeout=10)
        wait_for(lambda: ex.painted_generation == frame.generation, what="paint")
        # the data on screen is slice 7 read straight from zarr
        np.testing.assert_array_equal(frame.data, truth[7])
        img, x, y, dw, dh = painted(ex)
        assert img.dtype == np.uint8
        # bokeh draws row 0 at the bottom: the lowest y coordinate (y increases with index here)
        assert ds.y.values[1] > ds.y.values[0]
        np.testing.assert_array_equal(img, to_uint8(truth[7], frame.clim))
        # the image covers the pixel edges of the whole plane, in coordinates
        dy, dx = float(ds.y[1] - ds.y[0]), float(ds.x[1] - ds.x[0])
        assert (x, y) == pytest.approx((float(ds.x[0]) - dx / 2, float(ds.y[0]) - dy / 2))
        assert (dw, dh) == pytest.approx((128 * dx, 128 * dy))
        assert ex.figure.title.text.startswith("temp · time=7 (2000-01-08")
        # the coordinate value is shown, not just the index
        assert ex.readouts["time"].value == str(ds.time.values[7])[:10] == "2000-01-08"
        # percentiles of the displayed data only
        lo, hi = np.percentile(truth[7], [2, 98])
        assert frame.clim == pytest.approx((lo, hi), rel=1e-3)
    assert tse_threads() == []


def test_bytes_sent_per_frame_are_uint8_at_screen_resolution(cube):
    ds, _ = cube
    with ds.tse.explore(width=64, height=64, stats=False) as ex:
        frame = ex.controller.wait(timeout=10)
        wait_for(lambda: ex.painted_generation == frame.generation, what="paint")
        image = painted(ex)[0]
        assert image.dtype == np.uint8
        assert image.shape == (64, 64)  # 128 x 128 data shown at 64 x 64 screen pixels
        assert image.nbytes <= 2 * 64 * 64 * 4


def test_zoom_reads_only_visible_chunks_at_full_resolution(cube):
    ds, truth = cube
    with ds.tse.explore(width=400, height=300, stats=False) as ex:
        ex.controller.wait(timeout=10)
        # the RangeXY stream sends coordinates: x is degrees_east, y degrees_north
        x = ds.x.values
        y = ds.y.values
        # a RangesUpdate event as the browser's pan/zoom sends it, through bokeh's dispatch
        from bokeh.events import RangesUpdate

        ex.figure._trigger_event(RangesUpdate(ex.figure, x0=x[70], x1=x[100], y0=y[10], y1=y[40]))
        frame = ex.controller.wait(timeout=10)
        assert frame.request.region == ((10, 41), (70, 101))
        assert set(frame.request.chunks) == {(0, 0, 1)}
        np.testing.assert_array_equal(frame.data, truth[0, 10:41, 70:101])
        wait_for(lambda: ex.painted_generation == frame.generation, what="paint")
        img, x0, y0, dw, dh = painted(ex)
        np.testing.assert_array_equal(img, frame.image)
        dx = float(x[1] - x[0])
        assert (x0, dw) == pytest.approx((x[70] - dx / 2, 31 * dx))
        # a click (bokeh Tap, in coordinates) streams the profile through that pixel
        from bokeh.events import Tap

        ex.figure._trigger_event(Tap(ex.figure, x=float(x[90]), y=float(y[20])))
        ex._profile_thread.join(10)
        np.testing.assert_array_equal(ex.profile_values, truth[:, 20, 90].astype(np.float64))
        wait_for(lambda: len(ex.profile_source.data["y"]) == truth.shape[0], what="profile paint")
        np.testing.assert_array_equal(ex.profile_source.data["y"], truth[:, 20, 90])


def test_dims_pickers_transpose_and_profile(cube):
    ds, truth = cube
    with ds.tse.explore(stats=False) as ex:
        ex.y_picker.value = "x"   # picking the x dim for y swaps the two pickers
        assert (ex.y_picker.value, ex.x_picker.value) == ("x", "y")
        ex.x_picker.value = "time"
        assert set(ex.sliders) == {"y"}
        ex.sliders["y"].value = 5
        frame = ex.controller.wait(timeout=10)
        np.testing.assert_array_equal(frame.data, truth[:, 5, :].T)  # rows = x, cols = time
        thread = ex.profile_at(iy=20, ix=3)  # x=20, time=3 -> profile along y
        thread.join(10)
        np.testing.assert_array_equal(ex.profile_values, truth[3, :, 20].astype(np.float64))


def test_fixed_colour_range_and_colormap(cube):
    ds, truth = cube
    with ds.tse.explore(stats=False, clim=(10.0, 30.0), cmap="magma") as ex:
        frame = ex.controller.wait(timeout=10)
        assert frame.clim == (10.0, 30.0)
        np.testing.assert_array_equal(frame.image, to_uint8(truth[0], (10.0, 30.0)))
        ex.clim_mode.value = "robust"
        frame = ex.controller.wait(timeout=10)
        assert frame.clim != (10.0, 30.0)
        ex.cmap_picker.value = "gray"
        cmap = ex.color_mapper.palette
        assert len(cmap) == 256 and cmap[0] == "#d9d9d9"  # 0 = NaN, 1..255 = gray ramp
        last = cmap[-1].lstrip("#")
        assert all(int(last[i:i + 2], 16) >= 0xF0 for i in (0, 2, 4))  # gray ends in white


def test_bad_input_says_what_to_do(cube):
    ds, _ = cube
    with pytest.raises(TsExploreError, match="Dataset or DataArray"):
        tse.explore(np.zeros((4, 4)))
    with pytest.raises(ConfigError, match="var='nope'"):
        ds.tse.explore(var="nope")
    with pytest.raises(ConfigError, match="cmap"):
        ds.tse.explore(cmap="rainbowz")


def test_stats_panel_keeps_updating_while_a_background_thread_reads():
    ds = tse.synthetic((64, 256, 256), (1, 128, 128), latency=0.01)
    with tse.stats_panel(interval=0.1) as panel:
        ticks0 = panel.ticks
        reads0 = panel.last.reads
        seen = []

        def work():
            for t in range(64):
                _ = ds["data"].isel(time=t).values

        worker = threading.Thread(target=work, name="tsexplore-test-worker")
        worker.start()
        while worker.is_alive():
            seen.append(panel.last.reads)
            time.sleep(0.05)
        worker.join()
        time.sleep(0.3)
        truth = tse.stats()
        assert panel.ticks - ticks0 >= 5
        # the panel saw intermediate states, not only the start and the end
        assert len({r for r in seen if reads0 < r < truth.reads}) >= 2
        assert panel.last.reads == truth.reads >= 64 * 4
        hist = panel.history
        assert np.nanmax(hist["read_mbs"]) > 0
        assert np.all(np.diff(hist["t"]) > 0)
        assert "reads" in panel.numbers.value
    assert tse_threads() == []


def test_standalone_stats_panel_maps_the_newest_explorers_plane(cube):
    ds, _ = cube
    with ds.tse.explore(stats=False) as ex, tse.stats_panel(interval=0.1) as panel:
        ex.controller.wait(timeout=10)
        panel.tick()
        states = panel.chunk_source.data["image"][0]
        assert states.shape == (2, 2) and (states == 2).all()
        assert panel.chunk_counts.tolist() == [0, 0, 4, 0]  # cached; none in flight or absent


def test_bokeh_widget_batch_sends_one_patch_for_several_changes():
    """Image and title changes inside ``batch()`` reach the browser as one PATCH-DOC."""
    import json

    from bokeh.models import ColumnDataSource
    from bokeh.plotting import figure

    from tsexplore.ui._kernel import bokeh_widget

    src = ColumnDataSource({"image": [np.zeros((2, 2), np.uint8)]})
    fig = figure(title="a")
    fig.image("image", x=0, y=0, dw=1, dh=1, source=src)
    widget = bokeh_widget(fig)
    sent = []
    widget.send = lambda content, buffers=None: sent.append((content, buffers))

    def patches():
        out = []
        for content, _ in sent:
            payload = content.get("payload")
            if payload and '"msgtype"' in payload and json.loads(payload).get("msgtype") == "PATCH-DOC":
                out.append(json.loads(payload))
        return out

    def events():  # the content parts: one per patch, listing that patch's events
        return [json.loads(c["payload"])["events"] for c, _ in sent
                if c.get("payload") and '"events"' in c["payload"]]

    src.data = {"image": [np.ones((2, 2), np.uint8)]}
    fig.title.text = "b"
    assert len(patches()) == 2  # without batching: one patch per change
    sent.clear()
    with widget.batch():
        src.data = {"image": [np.full((2, 2), 7, np.uint8)]}
        fig.title.text = "c"
        assert sent == []  # nothing leaves before the block ends
    assert len(patches()) == 1
    (evs,) = events()
    assert sorted(e["kind"] for e in evs) == ["ColumnDataChanged", "ModelChanged"]
    assert [e["new"] for e in evs if e["kind"] == "ModelChanged"] == ["c"]
    assert any(b for _, b in sent)  # the image went as a binary buffer
    widget.close()


def test_explorer_shows_exactly_the_selection_it_was_given():
    """``ds.v.isel(y=slice(10, 20), x=slice(5, 50)).tse.explore()`` shows that region only."""
    import xarray as xr

    values = np.arange(8 * 64 * 64, dtype="float32").reshape(8, 64, 64)
    coords = {"y": np.arange(64) * 0.5, "x": 100.0 + np.arange(64)}
    ds = tse.open_dataset(xr.Dataset({"v": (("time", "y", "x"), values)}, coords=coords),
                          grid=(2, 16, 16))
    sel = ds.v.isel(y=slice(10, 20), x=slice(5, 50))
    with sel.tse.explore(width=90, height=20) as ex, tse.stats_panel(interval=0.1) as panel:
        frame = ex.controller.wait(timeout=10)
        np.testing.assert_array_equal(frame.data, values[0, 10:20, 5:50])
        assert frame.data[0, 0] == 645.0
        wait_for(lambda: ex.painted_generation == frame.generation, what="paint")
        img, x, y, dw, dh = painted(ex)
        assert img.shape == (10, 45)
        assert (x, dw) == pytest.approx((104.5, 45.0)) and (y, dh) == pytest.approx((4.75, 5.0))
        ex.sliders["time"].value = 6
        frame = ex.controller.wait(timeout=10)
        np.testing.assert_array_equal(frame.data, values[6, 10:20, 5:50])
        ex.profile_at(iy=3, ix=40).join(10)
        np.testing.assert_array_equal(ex.profile_values, values[:, 13, 45])
        # the chunk map covers the chunks the selection touches: y 0..1, x 0..3
        panel.tick()
        states = panel.chunk_source.data["image"][0]
        assert states.shape == (2, 4) and (states == 2).all()
        assert panel.chunk_source.data["x"][0] == 0 and panel.chunk_source.data["dw"][0] == 4
