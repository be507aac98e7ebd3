"""``python -m benchmarks ui --soak [SECONDS]``: the Explorer in a real browser for minutes.

JupyterLab + headless Chromium (the same setup as the rest of ``benchmarks ui``, driven over
the DevTools protocol), the Explorer on the warm 64 x N x N cube (N = 1024; ``--small``: 256).
For ``SECONDS`` (default 600) a random move follows another after a random pause (20-200 ms):
a slider jump (the canvas's slider set to a random index, as a drag of it does), a slider step
(ArrowLeft / ArrowRight on it), a pan (a mouse drag on the image) or a zoom (the mouse wheel;
the view is reset when it has zoomed in or out far). After each move the page is given up to
5 s to paint a new frame; each frame painted is checked against NumPy: its colour indices
(a hash of all of them, computed in the page) equal those of the slice it claims (``index``),
cut to the region and strides it claims (``extent``, ``shape``) from the cube read with zarr
and quantised over the range it claims (``clim``) -- the right slice, the right pixels.

Recorded: the kernel's RSS (with the engine cache's bytes, the recycled buffers held for
reuse, what glibc's malloc holds, the plan memo's entries and Python's object count, also
every 15 s) and the page's JS heap (``Runtime.getHeapUsage`` after a forced
garbage collection) after a warm-up (30 moves) and at the end, their growth; every
``console.error``, uncaught error and unhandled rejection in the page; moves by kind, frames
painted, checked and wrong. Targets: growth <= 5 % for both, 0 console errors, 0 wrong frames.

The baseline is taken after 30 moves, when the cache is already full (the cube was read
whole first) but what fills with use is not: the recycled buffers (bounded by their age and
the budget's room), malloc's arenas and the plan memos (1,024 entries) fill over the first
minutes. The target judges the growth from that baseline, fill included; the growth over the
second half of the soak is printed beside it, to tell a fill that stopped from a leak.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import numpy as np

# every console.error, uncaught error and unhandled rejection in the page, kept for the report
CONSOLE_ERRORS = """(() => {
  const errs = window.__tse_errors = [];
  const keep = (text) => { if (errs.length < 200) errs.push(String(text).slice(0, 400)); else errs.push('...'); };
  const orig = console.error.bind(console);
  console.error = (...args) => { keep(args.map((a) => (a && a.stack) || String(a)).join(' ')); orig(...args); };
  window.addEventListener('error', (e) => keep('uncaught: ' + (e.message || e)));
  window.addEventListener('unhandledrejection', (e) => keep('unhandled rejection: ' + ((e.reason && e.reason.stack) || e.reason)));
})()"""
# the first canvas's newest frame: what it claims and a hash of the colour indices it paints
FRAME = """() => {
  const s = [...(window.__tse_canvases ?? [])][0];
  if (!s || !s.last || !s.layers.length) return null;
  const m = s.last, l = s.layers[s.layers.length - 1], idx = l.idx;
  let hash = 0;  // sum of idx[i] * (i % 65521 + 1): exact in a double for a few M pixels
  for (let i = 0; i < idx.length; i++) hash += idx[i] * ((i % 65521) + 1);
  return {painted: s.counts.painted, gen: m.gen, index: m.index, extent: m.extent, shape: m.shape,
          clim: m.clim, mode: m.mode, layers: s.layers.length, n: idx.length, hash};
}"""
PAINTED = "() => { const s = [...(window.__tse_canvases ?? [])][0]; return s ? s.counts.painted : -1; }"
# where the plot is on the page (CSS pixels) and the slider's size
GEOMETRY = """() => {
  const root = document.querySelector('.tse-canvas'), c = root.querySelector('canvas');
  const b = c.getBoundingClientRect(), [l, t, w, h] = root.dataset.plot.split(',').map(Number);
  const s = [...window.__tse_canvases][0];
  return {left: b.left + l, top: b.top + t, width: w, height: h, size: (s.model.get('slider') || {}).size};
}"""
SET_INDEX = "(i) => { [...window.__tse_canvases][0].setIndex(i); }"
RESET = "() => { [...window.__tse_canvases][0].resetView(); }"
FOCUS_SLIDER = "() => document.querySelector('.tse-canvas-range').focus()"

# glibc's own count of what malloc holds (its arenas and its mmapped blocks; 0 elsewhere)
MALLOC = """import ctypes as _ct
def _malloc():
    try:
        class _MI(_ct.Structure):
            _fields_ = [(n, _ct.c_size_t) for n in ('arena', 'ordblks', 'smblks', 'hblks', 'hblkhd',
                                                    'usmblks', 'fsmblks', 'uordblks', 'fordblks', 'keepcost')]
        f = _ct.CDLL('libc.so.6').mallinfo2
        f.restype = _MI
        m = f()
        return int(m.arena + m.hblkhd)
    except (OSError, AttributeError):
        return 0"""
SOAK_CELLS = [
    "import gc, json, psutil, numpy as np, tsexplore as tse\n" + MALLOC,
    "ds = tse.open_dataset({path!r})\n"
    "_ = ds.temp.values  # warm cache: the soak is about the viewer, not the disk\n"
    "ex = ds.tse.explore(width={px}, height={px}, stats=False, slider='canvas')\n"
    "ex",
]
RSS = ("gc.collect(); _e = tse.get_engine(); from tsexplore.sources import buffers as _b\n"
       "from tsexplore.engine import planning as _p\n"
       "print('TSE ' + json.dumps({'rss': psutil.Process().memory_info().rss, 'cache': _e.cache.bytes_now, "
       "'encoded': _e.cache.encoded_bytes, 'pool': _b.stats()['free_bytes'], 'plans': len(_p._plans), "
       "'malloc': _malloc(), 'objects': len(gc.get_objects())}))")

#: seconds between two samples of the kernel's memory during the soak
SAMPLE_EVERY = 15.0
KINDS = ("jump", "step", "pan", "zoom")


def expected_hash(cube: np.ndarray, frame: dict[str, Any]) -> tuple[int | None, str]:
    """The hash of the colour indices of the slice and region ``frame`` claims (NumPy), or
    None and why the claim itself is wrong."""
    (ey0, ey1), (ex0, ex1) = frame["extent"]
    rows, cols = frame["shape"]
    keys = []
    for e0, e1, n in ((ey0, ey1, rows), (ex0, ex1, cols)):
        start, step = e0 + 0.5, (e1 - e0) / n
        if start != int(start) or step != int(step) or step < 1:
            return None, f"extent {frame['extent']} of shape {frame['shape']} is not on the index grid"
        keys.append(slice(int(start), int(start) + int(step) * n, int(step)))
    index = frame["index"]
    if index is None or not 0 <= index < cube.shape[0]:
        return None, f"index {index!r} is not a slice"
    data = cube[index][keys[0], keys[1]]
    if data.shape != (rows, cols):
        return None, f"region {keys} of the cube has shape {data.shape}, the frame {frame['shape']}"
    lo, hi = (float(v) for v in frame["clim"])
    x = (data.astype(np.float32) - np.float32(lo)) * np.float32(254.0 / (hi - lo))
    bad = ~np.isfinite(x)
    x = np.clip(x, 0, 254)
    x[bad] = -1
    idx = (x + 1.5).astype(np.uint8).ravel()
    weights = (np.arange(idx.size, dtype=np.int64) % 65521) + 1
    return int((idx.astype(np.int64) * weights).sum()), ""


def _mouse(page: Any, kind: str, x: float, y: float, **extra: Any) -> None:
    page.page.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, **extra})


def _heap(page: Any) -> int:
    page.page.send("HeapProfiler.collectGarbage")
    return int(page.page.send("Runtime.getHeapUsage")["usedSize"])


def _memory(page: Any) -> dict[str, int]:
    """The kernel's RSS, the engine cache's bytes (decoded, encoded) and Python's objects."""
    from tsexplore.testing.lab import EXECUTE

    told = str(page.call(EXECUTE, RSS))
    line = next(t for t in told.splitlines() if t.startswith("TSE "))
    return {k: int(v) for k, v in json.loads(line[4:]).items()}


