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


def picture(ex):
    """The canvas's current picture (what a browser view is sent): [(meta, uint8 indices)]."""
    return ex.canvas.picture()


def last_painted(ex, frame):
    """Wait until ``frame``'s generation is on the canvas; its (meta, indices)."""
    wait_for(lambda: ex.painted_generation >= frame.generation, what="paint")
    meta, idx = picture(ex)[-1]
    assert meta["gen"] == ex._gen_offset + frame.generation
    return meta, idx


def browser(ex, **content):
    """A message from the canvas's browser side, as the comm delivers it."""
    ex.canvas._on_browser(ex.canvas, content, [])


@pytest.fixture
def cube(small_cube):
    ds = tse.open_dataset(small_cube)
    truth = zarr.open_group(str(small_cube), mode="r")["temp"]
    return ds, truth


def tse_threads():
    return [t.name for t in threading.enumerate()
            if t.name.startswith(("tsexplore-view", "tsexplore-stats", "tsexplore-profile", "tsexplore-pyramid"))]


def test_slider_shows_the_new_slice_as_uint8(cube):
    ds, truth = cube
    with ds.tse.explore(width=400, height=300) as ex:
        assert set(ex.sliders) == {"time"}
        wait_for(lambda: ex.painted_generation >= 1, what="first frame")
        ex.sliders["time"].value = 7  # the canvas's own slider, set from the kernel
        assert ex.canvas.slider_value == 7
        frame = ex.controller.wait(timeout=10)
        # the data on screen is slice 7 read straight from zarr
        np.testing.assert_array_equal(frame.data, truth[7])
        meta, idx = last_painted(ex, frame)
        assert idx.dtype == np.uint8
        np.testing.assert_array_equal(idx, to_uint8(truth[7], frame.clim))  # row 0 = lowest y index
        # the frame covers the pixel edges of the whole plane (index coordinates); the axes
        # map indices to the coordinates
        assert meta["extent"] == [[-0.5, 127.5], [-0.5, 127.5]] and meta["mode"] == "replace" and meta["final"]
        dy, dx = float(ds.y[1] - ds.y[0]), float(ds.x[1] - ds.x[0])
        assert ex.canvas.x_axis["c0"] == pytest.approx(float(ds.x[0])) and ex.canvas.x_axis["dc"] == pytest.approx(dx)
        assert ex.canvas.y_axis["c0"] == pytest.approx(float(ds.y[0])) and ex.canvas.y_axis["dc"] == pytest.approx(dy)
        assert meta["label"].startswith("temp · time=7 (2000-01-08") and meta["index"] == 7
        # the browser's slider shows the coordinate value, not just the index
        assert ex.canvas.slider["dim"] == "time" and ex.canvas.slider["labels"][7] == "2000-01-08"
        # percentiles of the displayed data only
        lo, hi = np.percentile(truth[7], [2, 98])
        assert frame.clim == pytest.approx((lo, hi), rel=1e-3)
        assert meta["clim"] == pytest.approx(list(frame.clim))
        # the browser's slider moving: the kernel hears it and shows that slice
        browser(ex, type="index", dim="time", value=11)
        frame = ex.controller.wait(timeout=10)
        np.testing.assert_array_equal(frame.data, truth[11])
        meta, idx = last_painted(ex, frame)
        assert meta["index"] == 11
    assert tse_threads() == []


def test_the_ipywidgets_slider_drives_the_same_view(cube):
    ds, truth = cube
    with ds.tse.explore(width=200, height=200, stats=False, slider="ipywidgets") as ex:
        assert ex.canvas.slider == {}
        ex.sliders["time"].value = 5
        assert ex.readouts["time"].value == "2000-01-06"
        frame = ex.controller.wait(timeout=10)
        np.testing.assert_array_equal(frame.data, truth[5])
        meta, _ = last_painted(ex, frame)
        assert meta["index"] == 5


