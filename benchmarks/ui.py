"""``python -m benchmarks ui``: the Explorer and a bare canvas in a real browser, and slider coalescing.

1. *slider -> pixel*: JupyterLab + headless Chromium, driven over the DevTools protocol with
   no Network domain (``--driver playwright`` for Playwright, whose Network domain ships
   every websocket frame's payload to its driver while the move is timed: p50 +40 ms here).
   Pages, in turn, in one JupyterLab and one browser (``--pages``): ``explorer`` (a 1024 x
   1024 frame of a 64 x 1024 x 1024 cube, warm cache) and the *bare canvas reference*
   (``benchmarks/ui_canvas.py``: tsexplore's image canvas and a slider sending a precomputed
   ``uint8`` frame per move) with an ipywidgets slider (``canvas-ipywidgets``) or the
   canvas's own slider (``canvas-js``, ``canvas-js-lazy``: acks ride on the next move).
   5 warm-up presses (``--warmup``), then 50 ArrowRight presses (``--moves``) with a random
   pause of 50-67 ms after each (random key phase against the display's frames); each is
   timed in the page from the key event to the second animation frame after the new frame
   was painted (p50 / p95).
2. *traffic per move*: websocket bytes and messages the browser received and sent on the
   kernel channel during the timed moves, counted in the page (bytes per displayed pixel).
3. *coalescing*: 1,000 slider events in one second against a 50 ms store; slab reads issued
   and whether the final frame is the last requested slice.
4. ``--pyramid`` (only): a 65,536 x 65,536 plane (sparse fine levels, real coarse ones) opened
   with a cold cache; time from opening to the overview painted on the canvas, reads per level,
   decoded bytes (see ``benchmarks/ui_canvas.py``).

``--nodelay on|both`` runs the browser part with ``tsexplore.jupyter_server_ext``
(TCP_NODELAY on kernel websockets; ``both``: without, then with).
Targets: Explorer p95 <= 100 ms and bytes/frame <= 2 x pixels x 4; bare canvas p95 <= 60 ms,
<= 1.1 bytes per pixel and <= 4 websocket messages per move; pyramid overview <= 300 ms with
decoded bytes <= 4 x screen pixels x 4; <= 25 reads, final frame correct.
Results go to ``benchmarks/results/ui.json``. ``--small`` uses a 64 x 256 x 256 cube.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "ui.json"

NOTEBOOK = [
    "import holoviews as hv, numpy as np, tsexplore as tse\n"
    "hv.extension('bokeh', inline=True, comms='ipywidgets')",
    "ds = tse.open_dataset({path!r})\n"
    "_ = ds.temp.isel(time=slice(0, {warm})).values  # warm cache\n"
    "ex = ds.tse.explore(width={px}, height={px}, stats=False)\n"
    "ex",
]
# Timing in the page without disturbing it: one listener on the plot title's ``text``
# property (set once by ARM) instead of polling every animation frame; polling forced a
# full frame (style, layout, commit) every 16 ms while the kernel's patch was in flight.
# A move ends at the second animation frame after the title changed: the first is the frame
# that paints the patch (image and title arrive in one patch), the second comes after it.
TIMED_MOVE = """(want) => new Promise((resolve) => {
  const t0 = window.__tse_t0;
  const finish = () => requestAnimationFrame(() => requestAnimationFrame(
      () => resolve(performance.now() - t0)));
  if (window.__tse_title.text.startsWith(want)) { finish(); return; }
  const timer = setTimeout(() => { window.__tse_waiter = null; resolve(-1); }, 20000);
  window.__tse_waiter = (text) => {
    if (text.startsWith(want)) { clearTimeout(timer); window.__tse_waiter = null; finish(); }
  };
})"""
ARM = """() => {
  const h = document.querySelector('.widget-slider .noUi-handle');
  if (!h.__tse) { h.addEventListener('keydown', () => { window.__tse_t0 = performance.now(); }, true); h.__tse = 1; }
  const title = [...window.Bokeh.documents].flatMap(d => [...d.all_models])
      .find(m => m.type === 'Title' && m.text.startsWith('temp · '));
  if (window.__tse_title !== title) {
    window.__tse_title = title;
    title.properties.text.change.connect(() => { if (window.__tse_waiter) window.__tse_waiter(title.text); });
  }
}"""

# Websocket bytes are counted in the page, not with Playwright's ``framereceived`` events:
# those ship every frame's payload (a megabyte per move, base64) from Chromium to the
# Playwright driver and on to Python while the move is being timed, on the same two cores.
COUNT_WS = """(() => {
  const Base = window.WebSocket;
  const tally = window.__tse_ws = {recv: 0, sent: 0, nrecv: 0, nsent: 0, on: false};
  const size = (d) => typeof d === 'string' ? d.length : (d.byteLength ?? d.size ?? 0);
  window.WebSocket = class extends Base {
    constructor(url, protocols) {
      super(url, protocols);
      if (String(url).includes('/channels')) {
        this.addEventListener('message', (e) => {
          if (tally.on) { tally.recv += size(e.data); tally.nrecv += 1; }
        });
      }
    }
    send(data) {
      if (tally.on && String(this.url).includes('/channels')) { tally.sent += size(data); tally.nsent += 1; }
      return super.send(data);
    }
  };
})()"""


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


FIRST_FRAME = ("[...(window.Bokeh?.documents ?? [])].flatMap(d => [...d.all_models])"
               ".some(m => m.type === 'Title' && m.text.startsWith('temp · time=0 '))")
HANDLE = ".widget-slider .noUi-handle"


class _Page:
    """The few calls the benchmark makes; the subclasses adapt one driver's page to them."""

    def __init__(self, page: Any) -> None:
        self.page = page

    def add_init_script(self, source: str) -> None:
        self.page.add_init_script(source)

    def goto(self, url: str) -> None:
        self.page.goto(url)


