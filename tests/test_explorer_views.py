"""The Explorer's views beyond one plane, headless: orthogonal planes through a crosshair,
projections streamed through tse.reduce, and the saved view (``ex.state``) restored."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("anywidget")
zarr = pytest.importorskip("zarr")

import tsexplore as tse  # noqa: E402
from tsexplore.controller import to_uint8  # noqa: E402
from tsexplore.errors import ConfigError  # noqa: E402


def wait_for(cond, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def browser(canvas, **content):
    """A message from a canvas's browser side, as the comm delivers it."""
    canvas._on_browser(canvas, content, [])


@pytest.fixture
def cube(small_cube):
    ds = tse.open_dataset(small_cube)
    truth = zarr.open_group(str(small_cube), mode="r")["temp"][...]
    return ds, truth


def side_frame(ortho, name, **at):
    """The newest frame of a side plane once it shows the plane at ``at``."""
    ctl = ortho.planes[name].controller
    wait_for(lambda: ctl.frame is not None and all(ctl.frame.request.state.index(d) == i for d, i in at.items())
             and ctl.frame.generation == ctl.generation, what=f"{name} at {at}")
    return ctl.frame


# -- orthogonal planes -----------------------------------------------------------------------------


def test_orthogonal_planes_are_the_arrays_slices_through_the_crosshair(cube):
    ds, truth = cube  # time x y x: 32 x 128 x 128
    with tse.explore(ds, ortho=True, width=256, height=256, stats=False) as ex:
        ortho = ex.ortho
        assert ortho.z == "time" and ortho.point == {"time": 0, "y": 64, "x": 64}
        assert ex.clim_mode.value == "fixed"  # one colour range for the three planes
        zy = side_frame(ortho, "zy", x=64)
        zx = side_frame(ortho, "zx", y=64)
        # each plane at one sample per data pixel (the planes are larger than the data)
        np.testing.assert_array_equal(zy.data, truth[:, :, 64].T)  # y down the side, time across
        np.testing.assert_array_equal(zx.data, truth[:, 64, :])  # time up the side, x across
        clim = ex.clim_in_use()
        assert zy.clim == zx.clim == clim
        np.testing.assert_array_equal(zy.image, to_uint8(truth[:, :, 64].T, clim))
        # a click in the zx plane picks time and x: the Explorer's slider moves, zy reads the new x
        browser(ortho.planes["zx"].canvas, type="pixel", iy=20, ix=100, y=20.0, x=100.0)
        assert ortho.point == {"time": 20, "y": 64, "x": 100}
        assert ex.sliders["time"].value == 20
        frame = ex.controller.wait(timeout=30)
        np.testing.assert_array_equal(frame.data, truth[20])
        np.testing.assert_array_equal(side_frame(ortho, "zy", x=100).data, truth[:, :, 100].T)
        # a click in the Explorer's plane picks y and x; the crosshair is drawn on all three
        browser(ex.canvas, type="pixel", iy=30, ix=7, y=30.0, x=7.0)
        np.testing.assert_array_equal(side_frame(ortho, "zx", y=30).data, truth[:, 30, :])
        np.testing.assert_array_equal(side_frame(ortho, "zy", x=7).data, truth[:, :, 7].T)
        assert ex.canvas.crosshair == {"y": 30, "x": 7}
        assert ortho.planes["zy"].canvas.crosshair == {"y": 30, "x": 20}
        assert ortho.planes["zx"].canvas.crosshair == {"y": 20, "x": 7}
        # the slider moves the crosshair's time; the side planes need no read for it
        reads = [p.controller.counts["reads"] for p in ortho.planes.values()]
        ex.sliders["time"].value = 5
        ex.controller.wait(timeout=30)
        assert ortho.point["time"] == 5 and ortho.planes["zx"].canvas.crosshair == {"y": 5, "x": 7}
        assert [p.controller.counts["reads"] for p in ortho.planes.values()] == reads
        # a zoom in the Explorer's plane: zy shows the same y range, zx the same x range
        ex.set_view(y_range=(9.5, 41.5), x_range=(-0.5, 31.5))
        s = ex.controller.state
        zy_state, zx_state = ortho.planes["zy"].controller.state, ortho.planes["zx"].controller.state
        assert zy_state.y_range == pytest.approx(s.y_range) and zx_state.x_range == pytest.approx(s.x_range)
        zx = side_frame(ortho, "zx", y=30)
        (y0, y1), (x0, x1) = zx.request.region
        np.testing.assert_array_equal(zx.data, truth[y0:y1, 30, x0:x1])
        assert (x0, x1) == (0, 32)
        # a zoom in zy (the browser's view): the Explorer's y follows, its x by the same factor
        browser(ortho.planes["zy"].canvas, type="viewport", y=[20.0, 36.0], x=[-0.5, 15.5], height=256,
                width=ortho.planes["zy"].canvas.width, ny=128, nx=32)
        s = ex.controller.state
        assert s.y_range == pytest.approx((20.0, 36.0)) and s.x_range[1] - s.x_range[0] == pytest.approx(16.0)
        assert ortho.planes["zx"].controller.state.y_range == pytest.approx((-0.5, 15.5))  # time, shared
        # the snapshot shows the three planes as laid out
        from tsexplore.ui._render import from_png

        image = from_png(ex.snapshot())
        assert image.shape[1] > ex.canvas.outer_width + ortho.planes["zy"].canvas.outer_width
        ex.orthogonal(False)
        assert ex.ortho is None and ex.canvas.crosshair == {}
    assert not [t for t in __import__("threading").enumerate() if t.name.startswith("tsexplore-view")]