def test_bytes_sent_per_frame_are_uint8_at_screen_resolution(cube):
    ds, _ = cube
    with ds.tse.explore(width=64, height=64, stats=False) as ex:
        frame = ex.controller.wait(timeout=10)
        meta, idx = last_painted(ex, frame)
        assert idx.dtype == np.uint8
        assert idx.shape == (64, 64)  # 128 x 128 data shown at 64 x 64 screen pixels
        assert meta["encoding"] == "raw"
        # nothing travels before the browser's side exists; then the picture, once
        assert ex.canvas.stats()["by_encoding"] == {}
        sent = []
        ex.canvas.send = lambda content, buffers=None: sent.append((content, buffers))
        browser(ex, type="ready", y=[-0.5, 127.5], x=[-0.5, 127.5], height=64, width=64, ny=128, nx=128)
        assert ex.canvas.stats()["by_encoding"] == {"raw": 1}
        (content, buffers), = [(c, b) for c, b in sent if c.get("type") == "frame"]
        assert content["shape"] == [64, 64] and bytes(buffers[0]) == idx.tobytes()
        # a zoomed-out view without a pyramid says that it shows a subsample
        wait_for(lambda: ex.notice.shown, what="the subsample notice")
        assert "1 pixel in 2×2" in ex.notice.text.value and "no pyramid" in ex.notice.text.value


def test_pan_zoom_reads_only_visible_chunks_at_full_resolution(cube):
    ds, truth = cube
    with ds.tse.explore(width=400, height=300, stats=False) as ex:
        ex.controller.wait(timeout=10)
        # the browser's pan/zoom reports its view in index edges and device pixels
        browser(ex, type="viewport", y=[9.5, 40.5], x=[69.5, 100.5], height=300, width=400)
        frame = ex.controller.wait(timeout=10)
        assert frame.request.region == ((10, 41), (70, 101))
        assert set(frame.request.chunks) == {(0, 0, 1)}
        np.testing.assert_array_equal(frame.data, truth[0, 10:41, 70:101])
        meta, idx = last_painted(ex, frame)
        np.testing.assert_array_equal(idx, frame.image)
        assert meta["extent"] == [[9.5, 40.5], [69.5, 100.5]]
        # the same view again (e.g. a second browser view reporting it) reads nothing new
        reads = ex.controller.counts["reads"]
        browser(ex, type="viewport", y=[9.5, 40.5], x=[69.5, 100.5], height=300, width=400)
        assert ex.controller.counts["reads"] == reads
        # a view the browser made for the axes of another plane (sent before this one's axes
        # arrived) is not this plane's: ignored
        browser(ex, type="viewport", y=[-0.5, 0.5], x=[-0.5, 0.5], height=300, width=400, ny=1, nx=1)
        assert ex.controller.counts["updates"] == ex.controller.counts["reads"] == reads
        # coordinates from code: widened to square pixels as the browser shows them, and the
        # browser is told (a view rendered later starts there too)
        from tsexplore.ui._frames import fit_view

        x, y = ds.x.values, ds.y.values
        dx, dy = float(x[1] - x[0]), float(y[1] - y[0])
        ex.set_ranges((x[20] - dx / 2, x[60] + dx / 2), (y[0] - dy / 2, y[30] + dy / 2))
        want = fit_view(((-0.5, 30.5), (19.5, 60.5)), (300, 400))
        frame = ex.controller.wait(timeout=10)
        np.testing.assert_allclose([frame.request.state.y_range, frame.request.state.x_range], want, atol=1e-9)
        np.testing.assert_allclose([ex.canvas.view0["y"], ex.canvas.view0["x"]], want, atol=1e-9)
        (y0, y1), (x0, x1) = frame.request.region
        assert y0 == 0 and (x0, x1) == (19, 62) and frame.request.step == (1, 1)
        np.testing.assert_array_equal(frame.data, truth[0, y0:y1, x0:x1])
        # a click (the canvas's pixel message) streams the profile through that pixel
        browser(ex, type="pixel", iy=20, ix=90, y=20.2, x=89.9)
        ex._profile_thread.join(10)
        np.testing.assert_array_equal(ex.profile_values, truth[:, 20, 90].astype(np.float64))
        wait_for(lambda: ex.profile_source is not None and len(ex.profile_source.data["y"]) == truth.shape[0],
                 what="profile paint")
        np.testing.assert_array_equal(ex.profile_source.data["y"], truth[:, 20, 90])
        # the exact value under the pointer, from the frame on screen
        assert ex._hover_text(20, 30) == f"value = {float(truth[0, 20, 30]):.6g}"


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
        meta, idx = last_painted(ex, frame)
        np.testing.assert_array_equal(idx, to_uint8(truth[:, 5, :].T, frame.clim))
        assert ex.canvas.y_axis["dim"] == "x" and ex.canvas.x_axis["dim"] == "time"
        thread = ex.profile_at(iy=20, ix=3)  # x=20, time=3 -> profile along y
        thread.join(10)
        np.testing.assert_array_equal(ex.profile_values, truth[3, :, 20].astype(np.float64))