class _PlaywrightPage(_Page):
    """A Playwright page (``--driver playwright``)."""

    def run_all_cells(self) -> None:
        from tsexplore.testing.lab import run_all_cells

        run_all_cells(self.page, timeout_ms=300_000)

    def wait_for(self, expression: str) -> None:
        self.page.wait_for_function(f"() => {expression}")

    def call(self, function: str, *args: Any) -> Any:
        return self.page.evaluate(function, *args)

    def press(self, key: str) -> None:
        self.page.keyboard.press(key)

    def screenshot(self, path: Path) -> None:
        self.page.screenshot(path=str(path))


class _CdpPage(_Page):
    """A page driven over the DevTools protocol without the Network domain (the default)."""

    def run_all_cells(self) -> None:
        from tsexplore.testing.lab import ALL_RAN, ERRORS, KERNEL_IDLE

        self.page.wait_for(KERNEL_IDLE, timeout=120)
        self.page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells'), true")
        time.sleep(0.5)
        self.page.wait_for(f"({ALL_RAN})()", timeout=300, poll=0.25)
        errors = self.page.call(ERRORS)
        if errors:
            raise AssertionError("a cell failed in the browser:\n" + "\n".join(errors)[-3000:])

    def wait_for(self, expression: str) -> None:
        self.page.wait_for(expression, timeout=90)

    def call(self, function: str, *args: Any) -> Any:
        return self.page.call(function, *args)

    def press(self, key: str) -> None:
        self.page.press(key)

    def screenshot(self, path: Path) -> None:
        self.page.screenshot(path)


@contextlib.contextmanager
def _open_page(driver: str, profile: Path) -> Iterator[_Page]:
    if driver == "playwright":
        from tsexplore.testing.lab import chromium

        with chromium(profile, 1800, 1500) as page:
            yield _PlaywrightPage(page)
    elif driver == "cdp":
        from tsexplore.testing.cdp import chromium_cdp

        with chromium_cdp(profile, 1800, 1500) as page:
            yield _CdpPage(page)
    else:
        raise ValueError(f"unknown driver {driver!r}; known: cdp, playwright")


# JupyterLab asks "leave the page?" when a notebook has unsaved output, which blocks the next
# page's navigation: the benchmark never registers that prompt
NO_LEAVE_PROMPT = """(() => {
  const add = window.addEventListener.bind(window);
  window.addEventListener = (type, fn, opts) => (type === 'beforeunload' ? undefined : add(type, fn, opts));
})()"""


def _shutdown_kernels(url: str, token: str) -> None:
    """Stop every kernel of the server (the next page gets the machine to itself)."""
    import urllib.request

    with urllib.request.urlopen(f"{url}/api/kernels?token={token}", timeout=10) as r:
        kernels = json.load(r)
    for k in kernels:
        req = urllib.request.Request(f"{url}/api/kernels/{k['id']}?token={token}", method="DELETE")
        urllib.request.urlopen(req, timeout=30).close()