def soak(path: Path, px: int, seconds: float, workdir: Path, seed: int = 7,
         warmup: int = 30, kinds: tuple[str, ...] = KINDS) -> dict[str, Any]:
    """Random slider, pan and zoom moves (of ``kinds``) for ``seconds``; see the module docstring."""
    unknown = set(kinds) - set(KINDS)
    if unknown or not kinds:
        raise ValueError(f"soak moves must be some of {KINDS}, got {kinds}")
    import zarr

    from tsexplore.testing.lab import jupyterlab

    from .ui_pages import NO_LEAVE_PROMPT, open_notebook, open_page

    cube = np.asarray(zarr.open_group(str(path), mode="r")["temp"][...])  # the truth, in memory
    rng = random.Random(seed)
    moves = dict.fromkeys(kinds, 0)
    frames = {"painted": 0, "checked": 0, "wrong": 0, "no_new_frame": 0}
    wrong: list[dict[str, Any]] = []
    with jupyterlab(workdir) as (url, token), open_page("cdp", workdir / "profile") as page:
        page.add_init_script(NO_LEAVE_PROMPT)
        page.add_init_script(CONSOLE_ERRORS)
        cells = [c.format(path=str(path), px=px) for c in SOAK_CELLS]
        open_notebook(page, url, token, workdir, "soak", cells)
        page.wait_for("document.querySelector('.tse-canvas')?.dataset.index === '0'")
        time.sleep(1.0)
        geo = page.call(GEOMETRY)
        size = int(geo["size"] or cube.shape[0])
        state = {"index": 0, "zoom": 0}

        stalled: dict[str, int] = {}
        last_kind = [""]

        def move(kind: str) -> None:
            moves[kind] += 1
            last_kind[0] = kind
            if kind == "jump":
                state["index"] = rng.randrange(size)
                page.call(SET_INDEX, state["index"])
            elif kind == "step":
                page.call(FOCUS_SLIDER)
                page.press(rng.choice(("ArrowLeft", "ArrowRight")))
            elif kind == "pan":
                x0 = geo["left"] + geo["width"] * rng.uniform(0.3, 0.7)
                y0 = geo["top"] + geo["height"] * rng.uniform(0.3, 0.7)
                dx, dy = rng.uniform(-0.25, 0.25) * geo["width"], rng.uniform(-0.25, 0.25) * geo["height"]
                _mouse(page, "mousePressed", x0, y0, button="left", buttons=1, clickCount=1)
                for k in range(1, 5):
                    _mouse(page, "mouseMoved", x0 + dx * k / 4, y0 + dy * k / 4, button="left", buttons=1)
                _mouse(page, "mouseReleased", x0 + dx, y0 + dy, button="left", buttons=0, clickCount=1)
            else:
                if abs(state["zoom"]) >= 4:  # far in or out: back to the whole plane
                    page.call(RESET)
                    state["zoom"] = 0
                    return
                step = rng.choice((-1, 1))
                state["zoom"] += step
                x = geo["left"] + geo["width"] * rng.uniform(0.2, 0.8)
                y = geo["top"] + geo["height"] * rng.uniform(0.2, 0.8)
                _mouse(page, "mouseWheel", x, y, deltaX=0, deltaY=-300 * step)

        def check(before: int) -> None:
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                painted = page.call(PAINTED)
                if painted > before:
                    break
                time.sleep(0.02)
            else:
                frames["no_new_frame"] += 1
                stalled[last_kind[0]] = stalled.get(last_kind[0], 0) + 1
                return
            got = page.call(FRAME)
            frames["painted"] = got["painted"]
            want, why = expected_hash(cube, got)
            frames["checked"] += 1
            if want is None or want != got["hash"]:
                frames["wrong"] += 1
                if len(wrong) < 20:
                    wrong.append({k: got[k] for k in ("gen", "index", "extent", "shape", "clim", "mode")}
                                 | {"why": why or f"hash {got['hash']} != {want}"})

        series: list[dict[str, Any]] = []

        def run(n: int | None, until: float | None) -> None:
            k, sampled = 0, time.monotonic()
            while (n is not None and k < n) or (until is not None and time.monotonic() < until):
                before = page.call(PAINTED)
                move(rng.choice(kinds))
                check(before)
                time.sleep(rng.uniform(0.02, 0.2))
                k += 1
                if until is not None and time.monotonic() - sampled > SAMPLE_EVERY:
                    sampled = time.monotonic()
                    series.append({"t": round(sampled - start["time"], 1), **_memory(page)})

        run(warmup, None)
        start = {**_memory(page), "js_heap": _heap(page), "time": time.monotonic()}
        run(None, time.monotonic() + seconds)
        end = {**_memory(page), "js_heap": _heap(page), "time": time.monotonic()}
        errors = page.call("() => window.__tse_errors || []")
        canvas = page.call("() => { const s = [...window.__tse_canvases][0]; return {...s.counts}; }")
        shot = workdir / "ui_soak.png"
        page.screenshot(shot)

    def growth(key: str) -> float:
        return 100.0 * (end[key] - start[key]) / start[key]

    return {
        "seconds": end["time"] - start["time"], "frame": [px, px], "seed": seed, "warmup_moves": warmup,
        "moves": moves, "frames": frames, "no_new_frame_by_kind": stalled, "wrong_frames": wrong, "canvas_counts": canvas,
        "rss_start": start["rss"], "rss_end": end["rss"], "rss_growth_pct": growth("rss"),
        "cache_start": start["cache"], "cache_end": end["cache"], "pool_start": start["pool"],
        "pool_end": end["pool"], "malloc_start": start["malloc"], "malloc_end": end["malloc"],
        "plans_start": start["plans"], "plans_end": end["plans"],
        "rss_second_half_growth_pct": _second_half(series, end, end["time"] - start["time"]), "objects_start": start["objects"],
        "objects_end": end["objects"], "memory_series": series,
        "js_heap_start": start["js_heap"], "js_heap_end": end["js_heap"], "js_heap_growth_pct": growth("js_heap"),
        "console_errors": len(errors), "console_error_texts": errors[:20], "screenshot": str(shot),
    }


