"""Tutorial 01 in JupyterLab, driven by headless Debian Chromium through Playwright.

Runs every cell, moves the cube Explorer's time slider and checks, from the browser's own
Bokeh models, that the image now holds the new slice (against the store read with zarr) and
that the StatsPanel's numbers moved. Screenshots go to ``test-artifacts/browser/``.
Without chromium this skips locally and FAILS under CI (``CI=true``).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts" / "browser"

IMAGE_OF = """(prefix) => {
  for (const doc of window.Bokeh?.documents ?? []) {
    const models = [...doc.all_models];
    const title = models.find(m => m.type === 'Title' && m.text.startsWith(prefix));
    if (!title) continue;
    const cds = models.find(m => m.type === 'ColumnDataSource' && m.data.image !== undefined);
    if (!cds) continue;
    const img = cds.data.image[0];
    return {title: title.text, shape: img.shape, dtype: String(img.dtype), bytes: img.BYTES_PER_ELEMENT, values: Array.from(img)};
  }
  return null;
}"""
NUMBERS = "() => [...document.querySelectorAll('.tsexplore-stats-numbers')].map(e => e.textContent)"


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


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.timeout(360)
def test_tutorial_01_in_jupyterlab(browser_ready, tmp_path):
    import zarr

    import tsexplore as tse
    from tsexplore.controller import robust_range, to_uint8
    from tsexplore.testing.lab import KERNEL_IDLE, TITLES, chromium, jupyterlab, run_all_cells

    shutil.copy(ROOT / "notebooks" / "01_explore.ipynb", tmp_path / "01_explore.ipynb")
    data = tmp_path / "data"
    cube = tse.sample_data("cube", data / "cube.zarr", size="small", progress=False)
    truth = zarr.open_group(str(cube), mode="r")["temp"]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    env = {"TSEXPLORE_SAMPLE_SIZE": "small", "TSEXPLORE_DATA_DIR": str(data)}
    t0 = time.monotonic()
    sent_back = {"on": False, "bytes": 0}

    def on_ws(ws):
        if "/channels" in ws.url:
            ws.on("framesent", lambda p: sent_back.__setitem__(
                "bytes", sent_back["bytes"] + (len(p) if sent_back["on"] else 0)))

    with jupyterlab(tmp_path, env) as (url, token), chromium(tmp_path / "profile") as page:
        page.on("websocket", on_ws)
        print(f"lab up after {time.monotonic() - t0:.1f} s")
        page.goto(f"{url}/lab/tree/01_explore.ipynb?token={token}")
        page.wait_for_function(KERNEL_IDLE)
        print(f"kernel idle after {time.monotonic() - t0:.1f} s")
        run_all_cells(page)
        print(f"all cells ran after {time.monotonic() - t0:.1f} s")
        # the scrub cell left the cube at time=7
        page.wait_for_function(f"({TITLES})().some(t => t.startsWith('temp · time=7'))", polling=200)
        page.wait_for_timeout(600)
        before = page.evaluate(IMAGE_OF, "temp · time=7")
        numbers_before = page.evaluate(NUMBERS)[0]
        page.screenshot(path=str(ARTIFACTS / "01_before_slider.png"), full_page=True)

        handle = page.locator(".widget-slider .noUi-handle").first
        handle.scroll_into_view_if_needed()
        handle.focus()
        sent_back["on"] = True
        handle.press("ArrowRight")
        try:
            page.wait_for_function(f"({TITLES})().some(t => t.startsWith('temp · time=8'))",
                                   polling=200, timeout=90_000)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "01_failed.png"), full_page=True)
            state = page.evaluate("""() => ({
                readouts: [...document.querySelectorAll('.widget-slider .widget-readout')].map(e => e.innerText),
                active: document.activeElement?.className,
                titles: [...(window.Bokeh?.documents ?? [])].flatMap(d => [...d.all_models]).filter(m => m.type === 'Title').map(m => m.text),
                info: [...document.querySelectorAll('.widget-html-content code')].map(e => e.innerText).slice(0, 3)})""")
            raise AssertionError(f"the slider move was not painted: {state}") from None
        page.wait_for_timeout(800)  # a few StatsPanel ticks
        sent_back["on"] = False
        after = page.evaluate(IMAGE_OF, "temp · time=8")
        numbers_after = page.evaluate(NUMBERS)[0]
        page.screenshot(path=str(ARTIFACTS / "01_after_slider.png"), full_page=True)
        page.locator(".tsexplore-explorer").first.screenshot(path=str(ARTIFACTS / "01_explorer.png"))

    # the browser holds slice 8 as one byte per pixel, colour-mapped from the store's values
    assert after["dtype"] == "uint8" and after["bytes"] == 1 and after["shape"] == [128, 128]
    shown = np.array(after["values"], dtype=np.uint8).reshape(after["shape"])
    frame = truth[8]
    # bokeh's image glyph stores row 0 at the bottom: the lowest y index, as in the store
    np.testing.assert_array_equal(shown, to_uint8(frame, robust_range(frame)))
    prev = np.array(before["values"], dtype=np.uint8).reshape(before["shape"])
    np.testing.assert_array_equal(prev, to_uint8(truth[7], robust_range(truth[7])))
    assert not np.array_equal(prev, shown)
    # the browser sends back the slider move only: no echo of the image (128 x 128 = 16 kB)
    # nor of the StatsPanel's streamed rows and chunk map (jupyter_bokeh echoed every patch),
    # nor the StatsPanel's auto-ranges (4 figures x 4 range ends per tick)
    assert sent_back["bytes"] < 6000, f"{sent_back['bytes']} bytes sent back to the kernel"
    # the stats panel's numbers moved: the slider's chunk requests were counted
    assert numbers_after != numbers_before
    assert _requests(numbers_after) >= _requests(numbers_before) + 4
