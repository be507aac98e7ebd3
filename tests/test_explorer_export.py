"""Pictures of the Explorer, headless: the kernel's rendering of the canvas (the arithmetic
``canvas.js`` shares with ``tsexplore.ui._render``), snapshots, movies and the notebook's PNG.

The browser test (tests/test_browser.py) checks the same snapshot against the canvas's own
pixels in Chromium."""

from __future__ import annotations

import base64

import numpy as np
import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("anywidget")
zarr = pytest.importorskip("zarr")

import tsexplore as tse  # noqa: E402
from tsexplore.controller import to_uint8  # noqa: E402
from tsexplore.errors import ConfigError  # noqa: E402
from tsexplore.ui._frames import compact_labels  # noqa: E402
from tsexplore.ui._render import (  # noqa: E402
    Look,
    bar_pixels,
    from_png,
    label_rgba,
    plot_pixels,
)
from tsexplore.ui.canvas import palette_rgba  # noqa: E402

WHITE = (255, 255, 255, 255)


@pytest.fixture
def cube(small_cube):
    ds = tse.open_dataset(small_cube)
    truth = zarr.open_group(str(small_cube), mode="r")["temp"]
    return ds, truth


def one_layer(idx, extent, clim=(0.0, 1.0)):
    (y0, y1), (x0, x1) = extent
    return [({"extent": [[y0, y1], [x0, x1]], "clim": list(clim), "channels": 1}, idx)]


def test_the_plot_at_one_screen_pixel_per_data_pixel_is_the_colour_table():
    idx = np.random.default_rng(0).integers(0, 256, (6, 9), dtype=np.uint8)
    extent = ((-0.5, 5.5), (-0.5, 8.5))
    look = Look(palette_rgba("magma"))
    out = plot_pixels(one_layer(idx, extent), look, extent, (6, 9), WHITE, lower=True)
    np.testing.assert_array_equal(out, palette_rgba("magma")[idx][::-1])  # y grows upwards
    out = plot_pixels(one_layer(idx, extent), look, extent, (6, 9), WHITE, lower=False)
    np.testing.assert_array_equal(out, palette_rgba("magma")[idx])


def test_a_zoomed_view_repeats_pixels_and_shows_the_background_outside():
    idx = np.arange(12, dtype=np.uint8).reshape(3, 4) + 1
    extent = ((-0.5, 2.5), (-0.5, 3.5))
    look = Look(palette_rgba("viridis"))
    out = plot_pixels(one_layer(idx, extent), look, extent, (9, 12), WHITE, lower=False)
    want = palette_rgba("viridis")[np.repeat(np.repeat(idx, 3, axis=0), 3, axis=1)]
    np.testing.assert_array_equal(out, want)
    # a view twice as wide as the data: the data on the left half, the page's background right
    out = plot_pixels(one_layer(idx, extent), look, ((-0.5, 2.5), (-0.5, 7.5)), (3, 8), WHITE, lower=False)
    np.testing.assert_array_equal(out[:, :4], palette_rgba("viridis")[idx])
    assert (out[:, 4:] == WHITE).all()


def test_labels_keep_their_colour_and_zero_is_transparent():
    ids = np.zeros((4, 5), np.uint32)
    ids[1, 1:3] = 7
    ids[3, 4] = 4_000_000_000  # any uint32
    colours = label_rgba([7, 4_000_000_000, 7])
    assert (colours[0] == colours[2]).all() and not (colours[0] == colours[1]).all()
    # distinct ids get distinct colours (not a palette that repeats every few ids)
    many = label_rgba(np.arange(1, 2001))
    assert len({tuple(c) for c in many}) > 1990
    idx = np.full((4, 5), 100, np.uint8)
    extent = ((-0.5, 3.5), (-0.5, 4.5))
    look = Look(palette_rgba("gray"))
    under = plot_pixels(one_layer(idx, extent), look, extent, (4, 5), WHITE, lower=False)
    labels = ({"extent": [[-0.5, 3.5], [-0.5, 4.5]]}, ids)
    out = plot_pixels(one_layer(idx, extent), look, extent, (4, 5), WHITE, lower=False, labels=labels, opacity=0.4)
    zero = ids == 0
    np.testing.assert_array_equal(out[zero], under[zero])  # 0: no label, the image as it is
    a = 102  # floor(0.4 * 255 + 0.5)
    for iy, ix in zip(*np.nonzero(~zero)):
        c = label_rgba(ids[iy, ix]).astype(int)
        want = (under[iy, ix, :3].astype(int) * (255 - a) + c[:3] * a + 127) // 255
        np.testing.assert_array_equal(out[iy, ix, :3], want)
    # compacted for the wire and back
    index, table = compact_labels(ids)
    assert index.dtype == np.uint8 and table.dtype == np.uint32
    np.testing.assert_array_equal(table[index], ids)