def _second_half(series: list[dict[str, Any]], end: dict[str, Any], seconds: float) -> float | None:
    """RSS growth from the sample nearest the soak's middle to its end (%): whether the growth
    has stopped once what fills up (the memos, the pool, malloc's arenas) is full. Printed
    beside the whole soak's growth, which the target judges (never instead of it)."""
    if not series:
        return None
    mid = min(series, key=lambda m: abs(m["t"] - seconds / 2))
    return 100.0 * (end["rss"] - mid["rss"]) / mid["rss"]


def describe(s: dict[str, Any]) -> str:
    m, f = s["moves"], s["frames"]
    return (f"soak {s['seconds']:.0f} s, {s['frame'][0]}x{s['frame'][1]}: {sum(m.values())} moves "
            f"({', '.join(f'{k} {v}' for k, v in m.items())}); frames painted {f['painted']}, checked "
            f"{f['checked']}, wrong {f['wrong']} (moves with no new frame in 5 s: {f['no_new_frame']} "
            f"{s.get('no_new_frame_by_kind', {})}); "
            f"kernel RSS {s['rss_start'] / 1e6:.0f} -> {s['rss_end'] / 1e6:.0f} MB "
            f"({s['rss_growth_pct']:+.1f} %; its engine cache {s['cache_start'] / 1e6:.0f} -> "
            f"{s['cache_end'] / 1e6:.0f} MB, recycled buffers {s['pool_start'] / 1e6:.0f} -> "
            f"{s['pool_end'] / 1e6:.0f} MB, malloc {s['malloc_start'] / 1e6:.0f} -> {s['malloc_end'] / 1e6:.0f} MB, "
            f"plans memo {s['plans_start']} -> {s['plans_end']}, "
            f"Python objects {s['objects_start']} -> {s['objects_end']}; RSS over the second half "
            f"{_pct(s.get('rss_second_half_growth_pct'))}), JS heap {s['js_heap_start'] / 1e6:.1f} -> "
            f"{s['js_heap_end'] / 1e6:.1f} MB ({s['js_heap_growth_pct']:+.1f} %); console errors "
            f"{s['console_errors']}")


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f} %"


def targets(s: dict[str, Any]) -> dict[str, bool]:
    return {
        "soak: kernel RSS growth <= 5%": s["rss_growth_pct"] <= 5.0,
        "soak: JS heap growth <= 5%": s["js_heap_growth_pct"] <= 5.0,
        "soak: 0 console errors": s["console_errors"] == 0,
        "soak: every frame checked is the right slice": s["frames"]["wrong"] == 0 and s["frames"]["checked"] > 0,
    }
