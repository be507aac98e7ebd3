"""The bare canvas reference and the ``--pyramid`` overview, for ``python -m benchmarks ui``.

*Bare canvas*: a minimal notebook with tsexplore's image canvas (``tsexplore.ui.canvas``) and a
slider -- an ipywidgets ``IntSlider`` or the canvas's own slider in the browser -- that sends
a precomputed ``uint8`` frame per move: the floor the comm path allows, measured in the same
run (same JupyterLab, same browser, same timing) as the Explorer.

*Pyramid*: a 65,536 x 65,536 float32 plane as an OME-NGFF pyramid on Zarr, written without
16 GB of disk: levels 0-3 (65,536 .. 8,192) are sparse (metadata only: every chunk absent,
read as fill with ``missing="fill"``), levels 4-8 (4,096 .. 256) are real, written by
``tse.pyramid`` from a synthetic 4,096^2 plane. A warm kernel and page (imports done, engine
started, a tiny Explorer on screen) opens the store with a cold cache (nothing of it in
tsexplore's cache, its pages dropped from the OS cache) and shows it in an Explorer
(``tse.explore(levels[0], levels=levels)``) on a 1024^2 screen: it picks the level, paints a
coarser one first when the chosen level needs more than 4 reads, then the chosen level's tiles
as they arrive; the page times each paint from the kernel's first call (``open_levels``).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from tsexplore.testing.lab import EXECUTE

CANVAS_CELLS = [
    "import numpy as np, ipywidgets as w\n"
    "from IPython.display import display\n"
    "from tsexplore.ui.canvas import ImageCanvas\n"
    "N, K = {px}, 64\n"
    "rng = np.random.default_rng(0)\n"
    "frames = [rng.integers(1, 256, (N, N), dtype=np.uint8) for _ in range(K)]  # precomputed\n"
    "js = {js!r}\n"
    "c = ImageCanvas(shape=(N, N), width=N, height=N, encoding='raw',\n"
    "                slider={{'dim': 'time', 'size': 1000}} if js else {{}})\n"
    "c.ack_policy = {ack!r}\n"
    "def show(i):\n"
    "    c.show(frames[i % K], index=i, label=f'frame {{i}}')\n"
    "if js:\n"
    "    c.on_index(show)\n"
    "    display(c)\n"
    "else:\n"
    "    s = w.IntSlider(value=0, min=0, max=999, description='time', continuous_update=True)\n"
    "    s.observe(lambda ch: show(ch['new']), 'value')\n"
    "    display(w.VBox([s, c]))\n"
    "show(0)",
]
CANVAS_FIRST = "document.querySelector('.tse-canvas')?.dataset.index === '0'"
# t0 at the key event on the slider; the move ends at the second animation frame after the
# canvas painted the frame of the wanted index (as the Explorer's move ends after its patch)
CANVAS_ARM = """(handle) => {
  const h = document.querySelector(handle);
  if (!h.__tse) {
    h.addEventListener('keydown', () => {
      window.__tse_t0 = performance.now();
      const w = window.__tse_ws; // the tally at each timed key press: messages per move
      if (w && w.on) (window.__tse_marks = window.__tse_marks || []).push([w.nrecv, w.nsent]);
    }, true);
    h.__tse = 1;
  }
  const root = document.querySelector('.tse-canvas');
  if (!root.__tse) {
    root.addEventListener('tse-paint', (e) => {
      window.__tse_painted = e.detail.index;
      if (window.__tse_waiter) window.__tse_waiter(e.detail.index);
    });
    root.__tse = 1;
  }
}"""
CANVAS_MOVE = """(want) => new Promise((resolve) => {
  const t0 = window.__tse_t0;
  const finish = () => requestAnimationFrame(() => requestAnimationFrame(
      () => resolve(performance.now() - t0)));
  if (window.__tse_painted === want) { finish(); return; }
  const timer = setTimeout(() => { window.__tse_waiter = null; resolve(-1); }, 20000);
  window.__tse_waiter = (i) => {
    if (i === want) { clearTimeout(timer); window.__tse_waiter = null; finish(); }
  };
})"""
#: the time slider's handle: the ipywidgets one (not the labels' opacity slider) or the canvas's
HANDLES = {"ipywidgets": ".widget-slider:not(.tse-labels-opacity) .noUi-handle", "js": ".tse-canvas-range"}


def canvas_cells(px: int, slider: str, ack: str) -> list[str]:
    return [c.format(px=px, js=slider == "js", ack=ack) for c in CANVAS_CELLS]


# -- the pyramid ----------------------------------------------------------------------------------

PYRAMID_SIZE, REAL_FROM, CHUNK = 65536, 4096, 256


def pyramid_store(path: Path, progress: bool = True) -> Path:
    """The 65,536^2 pyramid (sparse fine levels, real coarse ones); reused when complete."""
    import numpy as np
    import zarr

    import tsexplore as tse

    try:
        if zarr.open_group(str(path), mode="r").attrs.get("tse_bench_complete"):
            return path
    except Exception:  # noqa: BLE001 - absent or half written: write it again
        pass
    shutil.rmtree(path, ignore_errors=True)
    sparse = int(np.log2(PYRAMID_SIZE // REAL_FROM))
    coarse = path.with_name(path.name + ".coarse")
    shutil.rmtree(coarse, ignore_errors=True)
    plane = tse.synthetic((REAL_FROM, REAL_FROM), chunks=(CHUNK, CHUNK), dims=("y", "x"))["data"]
    tse.pyramid(plane, coarse, min_size=CHUNK, progress=progress)
    tse.close()
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    for k in range(sparse):  # metadata only: no chunk is ever written
        n = PYRAMID_SIZE >> k
        root.create_group(str(k)).create_array(
            "data", shape=(n, n), chunks=(CHUNK, CHUNK), dtype="float32", fill_value=np.nan,
            dimension_names=("y", "x"))
    meta = zarr.open_group(str(coarse), mode="r").attrs["ome"]["multiscales"][0]
    for j, _ in enumerate(meta["datasets"]):
        shutil.move(str(coarse / str(j)), str(path / str(sparse + j)))
    shutil.rmtree(coarse)
    levels = sparse + len(meta["datasets"])
    datasets = [{"path": f"{k}/data", "coordinateTransformations": [
        {"type": "scale", "scale": [2.0**k, 2.0**k]},
        {"type": "translation", "translation": [(2.0**k - 1) / 2] * 2}]} for k in range(levels)]
    root = zarr.open_group(str(path), mode="a")
    root.attrs["ome"] = {"version": "0.5", "multiscales": [
        {"name": "data", "axes": meta["axes"], "datasets": datasets, "type": "mean"}]}
    zarr.consolidate_metadata(str(path))
    root = zarr.open_group(str(path), mode="a", use_consolidated=False)
    root.attrs["tse_bench_complete"] = True
    zarr.consolidate_metadata(str(path))
    return path


PYRAMID_CELLS = [
    "import json, time, numpy as np, ipywidgets as w, tsexplore as tse\n"
    "from IPython.display import display\n"
    "from tsexplore.pyramid import open_levels\n"
    "from tsexplore.testing.wrappers import CountingSource\n"
    "import dask.array, zarr  # what xarray and zarr import on first use: not part of opening\n"
    "_ = zarr.open_group(zarr.storage.MemoryStore(), mode='w')\n"
    "# a warm process and page: engine up, the Explorer's widgets and the canvas's module loaded\n"
    "warm = tse.explore(tse.open_dataset(np.zeros((4, 4), np.float32)), width=64, height=64, stats=False)\n"
    "out = w.Output()\n"
    "display(w.VBox([warm.widget, out]))",
]
# run by the benchmark once the warm canvas is on screen: open cold, explore, show; the
# Explorer plans, reads and paints on its own (coarse level first, then the chosen one's tiles)
PYRAMID_RUN = """
t0 = time.time()
before = tse.stats()
levels = open_levels({path!r}, missing="fill", wrap=CountingSource)
ex = tse.explore(levels[0], levels=levels, width={px}, height={px}, stats=False)
t_made = time.time()
with out:
    display(ex)