def test_compacted_labels_take_the_smallest_index_type():
    for n, kind in ((200, np.uint8), (3000, np.uint16), (70_000, np.uint32)):
        ids = np.random.default_rng(n).permutation(np.arange(n, dtype=np.int64) * 97 + 5).reshape(-1, 10)
        index, table = compact_labels(ids)
        assert index.dtype == kind
        np.testing.assert_array_equal(table[index], ids)
    with pytest.raises(ConfigError, match="label ids"):
        compact_labels(np.array([[-1, 2]]))


def test_a_colour_bar_runs_from_the_top_of_the_range_down():
    table = palette_rgba("viridis")
    bar = bar_pixels(table, 255, 3)
    assert bar.shape == (255, 3, 4)
    np.testing.assert_array_equal(bar[:, 0], table[255:0:-1])  # one row per colour, top = 255
    np.testing.assert_array_equal(bar[:, 0], bar[:, 2])


def test_snapshot_is_the_canvas_rendered_in_the_kernel(cube, tmp_path):
    ds, truth = cube
    with ds.tse.explore(width=256, height=256, stats=False) as ex:
        frame = ex.controller.wait(timeout=30)
        png = ex.snapshot(tmp_path / "snap.png")
        assert (tmp_path / "snap.png").read_bytes() == png
        image = from_png(png)
        m = ex.canvas.margins
        # the canvas: plot, margins and one colour bar
        assert image.shape == (256 + m["top"] + m["bottom"], 256 + m["left"] + m["right"] + m["colorbar"], 4)
        # the plot area: frame 0 of the cube in viridis over its robust range, one data pixel
        # two screen pixels wide, y upwards; the view is the whole 128 x 128 plane
        plot = image[m["top"]:m["top"] + 256, m["left"]:m["left"] + 256]
        want = palette_rgba("viridis")[to_uint8(truth[0], frame.clim)][::-1]
        np.testing.assert_array_equal(plot, np.repeat(np.repeat(want, 2, axis=0), 2, axis=1))
        # the colour bar beside it: the colormap over the range in use, top = the maximum
        x0 = m["left"] + 256 + 12
        np.testing.assert_array_equal(image[m["top"]:m["top"] + 256, x0 + 5], bar_pixels(palette_rgba("viridis"), 256, 1)[:, 0])
        # a display range picked in the browser shows in the snapshot (the browser's arithmetic)
        ex.canvas.clim = [float(np.percentile(truth[0], 30)), float(np.percentile(truth[0], 60))]
        assert not np.array_equal(from_png(ex.snapshot()), image)


def test_the_notebook_keeps_a_png_of_the_explorer(cube):
    ds, _ = cube
    with ds.tse.explore(width=200, height=160, stats=False) as ex:
        bundle = ex._repr_mimebundle_()
        assert "application/vnd.jupyter.widget-view+json" in bundle
        png = base64.b64decode(bundle["image/png"])
        np.testing.assert_array_equal(from_png(png), from_png(ex.snapshot()))
        assert ex.canvas.poster == png  # in the widget's saved state too


@pytest.mark.parametrize("suffix", [".gif", ".mp4"])
def test_a_movie_has_one_frame_per_step_in_order(cube, tmp_path, suffix):
    if suffix == ".mp4":
        pytest.importorskip("imageio_ffmpeg")
    import imageio.v3 as iio

    from tsexplore.ui._render import render_canvas

    ds, truth = cube
    with ds.tse.explore(width=160, height=160, stats=False) as ex:
        ex.controller.wait(timeout=30)
        steps = list(range(2, 20, 3))
        path = ex.movie(tmp_path / f"scrub{suffix}", dim="time", fps=8, start=2, stop=20, step=3, progress=False)
        frames = iio.imread(path, index=None)
        assert frames.shape[0] == len(steps)
        # each frame is (up to GIF's 256 colours, or the video codec's loss) the canvas at its
        # time step, rendered here from a read of its own: closer to it than to any other step
        renders = [render_canvas(ex.canvas, picture=ex._render_frame({"time": i}, 30)[0])[..., :3].astype(float)
                   for i in steps]
        h, w = renders[0].shape[:2]
        for k in range(len(steps)):
            dist = [np.abs(frames[k, :h, :w].astype(float) - r).mean() for r in renders]
            assert int(np.argmin(dist)) == k, dist
        with pytest.raises(ConfigError, match="gif or .mp4"):
            ex.movie(tmp_path / "x.avi")
        with pytest.raises(ConfigError, match="slider dim"):
            ex.movie(tmp_path / "x.gif", dim="y")


