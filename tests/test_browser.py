"""Tutorial 01 in JupyterLab, driven by headless Debian Chromium through Playwright.

Runs every cell (plus one appended: an Explorer on a pyramid whose levels count their chunk
reads), then checks from the canvases' own pixels against the store and the colour table:
the cube Explorer shows the slice the scrub cell left it at; its slider (in the canvas) moves to
the next slice, and the browser sends back only the move; a colormap picked in the browser
repaints there, without a frame from the kernel; a wheel zoom and a drag make the kernel read
exactly the region on screen; the pyramid's overview is read from the level that fits the
screen (chunk reads per level) and painted coarse first, then in tiles; nothing overlaps at
1280 and 1920 px wide and the StatsPanel's numbers move. The contrast histogram the browser draws
is NumPy's of the frame, its fields show the range in use and a dragged handle sets the kernel's
range; the cells' composite is the blend of its channels (``composite_rgba``), a channel turned
off is blended again in the browser, and a shift-drag streams the region's statistics, equal
to NumPy's. The Explorers the tutorial adds: the restored view (``ex.state``) paints exactly
the pixels of the one it was saved from; ``ex.snapshot()`` (rendered in the kernel) has the
canvas's pixels in the plot and the colour bar; in JupyterLab Light and Dark the axis text
has at least WCAG AA contrast (4.5 : 1) against the background, read from the canvas, and the
kernel's bokeh plots take the dark theme; the orthogonal zx plane is the array's slice; the
cells' label layer is blended over the composite with each id's colour (0 transparent) and
the readout names the id under the pointer. The notebook saved with its widget state and
converted by nbconvert holds the Explorer's PNG; no request leaves 127.0.0.1. Screenshots go to
``test-artifacts/browser/``. Without chromium this skips locally and FAILS under CI (``CI=true``).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest

from tsexplore.testing.lab import CANVAS_STATE as CANVAS_STATE_JS
from tsexplore.testing.lab import canvas_colours

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
NUMBERS = "() => [...document.querySelectorAll('.tsexplore-stats-numbers')].map(e => e.textContent)"
# canvases in the tutorial, in order: the cube, the petabyte, the pyramid, the cells (then the
# orthogonal planes, labels, projection and restored view: found by their uids; the appended one
# is last)
CUBE, CELLS = 0, 3
#: WCAG AA: text against its background
MIN_CONTRAST = 4.5
COUNTED_CELL = (
    "import json\n"
    "from tsexplore.pyramid import open_levels\n"
    "from tsexplore.testing.wrappers import CountingSource\n"
    "lv = open_levels({path!r}, wrap=CountingSource)  # counts the chunk reads of every level\n"
    "exp = tse.explore(lv[0], levels=lv, width=256, height=256, stats=False)\n"
    "exp"
)


# holoviews plots as notebook 03 draws them: Panel's stylesheets must come inline (no CDN)
OFFLINE_CELL = (
    "import holoviews as hv\n"
    "(hv.Image(np.random.default_rng(0).random((8, 8))).opts(colorbar=True, title='offline')\n"
    " + hv.Curve([1, 3, 2])).cols(2)"
)


def _requests(text: str) -> int:
    found = [re.search(rf"{k}\s+(\d+)", text) for k in ("hits", "misses", "joined")]
    assert all(found), f"no hits/misses/joined counters in the stats panel's text: {text!r}"
    return sum(int(m.group(1)) for m in found if m)


@pytest.fixture(scope="module")
def browser_ready():
    pytest.importorskip("playwright")
    from tsexplore.testing.lab import find_chromium

    if find_chromium() is None:
        msg = "chromium is not installed (apt-get install chromium)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {msg}")
        pytest.skip(msg)


def _colours(indices, cmap="viridis"):
    from tsexplore.ui.canvas import palette_rgba

    return palette_rgba(cmap)[indices]


def _wait_canvas(page, n, test, timeout=60_000):
    """Until the n-th canvas's last frame satisfies ``test`` (a JS expression of ``m``, its meta)."""
    from tsexplore.testing.lab import CANVAS_STATE

    page.wait_for_function(f"() => {{ const s = ({CANVAS_STATE})({n}); if (!s) return false; "
                           f"const m = s.last; return !!({test}); }}", polling=100, timeout=timeout)
    return page.evaluate(CANVAS_STATE, n)


