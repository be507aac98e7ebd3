"""``python -m benchmarks ui``: the Explorer and a bare canvas in a real browser, and slider coalescing.

1. *slider -> pixel*: JupyterLab + headless Chromium, driven over the DevTools protocol with
   no Network domain (``--driver playwright`` for Playwright, whose Network domain ships
   every websocket frame's payload to its driver while the move is timed: p50 +40 ms here).
   Pages, in turn, in one JupyterLab and one browser (``--pages``): ``explorer`` (a 1024 x
   1024 frame of a 64 x 1024 x 1024 cube, warm cache, the slider in the canvas: the default),
   ``explorer-ipywidgets`` (the same with an ipywidgets slider), and the *bare canvas
   reference* (``benchmarks/ui_canvas.py``: tsexplore's image canvas and a slider sending a
   precomputed ``uint8`` frame per move) with an ipywidgets slider (``canvas-ipywidgets``) or
   the canvas's own slider (``canvas-js``, ``canvas-js-lazy``: acks ride on the next move).
   5 warm-up presses (``--warmup``), then 50 ArrowRight presses (``--moves``) with a random
   pause of 50-67 ms after each (random key phase against the display's frames); each is
   timed in the page from the key event to the second animation frame after the frame of
   the new index was painted (``tse-paint``; p50 / p95).
2. *traffic per move*: websocket bytes and messages the browser received and sent on the
   kernel channel during the timed moves, counted in the page (bytes per displayed pixel).
3. *coalescing*: 1,000 slider events in one second against a 50 ms store; slab reads issued
   and whether the final frame is the last requested slice.
4. ``--under-load``: the Explorer page three times, idle and while ``tse.reduce(ds.temp, "mean",
   dim="time", background=True)`` scans the same cube again and again (``explorer-load``; and
   ``explorer-loadoff``, the same with ``tse.config.set(visible_first=False)``: the reduction
   does not yield, a reference for what the priority buys);
   target: its p95 <= 1.3 x the idle p95 (the visible reads win).
5. ``--soak [SECONDS]`` (only): random slider, pan and zoom moves in the browser for SECONDS
   (default 600), every frame painted checked against NumPy; kernel RSS, JS heap and console
   errors (``benchmarks/ui_soak.py``). Targets: growth <= 5 %, 0 errors, 0 wrong frames.
6. ``--ortho`` (only): orthogonal views and a cold projection (``benchmarks/ui_ortho.py``):
   a crosshair move that reads the three planes against a single-plane slider move (target:
   its p95 <= 1.5 x), and a cold ``ex.project("max", dim="time")`` streamed with the StatsPanel
   live (partial pictures painted, the panel ticking).
7. ``--pyramid`` (only): a 65,536 x 65,536 plane (sparse fine levels, real coarse ones) opened
   with a cold cache and shown by the Explorer; time from opening to the overview painted
   (its last tile), reads per level, decoded bytes (see ``benchmarks/ui_canvas.py``).

``--nodelay on|both`` runs the browser part with ``tsexplore.jupyter_server_ext``
(TCP_NODELAY on kernel websockets; ``both``: without, then with).
Targets: p95 <= 60 ms, <= 1.1 bytes per displayed pixel and <= 4 websocket messages per
move (each move's own count, from its key press to the next: the median over the moves; the
mean with stray messages is printed too), for the Explorer and the bare canvas alike; pyramid overview <= 300 ms with decoded
bytes <= 4 x screen pixels x 4; <= 25 reads, final frame correct.
``--stages``: one Explorer move in the kernel, stage by stage (read, range, quantise,
histogram, show; CPU time, headless) beside the bare canvas's move (``benchmarks/ui_stages.py``).
Results go to ``benchmarks/results/ui.json``. ``--small`` uses a 64 x 256 x 256 cube.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from .ui_pages import (
    COUNT_WS,
    NO_LEAVE_PROMPT,
    PAGE_STAGES,
    canvas_page,
    explorer_page,
    open_page,
    shutdown_kernels,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "ui.json"


def coalescing(events: int = 1000, seconds: float = 1.0, latency: float = 0.05) -> dict[str, Any]:
    """``events`` slider updates spread over ``seconds`` against a ``latency`` store."""
    import tsexplore as tse
    from tsexplore.controller import PlaneGeometry, ViewController
    from tsexplore.sources import SourceOptions, SyntheticSource

    src = SyntheticSource(
        (events, 256, 256), (1, 256, 256), latency=latency, options=SourceOptions(prefetch="off")
    )
    try:
        with ViewController(src, PlaneGeometry.of(src, "y", "x"), engine=tse.get_engine()) as ctl:
            start = time.perf_counter()
            worst = 0.0
            for i in range(events):
                t = time.perf_counter()
                ctl.update(indices={"time": i})
                worst = max(worst, time.perf_counter() - t)
                time.sleep(max(0.0, start + (i + 1) * seconds / events - time.perf_counter()))
            frame = ctl.wait(timeout=30)
            want = src.evaluate((slice(events - 1, events), slice(0, 256), slice(0, 256)))[0]
            return {
                "events": events, "seconds": seconds, "store_latency_s": latency,
                "reads": ctl.counts["reads"], "frames": ctl.counts["frames"],
                "cancelled": ctl.counts["cancelled"],
                "final_slice": frame.request.state.index("time"),
                "final_ok": bool(frame.request.state.index("time") == events - 1
                                 and np.array_equal(frame.data, want)),
                "update_max_ms": worst * 1e3,
            }
    finally:
        tse.close()


PAGES = ("explorer", "explorer-ipywidgets", "canvas-ipywidgets", "canvas-js", "canvas-js-lazy")
NODELAY = ["--ServerApp.jpserver_extensions=tsexplore.jupyter_server_ext=True"]


def browser(path: Path, px: int, moves: int, workdir: Path, driver: str = "cdp", *,
            pages: tuple[str, ...] = PAGES, warmup: int = 5, seed: int = 0,
            nodelay: bool = False) -> dict[str, Any]:
    """Each page of ``pages`` in turn, in one JupyterLab and one browser (``nodelay``: with
    the TCP_NODELAY server extension)."""
    from tsexplore.testing.lab import jupyterlab

    out: dict[str, Any] = {"driver": driver, "nodelay": nodelay, "pages": {}}
    with jupyterlab(workdir, args=NODELAY if nodelay else ()) as (url, token), \
            open_page(driver, workdir / "profile") as page:
        page.add_init_script(COUNT_WS)
        page.add_init_script(NO_LEAVE_PROMPT)
        for name in pages:
            parts = name.split("-")
            if parts[0] == "explorer":
                load = parts[-1] if parts[-1] in ("load", "loadoff") else ""
                parts = parts[:-1] if load else parts
                res = explorer_page(page, url, token, workdir, path, px, moves, warmup, seed,
                                    parts[1] if len(parts) > 1 else "canvas", load=load)
            elif parts[0] in ("ortho", "projection"):
                from .ui_ortho import ortho_page, projection_page

                res = (projection_page(page, url, token, workdir, path, px) if parts[0] == "projection" else
                       ortho_page(page, url, token, workdir, path, px, moves, warmup, seed, parts[1] == "cross"))
            elif parts[0] == "canvas":
                res = canvas_page(page, url, token, workdir, px, moves, warmup, seed, parts[1],
                                  parts[2] if len(parts) > 2 else "eager")
            else:
                raise ValueError(f"unknown page {name!r}; known: {', '.join(PAGES)}")
            out["pages"][name] = res
            shutdown_kernels(url, token)
    return out


def pyramid_browser(px: int, workdir: Path, store: Path, driver: str = "cdp",
                    nodelay: bool = False) -> dict[str, Any]:
    """``--pyramid``: a cold 65,536^2 pyramid opened and its overview painted on the canvas."""
    from tsexplore.testing.lab import jupyterlab

    from .ui_canvas import PYRAMID_CELLS, PYRAMID_SIZE, pyramid_page
    from .ui_pages import open_notebook

    with jupyterlab(workdir, args=NODELAY if nodelay else ()) as (url, token), \
            open_page(driver, workdir / "profile") as page:
        cells = [c.format(n=PYRAMID_SIZE, px=px) for c in PYRAMID_CELLS]
        open_notebook(page, url, token, workdir, "pyramid", cells)
        res = pyramid_page(page, store, px)
        shot = ROOT / "test-artifacts" / "bench" / "ui_bench_pyramid.png"
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(shot)
    return dict(res, nodelay=nodelay, driver=driver, screenshot=str(shot.relative_to(ROOT)))


def _print(result: dict[str, Any], targets: dict[str, bool]) -> None:
    c = result.get("coalescing")
    if c:
        print(f"coalescing: {c['events']} events in {c['seconds']} s, {c['store_latency_s'] * 1e3:.0f} ms store -> "
              f"{c['reads']} reads, {c['frames']} frames, {c['cancelled']} cancelled, final slice "
              f"{c['final_slice']} ({'ok' if c['final_ok'] else 'WRONG'}), update() max {c['update_max_ms']:.2f} ms")
    for key in ("browser", "browser_nodelay"):
        from .ui_ortho import describe as describe_ortho

        for line in describe_ortho((result.get(key) or {}).get("pages", {})):
            print(line)
        for name, b in (result.get(key) or {}).get("pages", {}).items():
            if "slider_to_pixel_ms" not in b:
                continue
            s, m = b["slider_to_pixel_ms"], b["ws_messages_per_move"]
            print(f"{name:22s}{' (nodelay)' if key.endswith('nodelay') else ''}: {b['frame'][0]}x{b['frame'][1]}, "
                  f"{b['moves']} moves: slider->pixel p50 {s['p50']:.0f} ms, p95 {s['p95']:.0f} ms "
                  f"(max {s['max']:.0f}); {b['bytes_per_pixel']:.2f} B/pixel, {m['received']:.2f} msgs in "
                  f"+ {m['sent']:.2f} out per move (each move: median {m.get('median')}, max {m.get('max')}), "
                  f"{b['bytes_sent_back_per_frame'] / 1e3:.1f} kB back"
                  + (f"; frames {b['canvas'].get('by_encoding')}" if b.get("canvas") else "")
                  + (f"; {b['scans']} background scans, {b.get('pauses', 0)} pauses "
                     f"({b.get('paused_s', 0)} s)" if "scans" in b else ""))
    for key in ("browser", "browser_nodelay"):
        pages = (result.get(key) or {}).get("pages", {})
        if pages:
            print("in the page, per frame (ms p50): " + ", ".join(n for n, _, _ in PAGE_STAGES)
                  + ", draw's histogram")
        for name, b in pages.items():
            if "slider_to_pixel_ms" not in b:
                continue
            st = b.get("page_stages_ms") or {}
            cells = [("-" if st.get(n) is None else f"{st[n]['p50']:.2f}")
                     for n in [n for n, _, _ in PAGE_STAGES] + ["draw_histogram"]]
            print(f"  {name:22s} {' / '.join(cells)}  ({st.get('frames', 0)} frames)")
    p = result.get("pyramid")
    if p:
        ms = {k: "-" if p[k] is None else f"{p[k]:.0f}" for k in ("first_paint_ms", "overview_ms")}
        print(f"pyramid {p['plane'][0]}^2 on {p['screen'][0]}^2: level {p['target']} {p['levels'][p['target']]}, "
              f"first paint {ms['first_paint_ms']} ms, overview {ms['overview_ms']} ms after open (cold); "
              f"reads per level {p['reads_per_level']}, decoded {p['decoded_bytes'] / 1e6:.1f} MB "
              f"(limit {p['decoded_limit'] / 1e6:.1f})")
    if result.get("stages"):
        from .ui_stages import describe

        print(describe(result["stages"]))
    if result.get("soak"):
        from .ui_soak import describe as describe_soak

        print(describe_soak(result["soak"]))
        for text in result["soak"]["console_error_texts"][:5]:
            print(f"  console: {text[:200]}")
        for bad in result["soak"]["wrong_frames"][:5]:
            print(f"  wrong frame: {bad}")
    for k, v in targets.items():
        print(f"  {'PASS' if v else 'MISS'} {k}")
    print(f"-> {RESULTS.relative_to(ROOT)}")


def _targets(result: dict[str, Any]) -> dict[str, bool]:
    targets: dict[str, bool] = {}
    c = result.get("coalescing")
    if c:
        targets.update({"coalesce_reads<=25": c["reads"] <= 25, "coalesce_final_slice": c["final_ok"]})
    pages = (result.get("browser") or {}).get("pages", {})
    from .ui_ortho import targets as ortho_targets

    targets.update(ortho_targets(pages))
    for name, b in pages.items():
        if "slider_to_pixel_ms" not in b:
            continue
        p95 = b["slider_to_pixel_ms"]["p95"]
        targets[f"{name}: slider_to_pixel_p95<=60ms"] = p95 is not None and p95 <= 60 and b["timed_out"] == 0
        targets[f"{name}: bytes_per_pixel<=1.1"] = b["bytes_per_pixel"] <= 1.1
        # each move's own count (its median over the moves), not the mean with stray messages
        # (2 lone acks in 50 moves read as 4.04)
        m = b["ws_messages_per_move"]
        targets[f"{name}: ws_messages_per_move<=4"] = (m["median"] if m.get("median") is not None
                                                      else m["total"]) <= 4
    ex, bare = pages.get("explorer"), pages.get("canvas-js-lazy")  # the same messages per move
    if ex and bare and ex["slider_to_pixel_ms"]["p50"] and bare["slider_to_pixel_ms"]["p50"]:
        e, b = ex["slider_to_pixel_ms"], bare["slider_to_pixel_ms"]
        targets[f"explorer p50 {e['p50']:.0f} <= bare canvas (js-lazy) p50 {b['p50']:.0f} + 5 ms"] = (
            e["p50"] <= b["p50"] + 5)
        targets[f"explorer p95 {e['p95'] / b['p95']:.2f}x bare canvas (js-lazy) p95 <= 1.1x"] = (
            e["p95"] <= 1.1 * b["p95"])
    loaded, idle = pages.get("explorer-load"), pages.get("explorer")
    if loaded and idle and idle["slider_to_pixel_ms"]["p95"]:
        ratio = loaded["slider_to_pixel_ms"]["p95"] / idle["slider_to_pixel_ms"]["p95"]
        targets[f"under load: p95 {ratio:.2f}x idle <= 1.3x"] = ratio <= 1.3
        off = pages.get("explorer-loadoff")
        if off and off["slider_to_pixel_ms"]["p95"]:  # a reference: what visible-first buys
            print(f"under load without visible-first (explorer-loadoff): p95 "
                  f"{off['slider_to_pixel_ms']['p95'] / idle['slider_to_pixel_ms']['p95']:.2f}x idle")
    if result.get("soak"):
        from .ui_soak import targets as soak_targets

        targets.update(soak_targets(result["soak"]))
    p = result.get("pyramid")
    if p:
        targets["pyramid: overview<=300ms"] = p["overview_ms"] is not None and p["overview_ms"] <= 300
        targets["pyramid: decoded<=4*screen*itemsize"] = p["decoded_bytes"] <= p["decoded_limit"]
    return targets


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks ui", description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="64 x 256 x 256 cube, 256 px frame")
    ap.add_argument("--moves", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5, help="untimed moves first")
    ap.add_argument("--seed", type=int, default=0, help="of the random pause between moves")
    ap.add_argument("--path", type=Path, default=None, help="cube to write/reuse")
    ap.add_argument("--pages", default=",".join(PAGES),
                    help=f"comma-separated, in one JupyterLab (default: {','.join(PAGES)})")
    ap.add_argument("--nodelay", choices=("off", "on", "both"), default="off",
                    help="TCP_NODELAY on kernel websockets (tsexplore.jupyter_server_ext); both: two runs")
    ap.add_argument("--pyramid", action="store_true",
                    help="only: open a 65,536^2 pyramid cold and time its overview on the canvas")
    ap.add_argument("--soak", type=float, nargs="?", const=600.0, default=None, metavar="SECONDS",
                    help="only: random slider, pan and zoom moves in the browser for SECONDS "
                         "(default 600), every frame checked, RSS / JS heap / console errors "
                         "(benchmarks/ui_soak.py)")
    ap.add_argument("--soak-moves", default="jump,step,pan,zoom",
                    help="the soak's kinds of move, comma-separated (default: all four)")
    ap.add_argument("--ortho", action="store_true",
                    help="only: orthogonal crosshair moves against single-plane moves, and a cold "
                         "projection with the StatsPanel live (benchmarks/ui_ortho.py)")
    ap.add_argument("--under-load", action="store_true",
                    help="the Explorer idle and while background reductions scan the same cube")
    ap.add_argument("--stages", action="store_true",
                    help="also time one Explorer move in the kernel stage by stage (headless, "
                         "CPU time) beside the bare canvas's (benchmarks/ui_stages.py)")
    ap.add_argument("--skip-browser", action="store_true")
    ap.add_argument("--driver", choices=("cdp", "playwright"), default="cdp",
                    help="how Chromium is driven while timing (default: DevTools protocol with "
                         "no domain enabled; Playwright ships every websocket frame to its driver)")
    ap.add_argument("--json-only", action="store_true")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args, _unknown = ap.parse_known_args(argv or [])


    result: dict[str, Any] = {"benchmark": "ui", "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                              "load_avg": os.getloadavg(), "coalescing": None}
    if not args.pyramid and args.soak is None:
        result["coalescing"] = coalescing()
    chromium_found = True
    if not args.skip_browser:
        from tsexplore.testing.lab import find_chromium

        chromium_found = find_chromium() is not None
        if not chromium_found:
            print("chromium not found: skipping the browser part", file=sys.stderr)
    if not args.skip_browser and chromium_found:
        n = 256 if args.small else 1024
        if args.soak is not None:
            from .ui_soak import soak

            with tempfile.TemporaryDirectory(prefix="tse-ui-soak-") as tmp:
                result["soak"] = soak(cube(args, n).resolve(), n, args.soak, Path(tmp), seed=args.seed + 7,
                                      kinds=tuple(k for k in args.soak_moves.split(",") if k))
                kept = ROOT / "test-artifacts" / "bench" / "ui_soak.png"
                kept.parent.mkdir(parents=True, exist_ok=True)
                if os.path.exists(result["soak"]["screenshot"]):
                    kept.write_bytes(Path(result["soak"]["screenshot"]).read_bytes())
                result["soak"]["screenshot"] = str(kept.relative_to(ROOT))
        elif args.pyramid:
            from .ui_canvas import pyramid_store

            store = pyramid_store(ROOT / "data" / "bench_pyramid_65536.zarr", progress=not args.json_only)
            with tempfile.TemporaryDirectory(prefix="tse-ui-bench-") as tmp:
                result["pyramid"] = pyramid_browser(n, Path(tmp), store, args.driver, args.nodelay == "on")
        else:
            path = cube(args, n)
            pages = tuple(p for p in args.pages.split(",") if p)
            if args.under_load:
                pages = ("explorer", "explorer-load", "explorer-loadoff")
            if args.ortho:
                from .ui_ortho import ORTHO_PAGES

                pages = ORTHO_PAGES
            runs = {"off": [False], "on": [True], "both": [False, True]}[args.nodelay]
            for nodelay in runs:
                with tempfile.TemporaryDirectory(prefix="tse-ui-bench-") as tmp:
                    run = browser(path.resolve(), n, args.moves, Path(tmp), args.driver, pages=pages,
                                  warmup=args.warmup, seed=args.seed, nodelay=nodelay)
                    _keep_screenshot(run)
                key = "browser_nodelay" if nodelay and len(runs) == 2 else "browser"
                result[key] = run
    if args.stages:
        from .ui_stages import stages

        n = 256 if args.small else 1024
        result["stages"] = stages(cube(args, n), n, args.moves)
    targets = _targets(result)
    result["targets"] = targets
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    if args.json_only:
        print(json.dumps(result))
    else:
        _print(result, targets)
    return 1 if args.check and not all(targets.values()) else 0


def cube(args: argparse.Namespace, n: int) -> Path:
    """The 64 x n x n cube the pages show (written once, then reused)."""
    import tsexplore as tse

    path = args.path or ROOT / "data" / f"bench_ui_cube_{n}.zarr"
    tse.sample_data("cube", path, shape=(64, n, n), chunks=(16, min(256, n), min(256, n)),
                    progress=not args.json_only)
    return Path(path)


def _keep_screenshot(run: dict[str, Any]) -> None:
    for name, page in run["pages"].items():
        shot = page.get("screenshot")
        if not shot:
            continue
        kept = ROOT / "test-artifacts" / "bench" / f"ui_bench_{name}.png"
        kept.parent.mkdir(parents=True, exist_ok=True)
        if os.path.exists(shot):
            kept.write_bytes(Path(shot).read_bytes())
        page["screenshot"] = str(kept.relative_to(ROOT))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