def _open_notebook(page: _Page, url: str, token: str, workdir: Path, name: str, cells: list[str]) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, workdir / f"{name}.ipynb")
    # a workspace of its own: JupyterLab does not reopen the previous page's notebook
    page.goto(f"{url}/lab/workspaces/{name}/tree/{name}.ipynb?token={token}")
    page.run_all_cells()


def _timed_moves(page: _Page, handle: str, timed: str, want: Any, moves: int, warmup: int,
                 seed: int) -> tuple[list[float], dict[str, Any]]:
    """``warmup`` + ``moves`` ArrowRight presses on ``handle``, each timed by ``timed(want(i))``;
    a random pause (50-67 ms) after each, so key presses fall at random phases of the
    display's frames. Websocket traffic is counted over the timed moves only."""
    rng = random.Random(seed)
    page.call(f"() => document.querySelector({json.dumps(handle)}).focus()")
    latencies = []
    for i in range(1, warmup + moves + 1):
        if i == warmup + 1:
            page.call("() => { Object.assign(window.__tse_ws, {recv: 0, sent: 0, nrecv: 0, nsent: 0, on: true}); }")
        page.press("ArrowRight")
        ms = page.call(timed, want(i))
        if i > warmup:
            latencies.append(ms)
        time.sleep(0.05 + rng.uniform(0, 1 / 60))
    time.sleep(0.5)
    traffic = page.call("() => { window.__tse_ws.on = false; return window.__tse_ws; }")
    return latencies, traffic


def _summary(kind: str, latencies: list[float], traffic: dict[str, Any], px: int, moves: int,
             warmup: int) -> dict[str, Any]:
    ok = [v for v in latencies if v >= 0]
    pixels = px * px
    return {
        "page": kind, "frame": [px, px], "moves": moves, "warmup": warmup,
        "timed_out": len(latencies) - len(ok),
        "slider_to_pixel_ms": {"p50": float(np.percentile(ok, 50)) if ok else None,
                               "p95": float(np.percentile(ok, 95)) if ok else None,
                               "max": max(ok) if ok else None},
        "bytes_per_frame": traffic["recv"] / moves,
        "bytes_per_pixel": traffic["recv"] / moves / pixels,
        "bytes_sent_back_per_frame": traffic["sent"] / moves,
        "ws_messages_per_move": {"received": traffic["nrecv"] / moves, "sent": traffic["nsent"] / moves,
                                 "total": (traffic["nrecv"] + traffic["nsent"]) / moves},
        "displayed_pixels": pixels,
        "bytes_limit": 2 * pixels * 4,
    }


def explorer_page(page: _Page, url: str, token: str, workdir: Path, path: Path, px: int, moves: int,
                  warmup: int, seed: int) -> dict[str, Any]:
    """The Explorer: slider-to-pixel latency and websocket traffic per move."""
    cells = [c.format(path=str(path), warm=moves + warmup + 2, px=px) for c in NOTEBOOK]
    _open_notebook(page, url, token, workdir, "explorer", cells)
    page.wait_for(FIRST_FRAME)
    time.sleep(1.0)
    page.call(ARM)
    latencies, traffic = _timed_moves(page, HANDLE, TIMED_MOVE, lambda i: f"temp · time={i} ",
                                      moves, warmup, seed)
    page.screenshot(workdir / "ui_bench.png")
    return dict(_summary("explorer", latencies, traffic, px, moves, warmup),
                screenshot=str(workdir / "ui_bench.png"))


def canvas_page(page: _Page, url: str, token: str, workdir: Path, px: int, moves: int, warmup: int,
                seed: int, slider: str, ack: str) -> dict[str, Any]:
    """The bare canvas reference: a precomputed uint8 frame per slider move."""
    from .ui_canvas import CANVAS_ARM, CANVAS_FIRST, CANVAS_MOVE, HANDLES, canvas_cells

    name = f"canvas-{slider}-{ack}"
    _open_notebook(page, url, token, workdir, name, canvas_cells(px, slider, ack))
    page.wait_for(CANVAS_FIRST)
    time.sleep(1.0)
    page.call(CANVAS_ARM, HANDLES[slider])
    latencies, traffic = _timed_moves(page, HANDLES[slider], CANVAS_MOVE, lambda i: i, moves, warmup, seed)
    page.screenshot(workdir / f"ui_bench_{name}.png")
    return dict(_summary(name, latencies, traffic, px, moves, warmup), slider=slider, ack=ack)


