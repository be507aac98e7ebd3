"""The Explorer as a viewer, headless: the contrast histogram, channel composites and RGB,
ROI statistics along the slider, linked views (no kernel: updates run inline)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("anywidget")
zarr = pytest.importorskip("zarr")
xr = pytest.importorskip("xarray")

import tsexplore as tse  # noqa: E402
from tsexplore.controller import frame_histogram, log_counts, robust_range, to_uint8  # noqa: E402
from tsexplore.errors import ConfigError  # noqa: E402
from tsexplore.ui._frames import channel_ramp, compose_lut, composite_rgba  # noqa: E402


def wait_for(cond, timeout=10.0, what="condition"):
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def browser(ex, **content):
    """A message from the canvas's browser side, as the comm delivers it."""
    ex.canvas._on_browser(ex.canvas, content, [])


def record(ex):
    """Record what the canvas sends from now on, after its browser side says it is ready."""
    sent = []
    ex.canvas.send = lambda content, buffers=None: sent.append((content, buffers))
    return sent


def frames_sent(sent):
    return [(c, b) for c, b in sent if c.get("type") == "frame"]


def ack(ex, sent):
    """The browser acks the newest frame sent (the one waiting, if any, goes out)."""
    browser(ex, type="ack", ack=frames_sent(sent)[-1][0]["seq"])


def numpy_hist(values, rng):
    v = np.asarray(values).ravel()
    return np.histogram(v[np.isfinite(v)], 256, rng)[0]


@pytest.fixture
def cube(small_cube):
    ds = tse.open_dataset(small_cube)
    truth = zarr.open_group(str(small_cube), mode="r")["temp"]
    return ds, truth


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    path = tse.sample_data("cells", tmp_path_factory.mktemp("cells") / "cells.zarr", size="small",
                           progress=False)
    return path, zarr.open_group(str(path), mode="r")["cells"][...]


# -- the histogram ---------------------------------------------------------------------------------


def test_frame_histogram_equals_numpy():
    rng = np.random.default_rng(0)
    data = (np.round(rng.normal(15, 6, (300, 400)) * 100) / 100).astype(np.float32)
    data[5, 5] = np.nan
    data[6, 6] = np.inf
    for clim in [(10.0, 20.0), (-50.0, 80.0), robust_range(data)]:
        h = frame_histogram(data, clim)
        finite = data[np.isfinite(data)]
        # the span holds the values and the colour range, so both handles lie on it
        assert h.range[0] <= min(clim[0], finite.min()) and h.range[1] >= max(clim[1], finite.max())
        np.testing.assert_array_equal(h.counts, numpy_hist(data, h.range))
        assert h.counts.sum() == finite.size
        assert len(h.log_bytes()) == 256
    # integers: exact too
    ints = rng.integers(0, 4000, (64, 64)).astype(np.uint16)
    h = frame_histogram(ints, (100.0, 3000.0))
    np.testing.assert_array_equal(h.counts, np.histogram(ints, 256, h.range)[0])
    np.testing.assert_array_equal(log_counts(np.array([0, 1, 9, 99])),
                                  np.floor(255 * np.log1p([0, 1, 9, 99]) / np.log1p(99) + 0.5))


