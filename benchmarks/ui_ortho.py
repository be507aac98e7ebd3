"""``python -m benchmarks ui --ortho``: orthogonal views and a cold projection in the browser.

Pages (in the one JupyterLab and browser of ``benchmarks/ui.py``):

- ``ortho-single``: a plain Explorer on the warm cube; each move sets the time slider from the
  kernel (``ex.sliders['time'].value = t``, sent by the page as an execute request) and is timed
  in the page until the new slice is painted (its title, ``final``) and two animation frames
  later;
- ``ortho-cross``: the same Explorer with ``ortho=True``; each move puts the crosshair at a new
  (time, y, x) (``ex.ortho.move(...)``): the three planes are read and painted, timed until the
  last of the three is. Target: its p95 <= 1.5 x ``ortho-single``'s p95;
- ``projection-cold``: the engine closed and the cube's files dropped from the page cache
  (``posix_fadvise``), an Explorer with its StatsPanel, then ``ex.project("max", dim="time")``
  timed until the complete projection is painted; the StatsPanel's ticks and the frames painted
  meanwhile say that it streamed with the panel live (targets: >= 2 partial pictures, the panel
  ticking at least once a second).
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import numpy as np

ORTHO_PAGES = ("ortho-single", "ortho-cross", "projection-cold")

SETUP = [
    "import json, numpy as np, tsexplore as tse, tsexplore.ui\n"
    "tsexplore.ui.extension()",
    "ds = tse.open_dataset({path!r})\n"
    "_ = ds.temp.values  # warm cache: every plane through the cube is cached\n"
    "ex = ds.tse.explore(width={px}, height={px}, stats=False, ortho={ortho})\n"
    "ex",
]
COLD = [
    "import json, numpy as np, tsexplore as tse, tsexplore.ui\n"
    "from tsexplore.testing.pagecache import cold_cache\n"
    "tsexplore.ui.extension()\n"
    "tse.close()\n"
    "print('TSE ' + json.dumps({{'cold': cold_cache(__import__('pathlib').Path({path!r}), drop_caches=False)}}))",
    "ds = tse.open_dataset({path!r})\n"
    "ex = ds.tse.explore(width={px}, height={px})\n"
    "ex",
]
# send ``code`` to the kernel and wait until every canvas of ``wants`` ([index, title prefix])
# painted a final frame with that title: the ms from sending to two animation frames later
KERNEL_MOVE = """([code, wants]) => new Promise((resolve) => {
  const roots = () => document.querySelectorAll('.tse-canvas');
  const done = () => wants.every(([n, prefix]) => {
    const d = roots()[n].dataset;
    return d.final === '1' && (d.label || '').startsWith(prefix) && (d.label || '').length >= prefix.length;
  });
  const t0 = performance.now();
  const timer = setTimeout(() => { document.removeEventListener('tse-paint', check); resolve(-1); }, 30000);
  const check = () => {
    if (!done()) return;
    clearTimeout(timer);
    document.removeEventListener('tse-paint', check);
    requestAnimationFrame(() => requestAnimationFrame(() => resolve(performance.now() - t0)));
  };
  document.addEventListener('tse-paint', check);
  window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.requestExecute({code});
})"""


def _uids(page: Any, names: list[str]) -> list[int]:
    from tsexplore.testing.lab import CANVAS_INDEX, EXECUTE

    out = page.call(EXECUTE, "print('TSE ' + json.dumps([" + ", ".join(f"{n}._tse_uid" for n in names) + "]))")
    uids = json.loads(next(t for t in str(out).splitlines() if t.startswith("TSE "))[4:])
    return [int(page.call(CANVAS_INDEX, u)) for u in uids]


def ortho_page(page: Any, url: str, token: str, workdir: Path, path: Path, px: int, moves: int, warmup: int,
               seed: int, cross: bool) -> dict[str, Any]:
    """``ortho-cross`` (``cross``) or ``ortho-single``: move-to-paint times (see the module)."""
    from .ui_pages import open_notebook

    name = "ortho-cross" if cross else "ortho-single"
    cells = [c.format(path=str(path), px=px, ortho=cross) for c in SETUP]
    open_notebook(page, url, token, workdir, name, cells)
    page.wait_for("document.querySelector('.tse-canvas')?.dataset.final === '1'")
    time.sleep(1.0)
    canvases = ["ex.canvas"] + (["ex.ortho.planes['zy'].canvas", "ex.ortho.planes['zx'].canvas"] if cross else [])
    at = _uids(page, canvases)
    import tsexplore as tse

    ds = tse.open_dataset(str(path))
    nt, ny, nx = (int(n) for n in ds.temp.shape)
    rng = random.Random(seed)
    times: list[float] = []
    t, y, x = 0, ny // 2, nx // 2
    for i in range(warmup + moves):
        t = (t + 1 + rng.randrange(nt - 1)) % nt
        label = f"temp · time={t} ("
        if cross:
            y = (y + 1 + rng.randrange(ny - 1)) % ny
            x = (x + 1 + rng.randrange(nx - 1)) % nx
            code = f"ex.ortho.move(time={t}, y={y}, x={x})"
            wants = [[at[0], label], [at[1], f"zy · x={x}"], [at[2], f"zx · y={y}"]]
        else:
            code = f"ex.sliders['time'].value = {t}"
            wants = [[at[0], label]]
        ms = float(page.call(KERNEL_MOVE, [code, wants]))
        if i >= warmup:
            times.append(ms)
        time.sleep(0.05 + rng.uniform(0, 1 / 60))
    shot = workdir / f"ui_bench_{name}.png"
    page.screenshot(shot)
    ok = [v for v in times if v >= 0]
    return {"page": name, "frame": [px, px], "moves": moves, "warmup": warmup, "timed_out": len(times) - len(ok),
            "planes": 3 if cross else 1, "screenshot": str(shot),
            "move_to_paint_ms": {"p50": float(np.percentile(ok, 50)) if ok else None,
                                 "p95": float(np.percentile(ok, 95)) if ok else None,
                                 "max": max(ok) if ok else None}}


# started, not waited for in the cell: the StatsPanel ticks on the kernel's loop, which a cell
# that waits would hold
PROJECT = ("_ticks = ex.stats_panel.ticks\n"
           "_proj = ex.project('max', dim='time')")
PROJECTED = ("_res = _proj.result(timeout=600)\n"
             "print('TSE ' + json.dumps({'ticks': ex.stats_panel.ticks - _ticks, 'tiles': len(_proj.tiles), "
             "'ok': bool(np.array_equal(_res.values, ds.temp.max('time').values)), 'gb': ds.temp.nbytes / 1e9}))")
# the page counts the projection's paints (partial: a title with a percentage) until it is whole
COUNT_PAINTS = """() => { window.__tse_proj = {partial: 0, whole: null, t0: performance.now()};
  document.addEventListener('tse-paint', (e) => {
    const label = e.detail.label || '', p = window.__tse_proj;
    if (!label.includes('max over time')) return;
    if (/%/.test(label)) p.partial += 1; else if (p.whole == null) p.whole = performance.now() - p.t0;
  }); }"""


def projection_page(page: Any, url: str, token: str, workdir: Path, path: Path, px: int) -> dict[str, Any]:
    """``projection-cold``: a cold max projection of the cube, streamed (see the module)."""
    from tsexplore.testing.lab import EXECUTE

    from .ui_pages import open_notebook

    cells = [c.format(path=str(path), px=px) for c in COLD]
    open_notebook(page, url, token, workdir, "projection-cold", cells)
    page.wait_for("document.querySelector('.tse-canvas')?.dataset.final === '1'")
    time.sleep(1.0)
    page.call(COUNT_PAINTS)
    page.call(EXECUTE, PROJECT)
    deadline = time.monotonic() + 600
    painted = page.call("() => window.__tse_proj")
    while painted.get("whole") is None and time.monotonic() < deadline:
        time.sleep(0.25)
        painted = page.call("() => window.__tse_proj")
    out = page.call(EXECUTE, PROJECTED)
    res = json.loads(next((t for t in str(out).splitlines() if t.startswith("TSE ")), "TSE {}")[4:] or "{}")
    shot = workdir / "ui_bench_projection-cold.png"
    page.screenshot(shot)
    seconds = painted["whole"] / 1e3 if painted.get("whole") is not None else float("nan")
    res["seconds"] = seconds
    return {"page": "projection-cold", "frame": [px, px], "screenshot": str(shot), **res,
            "gb_per_s": res.get("gb", 0) / seconds if seconds == seconds and seconds > 0 else None,
            "partial_paints": painted.get("partial"), "whole_painted_ms": painted.get("whole"),
            "ticks_per_s": res.get("ticks", 0) / seconds if seconds == seconds and seconds > 0 else None}


def targets(pages: dict[str, Any]) -> dict[str, bool]:
    out: dict[str, bool] = {}
    single, cross = pages.get("ortho-single"), pages.get("ortho-cross")
    if single and cross and single["move_to_paint_ms"]["p95"] and cross["move_to_paint_ms"]["p95"]:
        a, b = cross["move_to_paint_ms"]["p95"], single["move_to_paint_ms"]["p95"]
        out[f"ortho crosshair move p95 {a:.0f} ms <= 1.5 x single-plane move p95 {b:.0f} ms"] = a <= 1.5 * b
    proj = pages.get("projection-cold")
    if proj:
        out["cold projection: equal to xarray's max"] = bool(proj.get("ok"))
        out["cold projection: drawn as it refined (>= 2 partial pictures)"] = (proj.get("partial_paints") or 0) >= 2
        out["cold projection: StatsPanel live (>= 1 tick/s)"] = (proj.get("ticks_per_s") or 0) >= 1.0
    return out


def describe(pages: dict[str, Any]) -> list[str]:
    lines = []
    for name in ("ortho-single", "ortho-cross"):
        p = pages.get(name)
        if p:
            m = p["move_to_paint_ms"]
            lines.append(f"{name:16s}: {p['planes']} plane(s), {p['moves']} moves: move->paint p50 "
                         f"{m['p50']:.0f} ms, p95 {m['p95']:.0f} ms (max {m['max']:.0f}), {p['timed_out']} timed out")
    p = pages.get("projection-cold")
    if p:
        lines.append(f"projection-cold : {p.get('tiles')} tiles in {p.get('seconds', 0):.2f} s "
                     f"({(p.get('gb_per_s') or 0):.2f} GB/s), {p.get('partial_paints')} partial pictures, "
                     f"StatsPanel {p.get('ticks')} ticks ({(p.get('ticks_per_s') or 0):.1f}/s)")
    return lines