PAGES = ("explorer", "canvas-ipywidgets", "canvas-js", "canvas-js-lazy")
NODELAY = ["--ServerApp.jpserver_extensions=tsexplore.jupyter_server_ext=True"]


def browser(path: Path, px: int, moves: int, workdir: Path, driver: str = "cdp", *,
            pages: tuple[str, ...] = PAGES, warmup: int = 5, seed: int = 0,
            nodelay: bool = False) -> dict[str, Any]:
    """Each page of ``pages`` in turn, in one JupyterLab and one browser (``nodelay``: with
    the TCP_NODELAY server extension)."""
    from tsexplore.testing.lab import jupyterlab

    out: dict[str, Any] = {"driver": driver, "nodelay": nodelay, "pages": {}}
    with jupyterlab(workdir, args=NODELAY if nodelay else ()) as (url, token), \
            _open_page(driver, workdir / "profile") as page:
        page.add_init_script(COUNT_WS)
        page.add_init_script(NO_LEAVE_PROMPT)
        for name in pages:
            if name == "explorer":
                res = explorer_page(page, url, token, workdir, path, px, moves, warmup, seed)
            elif name.startswith("canvas-"):
                parts = name.split("-")
                res = canvas_page(page, url, token, workdir, px, moves, warmup, seed, parts[1],
                                  parts[2] if len(parts) > 2 else "eager")
            else:
                raise ValueError(f"unknown page {name!r}; known: {', '.join(PAGES)}")
            out["pages"][name] = res
            _shutdown_kernels(url, token)
    return out


def pyramid_browser(px: int, workdir: Path, store: Path, driver: str = "cdp",
                    nodelay: bool = False) -> dict[str, Any]:
    """``--pyramid``: a cold 65,536^2 pyramid opened and its overview painted on the canvas."""
    from tsexplore.testing.lab import jupyterlab

    from .ui_canvas import PYRAMID_CELLS, PYRAMID_SIZE, pyramid_page

    with jupyterlab(workdir, args=NODELAY if nodelay else ()) as (url, token), \
            _open_page(driver, workdir / "profile") as page:
        cells = [c.format(n=PYRAMID_SIZE, px=px) for c in PYRAMID_CELLS]
        _open_notebook(page, url, token, workdir, "pyramid", cells)
        res = pyramid_page(page, store, px)
        shot = ROOT / "test-artifacts" / "bench" / "ui_bench_pyramid.png"
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(shot)
    return dict(res, nodelay=nodelay, driver=driver, screenshot=str(shot.relative_to(ROOT)))


def _print(result: dict[str, Any], targets: dict[str, bool]) -> None:
    c = result["coalescing"]
    if c:
        print(f"coalescing: {c['events']} events in {c['seconds']} s, {c['store_latency_s'] * 1e3:.0f} ms store -> "
              f"{c['reads']} reads, {c['frames']} frames, {c['cancelled']} cancelled, final slice "
              f"{c['final_slice']} ({'ok' if c['final_ok'] else 'WRONG'}), update() max {c['update_max_ms']:.2f} ms")
    for key in ("browser", "browser_nodelay"):
        for name, b in (result.get(key) or {}).get("pages", {}).items():
            s, m = b["slider_to_pixel_ms"], b["ws_messages_per_move"]
            print(f"{name:22s}{' (nodelay)' if key.endswith('nodelay') else ''}: {b['frame'][0]}x{b['frame'][1]}, "
                  f"{b['moves']} moves: slider->pixel p50 {s['p50']:.0f} ms, p95 {s['p95']:.0f} ms "
                  f"(max {s['max']:.0f}); {b['bytes_per_pixel']:.2f} B/pixel, {m['received']:.1f} msgs in "
                  f"+ {m['sent']:.1f} out per move, {b['bytes_sent_back_per_frame'] / 1e3:.1f} kB back")
    p = result.get("pyramid")
    if p:
        ms = {k: "-" if p[k] is None else f"{p[k]:.0f}" for k in ("first_paint_ms", "overview_ms")}
        print(f"pyramid {p['plane'][0]}^2 on {p['screen'][0]}^2: level {p['target']} {p['levels'][p['target']]}, "
              f"first paint {ms['first_paint_ms']} ms, overview {ms['overview_ms']} ms after open (cold); "
              f"reads per level {p['reads_per_level']}, decoded {p['decoded_bytes'] / 1e6:.1f} MB "
              f"(limit {p['decoded_limit'] / 1e6:.1f})")
    for k, v in targets.items():
        print(f"  {'PASS' if v else 'MISS'} {k}")
    print(f"-> {RESULTS.relative_to(ROOT)}")


