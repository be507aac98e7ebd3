"""The image canvas on its own in JupyterLab, driven by headless Debian Chromium (Playwright).

Checked from the canvas's own pixels (``getImageData``) against the data and the colour
table computed here: the frame asked for is shown (raw, PNG and WebP); a colormap and a
display-range change repaint without a frame from the kernel; a drag and a wheel zoom make
the kernel receive the region now on screen; a click reports the pixel under the pointer; the
widget's keys move its slider and do not reach JupyterLab's command-mode shortcuts; on a plain
page (no JupyterLab theme) its colours follow the OS's light or dark scheme. The server
runs with the opt-in ``tsexplore.jupyter_server_ext`` (TCP_NODELAY on kernel websockets).
Without chromium this skips locally and FAILS under CI (``CI=true``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
NY, NX = 120, 160

CELLS = [
    "import json, numpy as np\n"
    "from tsexplore.ui.canvas import ImageCanvas\n"
    f"data = np.random.default_rng(0).normal(size=({NY}, {NX})).astype('float32')\n"
    "data[5, 7] = np.nan\n"
    f"c = ImageCanvas(shape=data.shape, width={NX}, height={NY},\n"
    "                slider={'dim': 'time', 'size': 4, 'interval': 50})\n"
    "c.observe(lambda ch: c.show_plane(data, clim=(-2, 2), label='vp ' + json.dumps(ch['new'])), 'viewport')\n"
    "c.on_pixel(lambda p: c.show_plane(data, clim=(-2, 2), label='px ' + json.dumps(p)))\n"
    "c.on_index(lambda i: c.show_plane(data + i, clim=(-2, 2), label=f'index {i}', index=i))\n"
    "c.show_plane(data, clim=(-2, 2), label='first')\n"
    "c",
    "print('a second cell, for the command-mode shortcuts to move to')",
]
STATE = "() => { const s = [...(window.__tse_canvases ?? [])][0]; return s ? {...s.counts, label: s.last?.label ?? null} : null; }"
PIXELS = """() => {
  const root = document.querySelector('.tse-canvas');
  const [l, t, w, h] = root.dataset.plot.split(',').map(Number);
  return Array.from(root.querySelector('canvas').getContext('2d').getImageData(l, t, w, h).data);
}"""
SET = "([name, value]) => { const s = [...window.__tse_canvases][0]; s.model.set(name, value); }"
EXECUTE = "(code) => { window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.requestExecute({code}); }"
LABEL = "() => document.querySelector('.tse-canvas')?.dataset.label ?? ''"


@pytest.fixture(scope="module")
def browser_ready():
    pytest.importorskip("playwright")
    pytest.importorskip("anywidget")
    from tsexplore.testing.lab import find_chromium

    if find_chromium() is None:
        msg = "chromium is not installed (apt-get install chromium)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {msg}")
        pytest.skip(msg)


def _expected(data, cmap, clim, display=None):
    from tsexplore.controller import to_uint8
    from tsexplore.ui._frames import compose_lut
    from tsexplore.ui.canvas import palette_rgba

    lut = compose_lut(palette_rgba(cmap), clim, display)
    return lut[to_uint8(data, clim)][::-1]  # y origin "lower": row 0 at the bottom


def _shown(page):
    return np.array(page.evaluate(PIXELS), dtype=np.uint8).reshape(NY, NX, 4)


def _wait_label(page, prefix, timeout=30_000):
    page.wait_for_function(f"() => ({LABEL})().startsWith({json.dumps(prefix)})", polling=50, timeout=timeout)
    return page.evaluate(LABEL)


def _viewport(label):
    vp = json.loads(label[len("vp "):])
    return vp["y"], vp["x"], vp["height"], vp["width"]


def _check_colour_scheme(context):
    """Outside JupyterLab (no --jp-* variables: VS Code without its own, Colab, a plain page)
    the canvas's colours follow the OS's light or dark scheme (``prefers-color-scheme``)."""
    from tsexplore.ui.theme import STATIC

    page = context.new_page()
    try:
        html = (f"<style>{(STATIC / 'canvas.css').read_text()}</style>"
                f"<script>{(STATIC / 'theme.js').read_text()}</script>"
                "<div class='tse-canvas' id='c'></div>")
        page.set_content(f"<!doctype html><html><body>{html}</body></html>")
        read = "() => readTheme(document.getElementById('c'))"
        for scheme, dark in (("light", False), ("dark", True)):
            page.emulate_media(color_scheme=scheme)
            theme = page.evaluate(read)
            assert theme["dark"] is dark, (scheme, theme)
            lum = sum(theme["bg"][:3]) / 3
            assert (lum < 60) if dark else (lum > 200), (scheme, theme)
            assert abs(sum(theme["fg"][:3]) / 3 - lum) > 150, (scheme, theme)  # text against it
    finally:
        page.close()


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_canvas_in_jupyterlab(browser_ready, tmp_path):
    import nbformat

    from tsexplore.testing.lab import chromium, jupyterlab, run_all_cells

    data = np.random.default_rng(0).normal(size=(NY, NX)).astype("float32")
    data[5, 7] = np.nan
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "canvas.ipynb")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    t0 = time.monotonic()
    nodelay = ["--ServerApp.jpserver_extensions=tsexplore.jupyter_server_ext=True"]
    with jupyterlab(tmp_path, args=nodelay) as (url, token), chromium(tmp_path / "profile") as page:
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" and "tse" in m.text else None)
        page.goto(f"{url}/lab/tree/canvas.ipynb?token={token}")
        run_all_cells(page)
        # the browser reports its view when it is ready; the kernel answers with a frame
        label = _wait_label(page, "vp ")
        assert _viewport(label) == ([-0.5, NY - 0.5], [-0.5, NX - 0.5], NY, NX)
        page.wait_for_timeout(100)
        np.testing.assert_array_equal(_shown(page), _expected(data, "viridis", (-2, 2)))

        # colormap and display range: repainted in the browser, no frame from the kernel
        before = page.evaluate(STATE)
        page.evaluate(SET, ["cmap", "magma"])
        np.testing.assert_array_equal(_shown(page), _expected(data, "magma", (-2, 2)))
        page.evaluate(SET, ["clim", [-1.0, 0.5]])
        np.testing.assert_array_equal(_shown(page), _expected(data, "magma", (-2, 2), (-1.0, 0.5)))
        page.wait_for_timeout(300)
        assert page.evaluate(STATE)["received"] == before["received"]
        page.evaluate(SET, ["clim", None])
        page.evaluate(SET, ["cmap", "viridis"])

        # lossless compressed frames decode to the same picture
        for enc in ("png", "webp"):
            page.evaluate(EXECUTE, f"c.encoding = '{enc}'; c.show_plane(data[::-1].copy(), clim=(-2, 2), label='{enc}')")
            _wait_label(page, enc)
            np.testing.assert_array_equal(_shown(page), _expected(data[::-1], "viridis", (-2, 2)))
        page.evaluate(EXECUTE, "c.encoding = 'raw'")
        page.screenshot(path=str(ARTIFACTS / "canvas_first.png"))

        # drag: the picture moves at once and the kernel gets the region on screen
        box = page.locator(".tse-canvas canvas.tse-canvas-plot").bounding_box()
        left, top = box["x"] + 58, box["y"] + 24
        page.mouse.move(left + 80, top + 60)
        page.mouse.down()
        page.mouse.move(left + 100, top + 70, steps=4)
        page.mouse.move(left + 120, top + 80, steps=4)
        page.mouse.up()
        want_y, want_x = [-0.5 + 20, NY - 0.5 + 20], [-0.5 - 40, NX - 0.5 - 40]
        page.wait_for_function(
            f"() => {{ const l = ({LABEL})(); if (!l.startsWith('vp ')) return false;"
            f" const v = JSON.parse(l.slice(3)); return Math.abs(v.x[0] - ({want_x[0]})) < 1e-9"
            f" && Math.abs(v.y[0] - ({want_y[0]})) < 1e-9; }}", polling=50, timeout=20_000)
        vy, vx, _, _ = _viewport(page.evaluate(LABEL))
        np.testing.assert_allclose([vy, vx], [want_y, want_x], atol=1e-9)

        # wheel zoom about the pointer: the data point under it stays put
        px, py = 40, 30  # plot pixels from the plot's top left
        page.mouse.move(left + px, top + py)
        page.mouse.wheel(0, -200)
        f = 1.0015 ** -200
        ax = want_x[0] + px / NX * (want_x[1] - want_x[0])
        ay = want_y[1] - py / NY * (want_y[1] - want_y[0])  # y origin lower
        zx = [ax + (v - ax) * f for v in want_x]
        zy = [ay + (v - ay) * f for v in want_y]
        page.wait_for_function(
            f"() => {{ const l = ({LABEL})(); if (!l.startsWith('vp ')) return false;"
            f" const v = JSON.parse(l.slice(3)); return Math.abs(v.x[1] - ({zx[1]})) < 1e-6; }}",
            polling=50, timeout=20_000)
        vy, vx, _, _ = _viewport(page.evaluate(LABEL))
        np.testing.assert_allclose([vy, vx], [zy, zx], atol=1e-6)

        # hover: coordinates under the pointer; click: the kernel gets that pixel
        page.mouse.move(left + 100.5, top + 50.5)
        x = zx[0] + 100.5 / NX * (zx[1] - zx[0])
        y = zy[1] - 50.5 / NY * (zy[1] - zy[0])
        readout = page.locator(".tse-canvas-readout").inner_text()
        assert f"[{round(x)}]" in readout and f"[{round(y)}]" in readout, readout
        page.mouse.click(left + 100.5, top + 50.5)
        p = json.loads(_wait_label(page, "px ")[3:])
        assert (p["ix"], p["iy"]) == (round(x), round(y))
        np.testing.assert_allclose([p["x"], p["y"]], [x, y], atol=1e-9)

        # keys: ArrowRight moves the canvas's own slider; JupyterLab's shortcuts see nothing
        cell = "() => [window.jupyterapp.shell.currentWidget.content.activeCellIndex, window.jupyterapp.shell.currentWidget.content.mode]"
        page.locator(".tse-canvas").focus()
        where = page.evaluate(cell)
        page.keyboard.press("ArrowRight")
        assert _wait_label(page, "index 1") == "index 1"
        for key in ("j", "ArrowDown", "k", "m"):
            page.keyboard.press(key)
        page.wait_for_timeout(200)
        assert page.evaluate(cell) == where
        assert page.locator(".tse-canvas-slider-label").inner_text().endswith("[1]")
        # play: the browser steps the slider, each step after the previous one's frame
        page.locator(".tse-canvas-play").click()
        _wait_label(page, "index 3")
        _wait_label(page, "index 0")  # wrapped around
        page.locator(".tse-canvas-play").click()
        page.wait_for_timeout(300)
        stopped = page.evaluate(LABEL)
        page.wait_for_timeout(300)
        assert page.evaluate(LABEL) == stopped
        page.screenshot(path=str(ARTIFACTS / "canvas_last.png"))
        state = page.evaluate(STATE)
        _check_colour_scheme(page.context)
    print(f"canvas browser test: {time.monotonic() - t0:.1f} s, {state}")
    # the opt-in server extension set TCP_NODELAY on the kernel's websocket (and all worked)
    assert "TCP_NODELAY on the websocket of kernel" in (tmp_path / "lab.log").read_text()
    assert state["stale"] == 0
    assert not errors, errors