def test_orthogonal_views_need_three_dims(cube):
    ds, _ = cube
    with pytest.raises(ConfigError, match="3 or more dims"):
        tse.explore(ds.temp.isel(time=0), ortho=True, stats=False)
    with tse.explore(ds, stats=False) as ex, pytest.raises(ConfigError, match="not a slider dim"):
        ex.orthogonal(dim="y")


# -- projections ------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["max", "mean", "min"])
def test_a_projection_is_numpys_along_the_dim(cube, op):
    ds, truth = cube
    with tse.explore(ds, width=128, height=128, stats=False) as ex:
        proj = ex.project(op, dim="time")
        result = proj.result(timeout=120)
        want = getattr(np, op)(truth.astype(np.float64), axis=0)
        assert result.dims == ("y", "x") and len(proj.tiles) == 4  # 2 x 2 chunks of 64 x 64
        if op == "mean":  # accumulated in float64, returned as the variable's float32 (as xarray does)
            np.testing.assert_array_equal(result.values, want.astype(np.float32))
        else:
            np.testing.assert_array_equal(result.values, want)
        np.testing.assert_array_equal(result["x"].values, ds.x.values)
        # the picture is the projection: the last frame shows it all
        wait_for(lambda: ex.controller.frame is not None and "%" not in ex.controller.frame.request.state.__repr__()
                 and np.isfinite(ex.controller.frame.data).all(), what="the complete projection on screen")
        frame = ex.controller.frame
        np.testing.assert_allclose(frame.data, want, rtol=1e-6)
        assert ex.proj_op.value == op and ex.proj_dim.value == "time"
        assert ex.canvas.picture()[-1][0]["label"].startswith(f"temp · {op} over time")