def test_fixed_colour_range_and_colormap(cube):
    ds, truth = cube
    with ds.tse.explore(stats=False, clim=(10.0, 30.0), cmap="magma") as ex:
        frame = ex.controller.wait(timeout=10)
        assert frame.clim == (10.0, 30.0) and ex.canvas.cmap == "magma"
        np.testing.assert_array_equal(frame.image, to_uint8(truth[0], (10.0, 30.0)))
        # a colormap change is applied in the browser: nothing is read again
        reads = ex.controller.counts["reads"]
        ex.cmap_picker.value = "gray"
        assert ex.canvas.cmap == "gray" and ex.controller.counts["reads"] == reads
        # a narrower display range the indices can show: recoloured in the browser only
        ex.clim_hi.value = 28.0
        assert ex.canvas.clim == [10.0, 28.0] and ex.controller.counts["reads"] == reads
        # one they cannot (values below 10 were clipped when quantised): quantised again
        ex.clim_lo.value = 0.0
        frame = ex.controller.wait(timeout=10)
        assert frame.clim == (0.0, 28.0) and ex.controller.counts["reads"] == reads + 1
        np.testing.assert_array_equal(frame.image, to_uint8(truth[0], (0.0, 28.0)))
        ex.clim_mode.value = "robust"
        frame = ex.controller.wait(timeout=10)
        assert frame.clim != (0.0, 28.0) and ex.canvas.clim is None
        ex.clim_lo.value, ex.clim_mode.value = 40.0, "fixed"  # max < min: said, nothing read
        assert "max > min" in ex.info.value


def test_bad_input_says_what_to_do(cube):
    ds, _ = cube
    with pytest.raises(TsExploreError, match="Dataset or DataArray"):
        tse.explore(np.zeros((4, 4)))
    with pytest.raises(ConfigError, match="var='nope'"):
        ds.tse.explore(var="nope")
    with pytest.raises(ConfigError, match="cmap"):
        ds.tse.explore(cmap="rainbowz")
    with pytest.raises(ConfigError, match="slider"):
        ds.tse.explore(slider="knob")


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


def test_an_idle_stats_panel_sends_nothing_new():
    """Ticks of an idle engine stream no rows and no chunk map (each would make the browser
    redraw every plot); the first change streams the held row with the new one, so the value
    that held stays flat up to the change."""
    ds = tse.synthetic((8, 64, 64), (1, 32, 32))
    with ds.tse.explore(stats=False) as ex, tse.stats_panel(timer="thread", interval=3600) as panel:
        ex.controller.wait(timeout=30)
        deadline = time.monotonic() + 30
        while tse.stats().in_flight or any(tse.stats().queued.values()):
            assert time.monotonic() < deadline, tse.stats()
            time.sleep(0.05)
        time.sleep(1.5)  # past the hit ratio's window; the read rate (tau 1 s) below 1 kB/s
        panel.tick()
        panel.tick()
        rows, picture = len(panel.history["t"]), panel.chunk_source.data
        for _ in range(5):
            panel.tick()
        assert len(panel.history["t"]) == rows  # nothing streamed
        assert panel.chunk_source.data is picture  # the same chunk map, not sent again
        held = panel.history["t"][-1]
        _ = ds["data"].isel(time=5).values  # a read: the rows change
        panel.tick()
        t = panel.history["t"]
        assert len(t) == rows + 2 and t[-2] > held and np.all(np.diff(t) > 0)
        assert panel.ticks >= 8


def test_standalone_stats_panel_maps_the_newest_explorers_plane(cube):
    ds, _ = cube
    with ds.tse.explore(stats=False) as ex, tse.stats_panel(interval=0.1) as panel:
        ex.controller.wait(timeout=10)
        deadline = time.monotonic() + 5  # the panel's own timer may land an older tick last
        while True:
            panel.tick()
            states = panel.chunk_source.data["image"][0]
            if (states == 2).all() or time.monotonic() > deadline:
                break
            time.sleep(0.05)
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
        meta, idx = last_painted(ex, frame)
        assert idx.shape == (10, 45) and meta["extent"] == [[-0.5, 9.5], [-0.5, 44.5]]
        # the axes label the selection's own coordinates: x from 105, y from 5.0 in steps of 0.5
        assert (ex.canvas.x_axis["c0"], ex.canvas.x_axis["dc"]) == pytest.approx((105.0, 1.0))
        assert (ex.canvas.y_axis["c0"], ex.canvas.y_axis["dc"]) == pytest.approx((5.0, 0.5))
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