# -- the label layer ---------------------------------------------------------------------------------


@pytest.fixture
def labelled(cube):
    """The cube with a segmentation of it (warm regions, numbered per time step by scipy)."""
    from scipy import ndimage

    ds, truth = cube
    values = truth[...]
    ids = np.stack([ndimage.label(v > np.percentile(v, 80))[0] for v in values]).astype(np.uint32) * 3
    ds = ds.assign(seg=(("time", "y", "x"), ids, {"long_name": "warm-region segmentation"}))
    return ds, values, ids


def test_labels_travel_as_ids_under_each_frame(labelled):
    ds, values, ids = labelled
    with tse.explore(ds, width=128, height=128, stats=False) as ex:
        assert ex.var_picker.value == "temp" and ex.labels == "seg"  # found by its attributes
        assert ex.opacity.layout.display == "flex"
        ex.controller.wait(timeout=30)
        for t in (0, 9):
            ex.sliders["time"].value = t
            frame = ex.controller.wait(timeout=30)
            deadline = __import__("time").monotonic() + 10
            while (ex.canvas.label_layer() is None or ex.canvas.label_layer()[0]["at"] != f"time={t}"):
                assert __import__("time").monotonic() < deadline, "no label layer for the new slice"
                __import__("time").sleep(0.02)
            meta, shown = ex.canvas.label_layer()
            # the ids of the very pixels the frame shows (one per data pixel here)
            assert shown.dtype.kind == "u" and meta["extent"] == [list(e) for e in frame.extent]
            np.testing.assert_array_equal(shown, ids[t])
        # the browser gets compact indices into a table of the ids
        sent = []
        ex.canvas.send = lambda content, buffers=None: sent.append((content, buffers))
        ex.canvas._on_browser(ex.canvas, {"type": "ready", "y": [-0.5, 127.5], "x": [-0.5, 127.5],
                                          "height": 128, "width": 128, "ny": 128, "nx": 128}, [])
        (content, buffers), = [(c, b) for c, b in sent if c.get("type") == "labels"]
        index = np.frombuffer(buffers[0], dtype=content["dtype"]).reshape(content["shape"])
        table = np.frombuffer(buffers[1], np.uint32)
        np.testing.assert_array_equal(table[index], ids[9])
        # the opacity control sets the canvas's; the snapshot blends the labels in
        ex.label_opacity = 0.8
        assert ex.canvas.label_opacity == pytest.approx(0.8)
        plain = tse.explore(ds, labels=None, width=128, height=128, stats=False)
        try:
            plain.sliders["time"].value = 9
            plain.controller.wait(timeout=30)
            assert plain.labels is None
            a, b = from_png(ex.snapshot()), from_png(plain.snapshot())
            m = ex.canvas.margins
            top, left = m["top"], m["left"]
            region = (slice(top, top + 128), slice(left, left + 128))
            differs = np.any(a[region] != b[region], axis=-1)[::-1]  # rows from y = 0 up
            np.testing.assert_array_equal(differs, ids[9] != 0)  # 0 is transparent
        finally:
            plain.close()


def test_labels_that_do_not_fit_say_why(labelled):
    ds, _, ids = labelled
    with pytest.raises(ConfigError, match="integer ids"):
        tse.explore(ds, labels=ds.temp.rename("other"), stats=False)
    with pytest.raises(ConfigError, match="steps"):
        tse.explore(ds, labels=ds.seg.isel(x=slice(0, 10)).rename("short"), stats=False)
    with pytest.raises(ConfigError, match="not a variable"):
        tse.explore(ds, labels="nope", stats=False)