def test_a_projection_fills_in_tile_by_tile_and_stops_when_the_view_moves():
    # 4 tiles of one chunk column each, every chunk 50 ms away: a projection takes a while
    ds = tse.synthetic((8, 64, 64), chunks=(4, 32, 32), latency=0.05, dims=("z", "y", "x"))
    truth = ds["data"].values
    tse.close()
    ds = tse.synthetic((8, 64, 64), chunks=(4, 32, 32), latency=0.05, dims=("z", "y", "x"))
    with tse.explore(ds, width=64, height=64, stats=False) as ex:
        ex.controller.wait(timeout=30)
        seen = []
        ex.controller.view.show_frame, show = (lambda f: (seen.append(np.isfinite(f.data).mean()), show(f))[1],
                                               ex.controller.view.show_frame)
        proj = ex.project("max")
        assert len(proj.tiles) == 4 and proj.dim == "z"
        result = proj.result(timeout=120)
        np.testing.assert_array_equal(result.values, truth.max(axis=0))
        wait_for(lambda: seen and seen[-1] == 1.0, what="the complete projection")
        partial = [f for f in seen if 0 < f < 1]
        assert partial and partial == sorted(partial)  # drawn as it refined, never going back
        # a new position of another dim would start it again; the projected dim's slider ends it
        again = ex.project("min")
        assert proj.done and not again.cancelled
        ex.sliders["z"].value = 3
        assert again.cancelled and ex.projection is None and ex.proj_op.value == ""
        frame = ex.controller.wait(timeout=30)
        np.testing.assert_array_equal(frame.data, truth[3])
        # the widget's control starts one
        ex.proj_op.value = "mean"
        assert ex.projection is not None and ex.projection.op == "mean"
        np.testing.assert_allclose(ex.projection.result(timeout=120).values, truth.astype(np.float64).mean(axis=0),
                                   rtol=1e-6)
    with tse.explore(ds, stats=False) as ex, pytest.raises(ConfigError, match="op in"):
        ex.project("median")


# -- a saved view -------------------------------------------------------------------------------------


def test_a_saved_view_round_trips_through_json_and_paints_the_same_picture(cube):
    import json

    from tsexplore.ui._render import from_png

    ds, truth = cube
    with tse.explore(ds, width=200, height=150, stats=False, cmap="magma") as ex:
        ex.sliders["time"].value = 11
        ex.set_view(y_range=(20.2, 70.7), x_range=(33.3, 99.9))
        ex.set_clim(14.0, 26.5)
        ex.controller.wait(timeout=30)
        state = json.loads(json.dumps(ex.state))  # plain JSON
        assert state["variable"] == "temp" and state["indices"] == {"time": 11}
        assert state["colormap"] == "magma" and state["ranges"] == {"mode": "fixed", "clims": [[14.0, 26.5]]}
        assert state["crosshair"] is None and state["projection"] is None
        with tse.explore(ds, state=state, stats=False) as again:
            a, b = ex.controller.wait(timeout=30), again.controller.wait(timeout=30)
            assert again.state == state
            assert a.request.region == b.request.region and a.request.step == b.request.step
            np.testing.assert_array_equal(a.image, b.image)
            assert again.canvas.current_view() == ex.canvas.current_view()
            np.testing.assert_array_equal(from_png(again.snapshot()), from_png(ex.snapshot()))


def test_a_saved_view_keeps_the_crosshair_projection_and_channels(tmp_path):
    import json

    cells = tse.sample_data("cells", tmp_path / "cells.zarr", size="small", progress=False)
    ds = tse.open_dataset(cells)
    with tse.explore(ds, ortho="time", width=128, height=96, stats=False) as ex:
        ex.ortho.move(time=4, y=30, x=40)
        ex.show_channel("GFP", False)
        ex.set_clim(300, 2000, channel=2)
        proj = ex.project("max", dim="time")
        proj.result(timeout=120)
        state = json.loads(json.dumps(ex.state))
        assert state["crosshair"] == {"dim": "time", "point": {"time": 4, "y": 30, "x": 40}}
        assert state["projection"] == {"op": "max", "dim": "time"} and state["channels"] == {
            "dim": "c", "on": [True, False, True]}
        assert state["ranges"]["clims"][2] == [300.0, 2000.0]
        with tse.explore(ds, state=state, stats=False) as again:
            assert again.ortho is not None and again.ortho.point == {"time": 4, "y": 30, "x": 40}
            assert again.canvas.channel_on == [True, False, True]
            np.testing.assert_array_equal(again.projection.result(timeout=120).values, proj.result().values)
            assert again.state == state
    with pytest.raises(ConfigError, match="version"):
        tse.explore(ds, state={"version": 99}, stats=False)


def test_a_projection_too_large_for_memory_is_refused():
    big = tse.synthetic((16, 2**18, 2**18), chunks=(1, 512, 512), dims=("z", "y", "x"))
    with tse.explore(big, stats=False, view={"y_range": (0, 512), "x_range": (0, 512)}) as ex:
        with pytest.raises(ConfigError, match="GiB"):
            ex.project("max")
        assert ex.projection is None