def test_histogram_travels_with_the_frame_and_fields_show_the_range_in_use(cube):
    ds, truth = cube
    with ds.tse.explore(width=128, height=128, stats=False) as ex:
        frame = ex.controller.wait(timeout=10)
        sent = record(ex)
        browser(ex, type="ready", y=[-0.5, 127.5], x=[-0.5, 127.5], height=128, width=128, ny=128, nx=128)
        ack(ex, sent)
        ex.sliders["time"].value = 9
        frame = ex.controller.wait(timeout=10)
        content, buffers = frames_sent(sent)[-1]
        assert content["index"] == 9
        # one message: the frame and its histogram (256 log heights) as a second buffer
        assert len(buffers) == 2 and content["hist"]["buffer"] == 1 and len(bytes(buffers[1])) == 256
        rng = tuple(content["hist"]["ranges"][0])
        counts = numpy_hist(truth[9], rng)
        np.testing.assert_array_equal(frame.hists[0].counts, counts)
        np.testing.assert_array_equal(np.frombuffer(bytes(buffers[1]), np.uint8), log_counts(counts))
        assert content["hist"]["max"] == [int(counts.max())]
        # robust: the fields read the range the colours span (not 0 and 1)
        lo, hi = robust_range(np.asarray(truth[9]))
        assert (ex.clim_lo.value, ex.clim_hi.value) == pytest.approx((lo, hi))
        assert content["clim"] == pytest.approx([lo, hi])
        assert ex.clim_mode.value == "robust" and ex.canvas.clim is None
        # a handle dragged in the browser inside the frame's range: fixed, recoloured there only
        reads = ex.controller.counts["reads"]
        narrower = (lo + 0.1 * (hi - lo), hi - 0.1 * (hi - lo))
        browser(ex, type="clim", channel=0, clim=list(narrower))
        assert ex.clim_mode.value == "fixed" and ex.canvas.clim == pytest.approx(list(narrower))
        assert (ex.clim_lo.value, ex.clim_hi.value) == pytest.approx(narrower)
        assert ex.controller.counts["reads"] == reads
        # one the indices cannot show: quantised again over it, and the next frame says so
        browser(ex, type="clim", channel=0, clim=[0.0, 40.0])
        frame = ex.controller.wait(timeout=10)
        assert frame.clim == (0.0, 40.0) and ex.controller.counts["reads"] == reads + 1
        np.testing.assert_array_equal(frame.image, to_uint8(truth[9], (0.0, 40.0)))
        # back to robust: the fields follow the frames again
        ex.clim_mode.value = "robust"
        frame = ex.controller.wait(timeout=10)
        assert ex.canvas.clim is None and (ex.clim_lo.value, ex.clim_hi.value) == pytest.approx((lo, hi))
        # the status line says the range in use, whole
        assert f"colour range [{lo:.4g}, {hi:.4g}]" in content["info"]


# -- channels ------------------------------------------------------------------------------------


def test_a_channel_dim_is_an_additive_composite(cells):
    path, truth = cells
    ds = tse.open_dataset(path)
    with ds.tse.explore(width=128, height=96, stats=False) as ex:
        g = ex.geometry
        assert g.channel == "c" and not g.rgb and g.channels == 3
        assert set(ex.sliders) == {"time"} and ex.channels == ["DAPI", "GFP", "RFP"]
        assert "c" not in ex.y_picker.options and "c" not in ex.x_picker.options
        ex.sliders["time"].value = 4
        frame = ex.controller.wait(timeout=10)
        assert frame.image.shape == (3, 96, 128) and frame.data.shape == (3, 96, 128)
        for k in range(3):  # each channel over its own robust range
            np.testing.assert_array_equal(frame.data[k], truth[4, k])
            assert frame.clims[k] == pytest.approx(robust_range(truth[4, k]))
            np.testing.assert_array_equal(frame.image[k], to_uint8(truth[4, k], frame.clims[k]))
            np.testing.assert_array_equal(frame.hists[k].counts, numpy_hist(truth[4, k], frame.hists[k].range))
        meta, idx = ex.canvas.picture()[-1]
        assert meta["channels"] == 3 and meta["shape"] == [96, 128] and idx.shape == (3, 96, 128)
        assert ex.canvas.channel_colors[:3] == ["#00ff00", "#ff00ff", "#00ffff"]
        # the blend, as the browser computes it: the sum of each channel's ramp, clipped
        want = composite_rgba(idx, ex.canvas.channel_colors, meta["clims"])
        k = (10, 20)
        ramps = [compose_lut(channel_ramp(c), tuple(meta["clims"][j]), None)[idx[j][k]][:3]
                 for j, c in enumerate(ex.canvas.channel_colors[:3])]
        np.testing.assert_array_equal(want[k][:3], np.minimum(np.sum(ramps, axis=0), 255))
        # a channel off: blended again in the browser, nothing read
        reads = ex.controller.counts["reads"]
        ex.show_channel("GFP", False)
        assert ex.canvas.channel_on == [True, False, True] and ex.controller.counts["reads"] == reads
        off = composite_rgba(idx, ex.canvas.channel_colors, meta["clims"], on=ex.canvas.channel_on)
        assert (off[..., 1] <= want[..., 1]).all()
        # one channel's range from its handles: that channel alone is fixed
        browser(ex, type="clim", channel=2, clim=[0.0, 5000.0])
        frame = ex.controller.wait(timeout=10)
        assert frame.clims[2] == (0.0, 5000.0)
        assert frame.clims[0] == pytest.approx(robust_range(truth[4, 0]))
        assert ex.canvas.channel_clims == [None, None, [0.0, 5000.0]]
        # the value under the pointer: every channel's
        assert ex._hover_text(3, 5) == "values = " + ", ".join(f"{float(v):.6g}" for v in truth[4, :, 3, 5])