# -- pyramids ---------------------------------------------------------------------------------------


def test_explorer_reads_the_pyramid_level_that_fits_the_screen(tmp_path):
    import xarray as xr

    from tsexplore.pyramid import open_levels
    from tsexplore.testing.wrappers import CountingSource

    plane = tse.synthetic((1024, 1024), chunks=(64, 64), dims=("y", "x"))["data"]
    path = tse.pyramid(plane, tmp_path / "p.zarr", min_size=64, chunks={"y": 64, "x": 64}, progress=False)
    levels = open_levels(path, wrap=CountingSource)  # counts the reads reaching each level
    with tse.explore(levels[0], width=256, height=256, stats=False, levels=levels) as ex:
        assert len(ex.levels) == 5
        frame = ex.controller.wait(timeout=30)
        # 1024^2 on 256^2 pixels: level 2 (256^2, 16 chunks), level 3 (4 chunks) shown first
        assert frame.level == 2 and frame.request.step == (1, 1)
        np.testing.assert_array_equal(frame.data, xr.open_zarr(path, group="2")["data"].values)
        assert levels.chunk_reads() == [0, 0, 16, 4, 0]
        assert [k for k, lv in enumerate(ex.levels) if lv.opened] == [0, 2, 3]  # only what was read
        wait_for(lambda: picture(ex)[-1][0]["final"], what="the last tile")
        pics = picture(ex)
        assert [m["mode"] for m, _ in pics] == ["base"] + ["tile"] * 16
        assert pics[0][0]["extent"] == [[-0.5, 1023.5], [-0.5, 1023.5]]  # level 3 over all of level 0
        np.testing.assert_array_equal(pics[0][1], to_uint8(xr.open_zarr(path, group="3")["data"].values,
                                                           tuple(pics[0][0]["clim"])))
        assert "level 2 of 5, 256×256 px of y[0:256:1] x[0:256:1], 16 chunks in tiles" in pics[-1][0]["info"]
        # zoomed in to 64 x 64 level-0 pixels: level 0, one chunk
        browser(ex, type="viewport", y=[-0.5, 63.5], x=[-0.5, 63.5], height=256, width=256)
        frame = ex.controller.wait(timeout=30)
        assert frame.level == 0 and frame.request.region == ((0, 64), (0, 64))
        np.testing.assert_array_equal(frame.data, plane.values[:64, :64])
        assert levels.chunk_reads() == [1, 0, 16, 4, 0]
        assert not ex.notice.shown


def test_a_zoomed_out_view_without_a_pyramid_offers_to_build_one(tmp_path):
    import xarray as xr

    from tsexplore.pyramid import open_levels

    values = np.random.default_rng(1).normal(size=(512, 512)).astype("float32")
    store = tmp_path / "plane.zarr"
    xr.Dataset({"v": (("y", "x"), values)}).to_zarr(store, encoding={"v": {"chunks": (128, 128)}})
    ds = tse.open_dataset(store)
    with ds.tse.explore(width=64, height=64, stats=False) as ex:
        wait_for(lambda: ex.notice.shown, what="the notice")
        assert "no pyramid" in ex.notice.text.value and "Build one" in ex.notice.text.value
        assert ex.notice.path.value == str(tmp_path / "plane_v_pyramid.zarr")  # next to the store
        ex.build_pyramid().join(60)
        wait_for(lambda: len(ex.levels) == 2, what="the pyramid in use")
        frame = ex.controller.wait(timeout=30)
        assert frame.level == 1
        built = open_levels(tmp_path / "plane_v_pyramid.zarr")
        np.testing.assert_array_equal(frame.data, built[1].v.values[::4, ::4])
        wait_for(lambda: not ex.notice.shown, what="the notice gone")
        assert ex.notice.bar.value == 1.0
    assert tse_threads() == []


def test_no_pyramid_button_for_a_variable_too_large_to_copy_here():
    big = tse.synthetic((4, 2**20, 2**20), chunks=(1, 256, 256))  # 17.6 TB, virtual
    with big.tse.explore(width=64, height=64, stats=False, view={"y_range": (-0.5, 255.5),
                                                                  "x_range": (-0.5, 255.5)}) as ex:
        frame = ex.controller.wait(timeout=30)
        assert frame.request.step == (4, 4) and len(frame.request.chunks) == 1
        wait_for(lambda: ex.notice.shown, what="the notice")
        assert "TB with its levels" in ex.notice.text.value
        assert ex.notice.controls.layout.display == "none"  # no button that would write 23 TB
