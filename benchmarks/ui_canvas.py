"""The bare canvas reference and the ``--pyramid`` overview, for ``python -m benchmarks ui``.

*Bare canvas*: a minimal notebook with tsexplore's image canvas (``tsexplore.ui.canvas``) and a
slider -- an ipywidgets ``IntSlider`` or the canvas's own slider in the browser -- that sends
a precomputed ``uint8`` frame per move: the floor the comm path allows, measured in the same
run (same JupyterLab, same browser, same timing) as the Explorer.

*Pyramid*: a 65,536 x 65,536 float32 plane as an OME-NGFF pyramid on Zarr, written without
16 GB of disk: levels 0-3 (65,536 .. 8,192) are sparse (metadata only: every chunk absent,
read as fill with ``missing="fill"``), levels 4-8 (4,096 .. 256) are real, written by
``tse.pyramid`` from a synthetic 4,096^2 plane. A warm kernel (imports done, engine started on
a tiny in-memory array) opens the store with a cold cache (nothing of it in tsexplore's cache,
its pages dropped from the OS cache), picks the level for a 1024^2 screen
(``engine.levels.overview_plan``), reads the overview (a quick coarser picture first when the
chosen level needs more than 4 reads) and paints it on the canvas; the page times each paint
from the kernel's first call (``open_levels``).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

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
  if (!h.__tse) { h.addEventListener('keydown', () => { window.__tse_t0 = performance.now(); }, true); h.__tse = 1; }
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
HANDLES = {"ipywidgets": ".widget-slider .noUi-handle", "js": ".tse-canvas-range"}


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
    "import json, time, numpy as np, tsexplore as tse\n"
    "from tsexplore.ui.canvas import ImageCanvas\n"
    "from tsexplore.engine.levels import overview_plan\n"
    "from tsexplore.pyramid import open_levels\n"
    "from tsexplore.testing.wrappers import CountingSource\n"
    "from tsexplore.ui._frames import to_indices\n"
    "import dask.array, zarr  # what xarray and zarr import on first use: not part of opening\n"
    "_ = tse.open_dataset(np.zeros((2, 2), np.float32)).data.values  # a warm process (engine up)\n"
    "_ = zarr.open_group(zarr.storage.MemoryStore(), mode='w')\n"
    "c = ImageCanvas(shape=({n}, {n}), width={px}, height={px})\n"
    "c",
]
# run by the benchmark once the canvas is on screen: open cold, plan, read, paint
PYRAMID_RUN = """
t0 = time.time()
levels = open_levels({path!r}, missing="fill", wrap=CountingSource)
geo = levels.geometry("y", "x")
full = ((-0.5, {n} - 0.5), (-0.5, {n} - 0.5))
plan = overview_plan(geo, full, ({px}, {px}))
t_plan = time.time()
times = {{}}
for s, step in enumerate(plan.steps):
    (i0, i1), (j0, j1) = step.region
    plane = levels[step.level]["data"].isel(y=slice(i0, i1), x=slice(j0, j1)).values
    t_read = time.time()
    idx, rng = to_indices(plane)
    c.show(idx, geo[step.level].region_extent(step.region), rng, mode="base" if s < len(plan.steps) - 1 else "replace",
           label=json.dumps({{"t0": t0 * 1e3, "step": s, "level": step.level, "last": s == len(plan.steps) - 1}}))
    times[s] = {{"read_ms": (t_read - t0) * 1e3, "sent_ms": (time.time() - t0) * 1e3}}
stats = tse.stats()
result = {{"open_plan_ms": (t_plan - t0) * 1e3, "steps": times, "target": plan.target,
          "levels": [list(g.shape) for g in geo], "reads_per_level": levels.chunk_reads(),
          "planned_reads": [s.reads for s in plan.steps], "step_levels": [s.level for s in plan.steps],
          "decoded_bytes": stats.bytes_decoded}}
print("TSE_RESULT " + json.dumps(result))
"""
PAINTED = """() => {
  const root = document.querySelector('.tse-canvas');
  if (!root) return null;
  if (!root.__tse_log) {
    root.__tse_log = [];
    root.addEventListener('tse-paint', (e) => root.__tse_log.push({label: e.detail.label, t: Date.now()}));
  }
  return root.__tse_log;
}"""
EXECUTE = """(code) => new Promise((resolve) => {
  const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  const f = k.requestExecute({code});
  let text = '';
  f.onIOPub = (m) => { if (m.header.msg_type === 'stream') text += m.content.text;
                       if (m.header.msg_type === 'error') text += 'ERROR ' + m.content.evalue; };
  f.done.then(() => resolve(text));
})"""


def pyramid_page(page: Any, store: Path, px: int) -> dict[str, Any]:
    """Cold open -> overview painted, in the open notebook (whose canvas is on screen)."""
    from .pagecache import cold_cache

    page.wait_for("document.querySelector('.tse-canvas canvas') !== null")
    page.call(PAINTED)
    time.sleep(0.5)
    cache = cold_cache(store, drop_caches=False)
    text = page.call(EXECUTE, PYRAMID_RUN.format(path=str(store), n=PYRAMID_SIZE, px=px))
    line = next((t for t in str(text).splitlines() if t.startswith("TSE_RESULT ")), None)
    if line is None:
        raise RuntimeError(f"the pyramid cell printed no result: {text!r}")
    result = json.loads(line[len("TSE_RESULT "):])
    deadline = time.monotonic() + 30
    painted: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        painted = [dict(json.loads(p["label"]), painted_ms=p["t"] - json.loads(p["label"])["t0"])
                   for p in page.call(PAINTED) or [] if p["label"].startswith("{")]
        if any(p["last"] for p in painted):
            break
        time.sleep(0.05)
    result.update({
        "plane": [PYRAMID_SIZE, PYRAMID_SIZE], "screen": [px, px], "painted": painted,
        "first_paint_ms": painted[0]["painted_ms"] if painted else None,
        "overview_ms": next((p["painted_ms"] for p in painted if p["last"]), None),
        "decoded_limit": 4 * px * px * 4, "resident_after_drop": cache.get("resident_after")})
    return result