def test_channel_none_gives_a_slider_and_a_bad_channel_says_so(cells):
    path, truth = cells
    ds = tse.open_dataset(path)
    with ds.tse.explore(stats=False, channel=None) as ex:
        assert ex.geometry.channel is None and set(ex.sliders) == {"time", "c"}
    with pytest.raises(ConfigError, match="channel='band'"):
        ds.tse.explore(stats=False, channel="band")


def test_rgb_uint8_is_shown_as_colour():
    rng = np.random.default_rng(1)
    rgb = rng.integers(0, 256, (2, 40, 50, 3), dtype=np.uint8)
    da = xr.DataArray(rgb, dims=("frame", "y", "x", "rgb"), name="photo")
    with tse.explore(da, stats=False, width=50, height=40) as ex:
        assert ex.geometry.channel == "rgb" and ex.geometry.rgb and ex.canvas.rgb
        assert (ex.y_picker.value, ex.x_picker.value) == ("y", "x")
        ex.sliders["frame"].value = 1
        frame = ex.controller.wait(timeout=10)
        np.testing.assert_array_equal(frame.image, np.moveaxis(rgb[1], -1, 0))  # the values themselves
        want = composite_rgba(frame.image, [], [(0.0, 255.0)] * 3, rgb=True)
        np.testing.assert_array_equal(want[..., :3], rgb[1])
        assert (want[..., 3] == 255).all()


# -- ROI statistics ------------------------------------------------------------------------------


def test_roi_statistics_along_the_slider_equal_numpy(cube):
    ds, truth = cube
    with ds.tse.explore(width=128, height=128) as ex:
        ex.controller.wait(timeout=10)
        handle = ex.roi(y=slice(10, 70), x=slice(50, 100))
        out = handle.result(timeout=30)
        assert isinstance(out, xr.Dataset) and set(out.data_vars) == {"mean", "min", "max"}
        assert out["mean"].dims == ("time",)
        xr.testing.assert_identical(out["time"], ds["time"])  # coordinates kept
        block = np.asarray(truth[:, 10:70, 50:100], dtype=np.float64)
        np.testing.assert_allclose(out["mean"].values, block.mean(axis=(1, 2)), rtol=1e-12)
        np.testing.assert_array_equal(out["min"].values, block.min(axis=(1, 2)))
        np.testing.assert_array_equal(out["max"].values, block.max(axis=(1, 2)))
        assert handle.done and handle.progress == 1.0
        assert ex.canvas.roi_box == {"y": [9.5, 69.5], "x": [49.5, 99.5]}
        # the plot draws the same object; the StatsPanel shows the stream of its own
        wait_for(lambda: ex.roi_plot is not None and len(ex.roi_plot.source.data["mean_0"]) == 32, what="roi plot")
        np.testing.assert_array_equal(ex.roi_plot.source.data["mean_0"], out["mean"].values)
        ex.stats_panel.tick()
        assert "region y[10:70] x[50:100] along time: 16/16 chunks (planned reads), complete" in \
            ex.stats_panel.numbers.value
        # a shift-drag in the browser (index edges): the pixels whose centres are inside
        browser(ex, type="roi", y=[4.6, 20.2], x=[-3.0, 30.5])
        second = ex.roi_handle
        assert second is not handle and second.region == ((5, 21), (0, 31))
        out = second.result(timeout=30)
        block = np.asarray(truth[:, 5:21, 0:31], dtype=np.float64)
        np.testing.assert_array_equal(out["max"].values, block.max(axis=(1, 2)))
        # a newer region stops an older one still streaming
        third = ex.roi(y=slice(0, 128), x=slice(0, 128))
        fourth = ex.roi(y=slice(0, 2), x=slice(0, 2))
        assert third.superseded and not fourth.superseded
        if not third.done:
            with pytest.raises(tse.errors.TsExploreError, match="newer region"):
                third.result(timeout=30)
        np.testing.assert_array_equal(fourth.result(timeout=30)["min"].values,
                                      np.asarray(truth[:, 0:2, 0:2]).min(axis=(1, 2)))
        with pytest.raises(ConfigError, match="holds no pixel"):
            ex.roi(y=slice(200, 300))
        with pytest.raises(ConfigError, match="step 1"):
            ex.roi(y=slice(0, 10, 2))