print("TSE_T0 " + json.dumps({{"t0": t0 * 1e3, "made_ms": (t_made - t0) * 1e3, "shown_ms": (time.time() - t0) * 1e3}}))
"""
PYRAMID_DONE = """
f = ex.controller.wait(timeout=60)
after = tse.stats()
plan = ex.controller.plan()
print("TSE_RESULT " + json.dumps({
    "target": f.level, "levels": [list(lv.geometry.shape) for lv in ex.levels],
    "reads_per_level": levels.chunk_reads(), "decoded_bytes": after.bytes_decoded - before.bytes_decoded,
    "frames": ex.controller.counts, "step_levels": [s.level for s in plan.steps],
    "by_encoding": ex.canvas.stats()["by_encoding"]}))
"""
# every paint of a canvas other than the warm one, with its time (the page's clock = the kernel's)
PAINTED = """() => {
  if (!window.__tse_log) {
    window.__tse_log = [];
    const warm = document.querySelector('.tse-canvas');
    document.addEventListener('tse-paint', (e) => {
      if (e.target !== warm) window.__tse_log.push({gen: e.detail.gen, mode: e.detail.mode,
                                                    final: e.detail.final, t: Date.now()});
    });
  }
  return window.__tse_log;
}"""


def _printed(text: Any, tag: str) -> dict[str, Any]:
    line = next((t for t in str(text).splitlines() if t.startswith(tag + " ")), None)
    if line is None:
        raise RuntimeError(f"the pyramid cell printed no {tag}: {text!r}")
    return dict(json.loads(line[len(tag) + 1:]))


def pyramid_page(page: Any, store: Path, px: int) -> dict[str, Any]:
    """Cold open -> the Explorer's overview painted, in the open notebook."""
    from .pagecache import cold_cache

    page.wait_for("document.querySelector('.tse-canvas canvas') !== null")
    page.call(PAINTED)
    time.sleep(0.5)
    cache = cold_cache(store, drop_caches=False)
    t0 = _printed(page.call(EXECUTE, PYRAMID_RUN.format(path=str(store), px=px)), "TSE_T0")
    deadline = time.monotonic() + 60
    painted: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        painted = [dict(p, painted_ms=p["t"] - t0["t0"]) for p in page.call(PAINTED) or []]
        if any(p["final"] for p in painted):
            break
        time.sleep(0.05)
    result = _printed(page.call(EXECUTE, PYRAMID_DONE), "TSE_RESULT")
    final = next((p for p in painted if p["final"]), None)
    result.update({
        "plane": [PYRAMID_SIZE, PYRAMID_SIZE], "screen": [px, px], "painted": painted,
        "made_ms": t0["made_ms"], "shown_ms": t0["shown_ms"],
        "first_paint_ms": painted[0]["painted_ms"] if painted else None,
        "overview_ms": final["painted_ms"] if final else None,
        "decoded_limit": 4 * px * px * 4, "resident_after_drop": cache.get("resident_after")})
    return result