def _targets(result: dict[str, Any]) -> dict[str, bool]:
    targets: dict[str, bool] = {}
    c = result["coalescing"]
    if c:
        targets.update({"coalesce_reads<=25": c["reads"] <= 25, "coalesce_final_slice": c["final_ok"]})
    pages = (result.get("browser") or {}).get("pages", {})
    for name, b in pages.items():
        p95 = b["slider_to_pixel_ms"]["p95"]
        limit = 100 if name == "explorer" else 60
        targets[f"{name}: slider_to_pixel_p95<={limit}ms"] = (
            p95 is not None and p95 <= limit and b["timed_out"] == 0)
        if name == "explorer":
            targets["explorer: bytes_per_frame<=2*px*4"] = b["bytes_per_frame"] <= b["bytes_limit"]
        else:
            targets[f"{name}: bytes_per_pixel<=1.1"] = b["bytes_per_pixel"] <= 1.1
            targets[f"{name}: ws_messages_per_move<=4"] = b["ws_messages_per_move"]["total"] <= 4
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
    ap.add_argument("--skip-browser", action="store_true")
    ap.add_argument("--driver", choices=("cdp", "playwright"), default="cdp",
                    help="how Chromium is driven while timing (default: DevTools protocol with "
                         "no domain enabled; Playwright ships every websocket frame to its driver)")
    ap.add_argument("--json-only", action="store_true")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args, _unknown = ap.parse_known_args(argv or [])

    import tsexplore as tse

    result: dict[str, Any] = {"benchmark": "ui", "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                              "load_avg": os.getloadavg(), "coalescing": None}
    if not args.pyramid:
        result["coalescing"] = coalescing()
    chromium_found = True
    if not args.skip_browser:
        from tsexplore.testing.lab import find_chromium

        chromium_found = find_chromium() is not None
        if not chromium_found:
            print("chromium not found: skipping the browser part", file=sys.stderr)
    if not args.skip_browser and chromium_found:
        n = 256 if args.small else 1024
        if args.pyramid:
            from .ui_canvas import pyramid_store

            store = pyramid_store(ROOT / "data" / "bench_pyramid_65536.zarr", progress=not args.json_only)
            with tempfile.TemporaryDirectory(prefix="tse-ui-bench-") as tmp:
                result["pyramid"] = pyramid_browser(n, Path(tmp), store, args.driver, args.nodelay == "on")
        else:
            path = args.path or ROOT / "data" / f"bench_ui_cube_{n}.zarr"
            tse.sample_data("cube", path, shape=(64, n, n), chunks=(16, min(256, n), min(256, n)),
                            progress=not args.json_only)
            pages = tuple(p for p in args.pages.split(",") if p)
            runs = {"off": [False], "on": [True], "both": [False, True]}[args.nodelay]
            for nodelay in runs:
                with tempfile.TemporaryDirectory(prefix="tse-ui-bench-") as tmp:
                    run = browser(path.resolve(), n, args.moves, Path(tmp), args.driver, pages=pages,
                                  warmup=args.warmup, seed=args.seed, nodelay=nodelay)
                    _keep_screenshot(run)
                key = "browser_nodelay" if nodelay and len(runs) == 2 else "browser"
                result[key] = run
    targets = _targets(result)
    result["targets"] = targets
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    if args.json_only:
        print(json.dumps(result))
    else:
        _print(result, targets)
    return 1 if args.check and not all(targets.values()) else 0


def _keep_screenshot(run: dict[str, Any]) -> None:
    ex = run["pages"].get("explorer")
    if not ex:
        return
    shot = ROOT / "test-artifacts" / "bench" / "ui_bench.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    if os.path.exists(ex["screenshot"]):
        shot.write_bytes(Path(ex["screenshot"]).read_bytes())
    ex["screenshot"] = str(shot.relative_to(ROOT))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