def _check_histogram(page, execute, truth):
    """The cube's histogram (as the browser has it) is NumPy's of the frame on screen; its
    fields show the range in use; dragging the max handle fixes that range in the kernel."""
    from tsexplore.controller import log_counts

    state = page.evaluate(CANVAS_STATE_JS, CUBE)
    kernel = json.loads(execute(page, "f = ex.controller.frame\nprint(json.dumps({'clim': f.clim, "
                                      "'region': f.request.region, 'index': f.request.state.index('time')}))"))
    (y0, y1), (x0, x1) = kernel["region"]
    data = np.asarray(truth[kernel["index"], y0:y1, x0:x1])
    rng = state["hist"]["ranges"][0]
    counts = np.histogram(data[np.isfinite(data)], 256, rng)[0]
    np.testing.assert_array_equal(state["hist"]["bytes"], log_counts(counts))
    assert state["hist"]["max"] == [int(counts.max())]
    ds_ = state["dataset"]
    np.testing.assert_allclose([float(ds_["climLo"]), float(ds_["climHi"])], kernel["clim"])  # in use
    # drag the max handle a quarter of the histogram to the left
    hist = page.locator(".tse-canvas-hist-plot").nth(CUBE)
    hist.scroll_into_view_if_needed()
    box = hist.bounding_box()
    lo, hi = kernel["clim"]
    at = box["x"] + (hi - rng[0]) / (rng[1] - rng[0]) * box["width"]
    page.mouse.move(at, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(at - box["width"] / 4, box["y"] + box["height"] / 2, steps=4)
    page.mouse.up()
    page.wait_for_function(f"() => ({CANVAS_STATE_JS})({CUBE}).clim_display != null", polling=100)
    page.wait_for_timeout(300)
    state = page.evaluate(CANVAS_STATE_JS, CUBE)
    picked = state["clim_display"]
    assert picked[0] == pytest.approx(lo) and picked[1] < hi
    now = json.loads(execute(page, "print(json.dumps([ex.clim_mode.value, ex.canvas.clim, ex.clim_in_use()]))"))
    assert now[0] == "fixed" and now[1] == pytest.approx(picked) and now[2] == pytest.approx(picked)
    np.testing.assert_allclose([float(state["dataset"]["climLo"]), float(state["dataset"]["climHi"])], picked)


def _check_cells(page, execute, path):
    """The composite is the blend of the channels; a channel off is blended again in the
    browser; a shift-drag streams the region's mean/min/max, equal to NumPy's."""
    import zarr

    from tsexplore.controller import robust_range, to_uint8
    from tsexplore.ui._frames import composite_rgba

    truth = zarr.open_group(str(path), mode="r")["cells"][...]
    nt, nc, ny, nx = truth.shape
    execute(page, "ex4.canvas.roi_box = {}")  # the notebook's region box would cover pixels
    page.locator(".tse-canvas").nth(CELLS).scroll_into_view_if_needed()
    state = _wait_canvas(page, CELLS, "m.final && m.channels === 3")
    page.wait_for_timeout(400)
    state = page.evaluate(CANVAS_STATE_JS, CELLS)
    assert state["last"]["shape"] == [ny, nx]
    clims = state["last"]["clims"]
    for k in range(nc):
        assert clims[k] == pytest.approx(robust_range(truth[0, k]))
    idx = np.stack([to_uint8(truth[0, k], tuple(clims[k])) for k in range(nc)])
    full = [[-0.5, ny - 0.5], [-0.5, nx - 0.5]]
    want = composite_rgba(idx, state["channel_colors"], clims)
    np.testing.assert_array_equal(canvas_colours(page, CELLS, full, (ny, nx)), want)
    received = state["counts"]["received"]
    page.locator(".tse-canvas").nth(CELLS).locator(".tse-canvas-chip-on").nth(1).uncheck()
    page.wait_for_function(f"() => ({CANVAS_STATE_JS})({CELLS}).channel_on[1] === false", polling=100)
    page.wait_for_timeout(300)
    off = composite_rgba(idx, state["channel_colors"], clims, on=[True, False, True])
    np.testing.assert_array_equal(canvas_colours(page, CELLS, full, (ny, nx)), off)
    assert page.evaluate(CANVAS_STATE_JS, CELLS)["counts"]["received"] == received  # blended in the browser
    assert json.loads(execute(page, "print(json.dumps(ex4.canvas.channel_on))")) == [True, False, True]
    # shift-drag a region: its statistics stream in, equal to NumPy's
    canvas = page.locator(".tse-canvas canvas.tse-canvas-plot").nth(CELLS)
    box = canvas.bounding_box()
    left, top = box["x"] + 58, box["y"] + 24
    page.keyboard.down("Shift")
    page.mouse.move(left + 100, top + 80)
    page.mouse.down()
    page.mouse.move(left + 300, top + 250, steps=6)
    page.mouse.up()
    page.keyboard.up("Shift")
    out = json.loads(execute(page, "h = ex4.roi_handle\nr = h.result(timeout=120)\n"
                                   "print(json.dumps({'region': h.region, 'mean': r['mean'].values.tolist(), "
                                   "'min': r['min'].values.tolist(), 'max': r['max'].values.tolist(), "
                                   "'dims': list(r['mean'].dims)}))"))
    (y0, y1), (x0, x1) = out["region"]
    assert out["dims"] == ["time", "c"] and 10 < y1 - y0 < ny and 10 < x1 - x0 < nx
    block = truth[:, :, y0:y1, x0:x1].astype(np.float64)
    np.testing.assert_allclose(out["mean"], block.mean(axis=(2, 3)), rtol=1e-12)
    np.testing.assert_array_equal(out["min"], block.min(axis=(2, 3)))
    np.testing.assert_array_equal(out["max"], block.max(axis=(2, 3)))
    page.screenshot(path=str(ARTIFACTS / "01_cells.png"))


def _index(page, execute, widget):
    """The page index of the canvas of ``widget`` (a kernel expression)."""
    from tsexplore.testing.lab import canvas_index

    uid = execute(page, f"print({widget}._tse_uid)").strip()
    n = canvas_index(page, uid)
    assert n >= 0, f"no canvas of {widget} ({uid}) in the page"
    return n


def _kernel_png(page, execute, code):
    import base64

    from tsexplore.ui._render import from_png

    text = execute(page, f"import base64\nprint(base64.b64encode({code}).decode())")
    return from_png(base64.b64decode(text.strip()))


def _check_restored(page, execute):
    """``tse.explore(ds, state=ex.state)`` paints exactly the pixels of ``ex``."""
    from tsexplore.testing.lab import canvas_pixels

    a, b = _index(page, execute, "ex.canvas"), _index(page, execute, "restored.canvas")
    for n in (a, b):
        page.locator(".tse-canvas").nth(n).scroll_into_view_if_needed()
        _wait_canvas(page, n, "m.label?.startsWith('temp · time=7 ') && m.final")
    page.wait_for_timeout(300)
    np.testing.assert_array_equal(canvas_pixels(page, b), canvas_pixels(page, a))
    return a


def _check_snapshot(page, execute, n):
    """``ex.snapshot()`` (the kernel's rendering) has the canvas's pixels: the plot and the
    colour bar exactly, the page's background around them; the text is Pillow's, not the
    browser's font."""
    from tsexplore.testing.lab import canvas_pixels

    shown = canvas_pixels(page, n)
    snap = _kernel_png(page, execute, "ex.snapshot()")
    assert snap.shape == shown.shape
    m = json.loads(execute(page, "print(json.dumps(ex.canvas.margins))"))
    top, left, h, w = m["top"], m["left"], 420, 560
    np.testing.assert_array_equal(snap[top:top + h, left:left + w], shown[top:top + h, left:left + w])
    bar = left + w + 12
    np.testing.assert_array_equal(snap[top:top + h, bar:bar + 12], shown[top:top + h, bar:bar + 12])
    same = (snap == shown).all(axis=-1).mean()
    assert same > 0.9, f"only {same:.1%} of the snapshot's pixels are the canvas's"
    from tsexplore.ui._render import to_png

    (ARTIFACTS / "01_snapshot.png").write_bytes(to_png(snap))


def _luminance(rgb):
    c = np.asarray(rgb, dtype=np.float64) / 255
    c = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return c @ [0.2126, 0.7152, 0.0722]


def _text_contrast(region):
    """WCAG contrast of the strongest text pixel against the commonest (the background)."""
    rgb = region[..., :3].reshape(-1, 3)
    colours, counts = np.unique(rgb, axis=0, return_counts=True)
    bg = _luminance(colours[np.argmax(counts)])
    lum = _luminance(rgb)
    hi, lo = np.maximum(lum, bg), np.minimum(lum, bg)
    return float(((hi + 0.05) / (lo + 0.05)).max()), colours[np.argmax(counts)]


def _axis_contrast(page, n):
    """The contrast of the x axis' labels and name (under the plot) against the canvas's
    background, from the canvas's pixels."""
    from tsexplore.testing.lab import canvas_pixels

    pixels = canvas_pixels(page, n)
    left, top, w, h = (int(v) for v in page.evaluate(
        "(n) => document.querySelectorAll('.tse-canvas')[n].dataset.plot", n).split(","))
    return _text_contrast(pixels[top + h + 6:, left:left + w])


def _check_themes(page, execute, n):
    """Light and dark: the axis text has at least WCAG AA contrast against the canvas's
    background; the kernel learns the theme and its bokeh plots follow it."""
    from tsexplore.ui.theme import bokeh_theme

    canvas = page.locator(".tse-canvas").nth(n)
    canvas.scroll_into_view_if_needed()
    page.wait_for_function(f"() => document.querySelectorAll('.tse-canvas')[{n}].dataset.theme === 'light'")
    ratio, bg = _axis_contrast(page, n)
    assert ratio >= MIN_CONTRAST and bg.min() > 200, (ratio, bg)
    measured = {"light": {"contrast": round(ratio, 2), "background": bg.tolist()}}
    page.screenshot(path=str(ARTIFACTS / "theme_light.png"))
    page.evaluate("() => { window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'}); }")
    page.wait_for_function(f"() => document.querySelectorAll('.tse-canvas')[{n}].dataset.theme === 'dark'",
                           timeout=30_000)
    page.wait_for_timeout(1500)  # the theme's stylesheet settles; the views draw again
    ratio, bg = _axis_contrast(page, n)
    assert ratio >= MIN_CONTRAST and bg.max() < 80, (ratio, bg)
    measured["dark"] = {"contrast": round(ratio, 2), "background": bg.tolist()}
    (ARTIFACTS / "theme_contrast.json").write_text(json.dumps(measured, indent=1))
    page.screenshot(path=str(ARTIFACTS / "theme_dark.png"))
    theme = json.loads(execute(page, "print(json.dumps(ex.canvas.theme))"))
    assert theme["dark"] is True
    want = bokeh_theme(theme)._json["attrs"]["Plot"]["background_fill_color"]
    fills = page.evaluate("() => [...(window.Bokeh?.documents ?? [])].flatMap(d => [...d.all_models])"
                          ".filter(m => m.type === 'Figure' || m.type === 'Plot').map(m => m.background_fill_color)")
    assert fills and want in fills, (want, fills[:8])  # the StatsPanel's plots are dark
    page.evaluate("() => { window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'}); }")
    page.wait_for_function(f"() => document.querySelectorAll('.tse-canvas')[{n}].dataset.theme === 'light'",
                           timeout=30_000)
    page.wait_for_timeout(800)


def _check_ortho(page, execute, truth):
    """The zx plane through y = 40 is the array's slice, in the Explorer's colours."""
    n = _index(page, execute, "ex5.ortho.planes['zx'].canvas")
    page.locator(".tse-canvas").nth(n).scroll_into_view_if_needed()
    state = _wait_canvas(page, n, "m.final && m.label?.includes('y=40')")
    page.wait_for_timeout(300)
    kernel = json.loads(execute(page, "f = ex5.ortho.planes['zx'].controller.frame\n"
                                      "print(json.dumps({'clim': f.clim, 'region': f.request.region, 'step': f.request.step}))"))
    assert kernel["step"] == [1, 1] and kernel["region"] == [[0, 32], [0, 128]]
    from tsexplore.controller import to_uint8

    want = _colours(to_uint8(truth[:, 40, :], kernel["clim"]))
    got = canvas_colours(page, n, [[-0.5, 31.5], [-0.5, 127.5]], (32, 128))
    cross = np.zeros((32, 128), bool)  # the crosshair (time 20, x 90) is drawn over the plane
    cross[20, :] = cross[:, 90] = True
    np.testing.assert_array_equal(got[~cross], want[~cross])
    assert (got[cross] != want[cross]).any(axis=-1).mean() > 0.5  # and it is there
    assert state["last"]["shape"] == [32, 128]


def _check_labels(page, execute, path):
    """The nuclei over the cells: each id's colour blended over the composite at the opacity
    set, 0 transparent; the readout names the id under the pointer."""
    import zarr

    from tsexplore.controller import to_uint8
    from tsexplore.ui._frames import composite_rgba
    from tsexplore.ui._render import blend, label_rgba

    n = _index(page, execute, "ex6.canvas")
    page.locator(".tse-canvas").nth(n).scroll_into_view_if_needed()
    page.wait_for_function(f"() => document.querySelectorAll('.tse-canvas')[{n}].dataset.labels !== ''",
                           polling=100, timeout=30_000)
    state = page.evaluate(CANVAS_STATE_JS, n)
    truth = zarr.open_group(str(path), mode="r")["cells"][0]
    nc, ny, nx = truth.shape
    ids = np.array(json.loads(execute(page, "print(json.dumps(nuclei[0].tolist()))")), dtype=np.uint32)
    clims = state["last"]["clims"]
    idx = np.stack([to_uint8(truth[k], tuple(clims[k])) for k in range(nc)])
    under = composite_rgba(idx, state["channel_colors"], clims)
    a = 128  # floor(0.5 * 255 + 0.5): the opacity's default
    want = under.copy()
    on = ids != 0
    want[on, :3] = blend(under[on, :3], label_rgba(ids[on])[:, :3], a)
    full = [[-0.5, ny - 0.5], [-0.5, nx - 0.5]]
    np.testing.assert_array_equal(canvas_colours(page, n, full, (ny, nx)), want)
    # the readout under the pointer: a pixel of a nucleus
    iy, ix = (int(v) for v in np.argwhere(on)[len(np.argwhere(on)) // 2])
    root = page.locator(".tse-canvas").nth(n)
    left, top, w, h = (int(v) for v in root.get_attribute("data-plot").split(","))
    v = state["view"]
    box = root.locator("canvas.tse-canvas-plot").bounding_box()
    px = box["x"] + left + (ix - v["x0"]) / (v["x1"] - v["x0"]) * w
    py = box["y"] + top + (v["y1"] - iy) / (v["y1"] - v["y0"]) * h
    page.mouse.move(px, py)
    page.wait_for_function(f"() => document.querySelectorAll('.tse-canvas')[{n}].dataset.hoverLabel === '{ids[iy, ix]}'",
                           timeout=10_000)
    assert f"label {ids[iy, ix]}" in root.locator(".tse-canvas-readout").inner_text()
    page.screenshot(path=str(ARTIFACTS / "01_labels.png"))


def _check_saved_notebook(page, execute, notebook):
    """Saved with its widget state, converted by nbconvert: the HTML holds the Explorer's
    picture (its canvas's poster, the kernel's snapshot of what the canvas shows); without the
    widget state, the PNG of the output itself is the image nbconvert shows."""
    import base64
    import re

    import nbformat
    from nbconvert import HTMLExporter

    from tsexplore.ui._render import from_png

    execute(page, "ex.settle(30)")
    page.wait_for_timeout(2500)  # the poster is made a moment after the picture stops changing
    snap = _kernel_png(page, execute, "ex.canvas.poster")
    np.testing.assert_array_equal(snap, _kernel_png(page, execute, "ex.snapshot()"))
    before = notebook.stat().st_mtime
    saved = page.evaluate("() => Promise.race([window.jupyterapp.commands.execute('docmanager:save')"
                          ".then(() => 'saved', (e) => 'failed: ' + e), new Promise((r) => setTimeout(() => r("
                          "'no answer in 60 s: ' + document.querySelector('.jp-Dialog')?.innerText), 60000))])")
    assert saved == "saved", saved
    deadline = time.monotonic() + 60
    while notebook.stat().st_mtime == before or "widget-state+json" not in notebook.read_text():
        assert time.monotonic() < deadline, "the notebook was not saved with its widget state"
        time.sleep(0.25)
    nb = nbformat.read(notebook, as_version=4)
    html, _ = HTMLExporter().from_notebook_node(nb)
    found = re.search(r'<script type="application/vnd.jupyter.widget-state\+json">(.*?)</script>', html, re.S)
    assert found, "no widget state in the HTML"
    models = json.loads(found.group(1))["state"].values()
    pngs = [from_png(base64.b64decode(b["data"])) for m in models for b in m.get("buffers", [])
            if b.get("path") == ["poster"] and b.get("data")]
    assert any(p.shape == snap.shape and np.array_equal(p, snap) for p in pngs), \
        f"{len(pngs)} posters in the HTML's widget state, none is the Explorer's picture"
    del nb.metadata["widgets"]
    html, _ = HTMLExporter().from_notebook_node(nb)
    assert re.search(r'<img[^>]*src="data:image/png;base64,iVBORw0KGgo', html), "no PNG of the Explorer without widget state"


def _layout(page, width):
    from tsexplore.testing.lab import OVERLAPS

    page.set_viewport_size({"width": width, "height": 1100})
    page.wait_for_timeout(700)
    found = page.evaluate(OVERLAPS, ".tsexplore-explorer")
    page.screenshot(path=str(ARTIFACTS / f"01_explorer_{width}.png"))
    toggle = page.evaluate("() => [...document.querySelector('.tsexplore-explorer .widget-toggle-buttons')"
                           ".querySelectorAll('button')].map(b => b.getBoundingClientRect().top)")
    return found, toggle


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_tutorial_01_in_jupyterlab(browser_ready, tmp_path):
    import nbformat
    import xarray as xr
    import zarr

    import tsexplore as tse
    from tsexplore.controller import robust_range, to_uint8
    from tsexplore.testing.lab import (
        CANVAS_STATE,
        STREAM_TEXT,
        canvas_colours,
        chromium,
        execute,
        jupyterlab,
        run_all_cells,
    )

    nb = nbformat.read(ROOT / "notebooks" / "01_explore.ipynb", as_version=4)
    counted = tmp_path / "counted_pyramid.zarr"
    plane = tse.synthetic((1024, 1024), chunks=(64, 64), dims=("y", "x"))["data"]
    tse.pyramid(plane, counted, min_size=64, chunks={"y": 64, "x": 64}, progress=False)
    tse.close()
    nb.cells.append(nbformat.v4.new_code_cell(COUNTED_CELL.format(path=str(counted))))
    nb.cells.append(nbformat.v4.new_code_cell(OFFLINE_CELL))
    nbformat.write(nb, tmp_path / "01_explore.ipynb")
    data = tmp_path / "data"
    cube = tse.sample_data("cube", data / "cube.zarr", size="small", progress=False)
    truth = zarr.open_group(str(cube), mode="r")["temp"]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    env = {"TSEXPLORE_SAMPLE_SIZE": "small", "TSEXPLORE_DATA_DIR": str(data)}
    t0 = time.monotonic()
    sent_back = {"on": False, "bytes": 0}
    errors: list[str] = []

    def on_ws(ws):
        if "/channels" in ws.url:
            ws.on("framesent", lambda p: sent_back.__setitem__(
                "bytes", sent_back["bytes"] + (len(p) if sent_back["on"] else 0)))

    full = [[-0.5, 127.5], [-0.5, 127.5]]
    refused: list[str] = []
    save_state = {"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True}}
    with jupyterlab(tmp_path, env, settings=save_state) as (url, token), \
            chromium(tmp_path / "profile", refused=refused) as page:
        page.on("websocket", on_ws)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{url}/lab/tree/01_explore.ipynb?token={token}")
        run_all_cells(page, timeout_ms=240_000)
        print(f"all cells ran after {time.monotonic() - t0:.1f} s")
        # what the tutorial prints (this test is the one run of notebook 01 top to bottom):
        # the petabyte array's size, the StatsPanel's ticks, the composite's channels
        text = page.evaluate(STREAM_TEXT)
        assert "PB," in text and "ticks" in text, text[-2000:]
        assert "channels ['DAPI', 'GFP', 'RFP']" in text, text[-2000:]
        assert "label layer: nuclei" in text and "4/4 tiles, complete" in text and "snapshot:" in text, text[-2000:]
        cube_n = _check_restored(page, execute)
        _check_snapshot(page, execute, cube_n)
        _check_themes(page, execute, cube_n)
        _check_ortho(page, execute, truth)
        _check_labels(page, execute, data / "cells.zarr")
        print(f"restored view, snapshot, themes, orthogonal planes, labels checked after {time.monotonic() - t0:.1f} s")

        print(f"printed text checked after {time.monotonic() - t0:.1f} s")
        # the scrub cell left the cube at time=7: the canvas shows truth[7] in viridis
        page.locator(".tse-canvas").first.scroll_into_view_if_needed()
        print(f"scrolled to the first canvas after {time.monotonic() - t0:.1f} s")
        _wait_canvas(page, CUBE, "m.label?.startsWith('temp · time=7 ') && m.final")
        print(f"first canvas painted after {time.monotonic() - t0:.1f} s")
        want = to_uint8(truth[7], robust_range(truth[7]))
        print(f"want computed after {time.monotonic() - t0:.1f} s")
        np.testing.assert_array_equal(canvas_colours(page, CUBE, full, (128, 128)), _colours(want))

        print(f"first canvas checked after {time.monotonic() - t0:.1f} s")
        # layout: nothing overlaps, the range toggle is one row, at 1280 and 1920 px
        for width in (1280, 1920):
            found, toggle = _layout(page, width)
            assert found["count"] >= 12, found
            assert found["overlaps"] == [], f"{width} px: {found['overlaps']}"
            assert len(set(toggle)) == 1, f"{width} px: the range toggle's buttons at {toggle}"
        page.set_viewport_size({"width": 1600, "height": 1200})
        page.wait_for_timeout(300)
        numbers_before = page.evaluate(NUMBERS)[0]
        page.screenshot(path=str(ARTIFACTS / "01_before_slider.png"))

        print(f"layout checked after {time.monotonic() - t0:.1f} s")
        # the slider in the canvas: ArrowRight -> slice 8; only the move goes back
        handle = page.locator(".tse-canvas-range").first
        handle.scroll_into_view_if_needed()
        handle.focus()
        sent_back["on"] = True
        handle.press("ArrowRight")
        state = _wait_canvas(page, CUBE, "m.label?.startsWith('temp · time=8 ') && m.final", 90_000)
        page.wait_for_timeout(800)  # a few StatsPanel ticks
        sent_back["on"] = False
        numbers_after = page.evaluate(NUMBERS)[0]
        want = to_uint8(truth[8], robust_range(truth[8]))
        assert state["last"]["shape"] == [128, 128] and state["last"]["index"] == 8
        np.testing.assert_array_equal(canvas_colours(page, CUBE, full, (128, 128)), _colours(want))

        print(f"slider checked after {time.monotonic() - t0:.1f} s")
        # a colormap picked in the browser: recoloured there, no frame from the kernel
        received = state["counts"]["received"]
        page.locator(".tsexplore-explorer").first.locator("select").nth(3).select_option("magma")
        page.wait_for_function(f"() => ({CANVAS_STATE})({CUBE}).cmap === 'magma'", polling=100)
        page.wait_for_timeout(300)
        np.testing.assert_array_equal(canvas_colours(page, CUBE, full, (128, 128)), _colours(want, "magma"))
        assert page.evaluate(CANVAS_STATE, CUBE)["counts"]["received"] == received

        print(f"colormap checked after {time.monotonic() - t0:.1f} s")
        # wheel zoom, then drag: the kernel reads exactly the region on screen
        canvas = page.locator(".tse-canvas canvas.tse-canvas-plot").first
        box = canvas.bounding_box()
        left, top = box["x"] + 58, box["y"] + 24
        gen = state["last"]["gen"]
        page.mouse.move(left + 280, top + 210)
        page.mouse.wheel(0, -600)
        state = _wait_canvas(page, CUBE, f"m.gen > {gen} && m.final")
        page.mouse.move(left + 300, top + 200)
        page.mouse.down()
        page.mouse.move(left + 260, top + 170, steps=5)
        page.mouse.up()
        page.wait_for_timeout(400)
        state = _wait_canvas(page, CUBE, f"m.gen > {state['last']['gen']} && m.final")
        page.wait_for_timeout(300)
        state = page.evaluate(CANVAS_STATE, CUBE)
        kernel = json.loads(execute(page, "f = ex.controller.frame\nprint(json.dumps({'region': f.request.region, "
                                          "'y': ex.controller.state.y_range, 'x': ex.controller.state.x_range, "
                                          "'clim': f.clim, 'gen': f.generation, 'step': f.request.step}))"))
        v = state["view"]
        np.testing.assert_allclose([kernel["y"], kernel["x"]], [[v["y0"], v["y1"]], [v["x0"], v["x1"]]], atol=1e-9)
        region = [[max(0, int(np.floor(v["y0"] + 0.5))), min(128, int(np.ceil(v["y1"] + 0.5)))],
                  [max(0, int(np.floor(v["x0"] + 0.5))), min(128, int(np.ceil(v["x1"] + 0.5)))]]
        assert kernel["region"] == region and kernel["step"] == [1, 1]
        assert region[0][1] - region[0][0] < 100 and region[1][1] - region[1][0] < 100  # zoomed in
        (y0, y1), (x0, x1) = region
        shown = to_uint8(truth[8, y0:y1, x0:x1], kernel["clim"])
        extent = [[y0 - 0.5, y1 - 0.5], [x0 - 0.5, x1 - 0.5]]
        inner = (slice(1, -1), slice(1, -1))  # the edge pixels may be cut by the plot's border
        np.testing.assert_array_equal(canvas_colours(page, CUBE, extent, shown.shape)[inner],
                                      _colours(shown, "magma")[inner])
        page.screenshot(path=str(ARTIFACTS / "01_after_slider.png"))

        print(f"zoom checked after {time.monotonic() - t0:.1f} s")
        _check_histogram(page, execute, truth)
        print(f"histogram checked after {time.monotonic() - t0:.1f} s")
        _check_cells(page, execute, data / "cells.zarr")
        print(f"cells checked after {time.monotonic() - t0:.1f} s")
        # the pyramid: 1024^2 on 256^2 pixels reads level 2 (16 chunks), level 3 (4) first
        COUNTED = _index(page, execute, "exp.canvas")
        state = _wait_canvas(page, COUNTED, "m.final")
        reads = json.loads(execute(page, "print(json.dumps(lv.chunk_reads()))"))
        kernel = json.loads(execute(page, "f = exp.controller.frame\n"
                                          "print(json.dumps({'level': f.level, 'clim': f.clim}))"))
        assert reads == [0, 0, 16, 4, 0] and kernel["level"] == 2
        modes = execute(page, "print(json.dumps([m['mode'] for m, _ in exp.canvas.picture()]))")
        assert json.loads(modes) == ["base"] + ["tile"] * 16
        level2 = xr.open_zarr(counted, group="2")["data"].values
        shown = to_uint8(level2, kernel["clim"])
        np.testing.assert_array_equal(canvas_colours(page, COUNTED, [[-0.5, 1023.5], [-0.5, 1023.5]], (256, 256)),
                                      _colours(shown))
        page.locator(".tse-canvas").nth(COUNTED).scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "01_pyramid.png"))
        _check_saved_notebook(page, execute, tmp_path / "01_explore.ipynb")
    print(f"tutorial 01 browser test: {time.monotonic() - t0:.1f} s")
    # the browser sent back the slider move, not the image (128 x 128 = 16 kB) nor echoes of
    # the StatsPanel's streamed rows and auto-ranges
    assert sent_back["bytes"] < 6000, f"{sent_back['bytes']} bytes sent back to the kernel"
    # the stats panel's numbers moved: the slider's chunk requests were counted
    assert numbers_after != numbers_before
    assert _requests(numbers_after) >= _requests(numbers_before) + 4
    assert not errors, errors
    assert refused == [], f"requests that left 127.0.0.1 (a notebook must work offline): {refused[:10]}"