def test_roi_of_a_composite_keeps_the_channel_dim(cells):
    path, truth = cells
    ds = tse.open_dataset(path)
    with ds.tse.explore(stats=False) as ex:
        out = ex.roi(y=slice(20, 50), x=slice(30, 90)).result(timeout=30)
        assert out["mean"].dims == ("time", "c") and list(out["c"].values) == ["DAPI", "GFP", "RFP"]
        block = truth[:, :, 20:50, 30:90].astype(np.float64)
        np.testing.assert_allclose(out["mean"].values, block.mean(axis=(2, 3)), rtol=1e-12)
        np.testing.assert_array_equal(out["min"].values, block.min(axis=(2, 3)))
        np.testing.assert_array_equal(out["max"].values, block.max(axis=(2, 3)))


# -- linked views ----------------------------------------------------------------------------------


def test_linked_views_move_in_step_through_one_engine(cube):
    ds, truth = cube
    later = ds.temp.isel(time=slice(10, None))  # the same variable ten steps later
    with tse.explore(ds.temp, later, width=128, height=128) as linked:
        a, b = linked
        assert len(linked) == 2 and a.stats_panel is not None and b.stats_panel is None
        assert a.controller.engine is b.controller.engine
        a.sliders["time"].value = 5  # slider: both move (b is ten steps ahead)
        assert b.sliders["time"].value == 5
        fa, fb = a.controller.wait(timeout=10), b.controller.wait(timeout=10)
        np.testing.assert_array_equal(fa.data, truth[5])
        np.testing.assert_array_equal(fb.data, truth[15])
        # a pan/zoom in a's browser: b shows the same region
        browser(a, type="viewport", y=[9.5, 40.5], x=[69.5, 100.5], height=128, width=128)
        fa, fb = a.controller.wait(timeout=10), b.controller.wait(timeout=10)
        assert fa.request.region == fb.request.region == ((10, 41), (70, 101))
        np.testing.assert_array_equal(fb.data, truth[15, 10:41, 70:101])
        # the slider of b (in its browser) moves a
        browser(b, type="index", dim="time", value=21)
        assert a.sliders["time"].value == 21 and b.controller.state.index("time") == 21
        # from code too, and ex.link makes the same thing
        with ds.tse.explore(stats=False, width=64, height=64) as c, ds.tse.explore(stats=False, width=64, height=64) as d:
            pair = c.link(d)
            c.set_view(y_range=(0, 20), x_range=(0, 20))
            assert d.controller.state.y_range == c.controller.state.y_range
            assert repr(pair).startswith("<LinkedViews of 2")


def test_roi_reads_go_below_the_visible_ones(cube, monkeypatch):
    ds, truth = cube
    with ds.tse.explore(width=128, height=128, stats=False) as ex:
        ex.controller.wait(timeout=10)
        engine = ex.controller.engine
        asked = []
        original = engine.request

        def request(source, indices, priority=tse.engine.Priority.VISIBLE, **kw):
            asked.append(priority)
            return original(source, indices, priority, **kw)

        monkeypatch.setattr(engine, "request", request)
        ex.roi(y=slice(0, 100), x=slice(0, 100)).result(timeout=30)
        assert asked and set(asked) == {tse.engine.Priority.PLANNED}
