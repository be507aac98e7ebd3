"""``python -m benchmarks ui``: the Explorer in a real browser, and slider coalescing.

1. *slider -> pixel*: JupyterLab + headless Chromium, driven over the DevTools protocol with
   no Network domain (``--driver playwright`` for Playwright, whose Network domain ships
   every websocket frame's payload to its driver while the move is timed: p50 +40 ms here);
   the Explorer shows a 1024 x 1024 frame of a 64 x 1024 x 1024 cube with a warm cache;
   50 ArrowRight presses on the time slider; each is timed in the page from the key event to the animation frame after
   the new slice's plot update arrived (p50 / p95).
2. *bytes per frame*: websocket bytes the browser received (and sent back) on the kernel
   channel during those moves, counted in the page, per move, against 2 x displayed
   pixels x 4 bytes.
3. *coalescing*: 1,000 slider events in one second against a 50 ms store; slab reads issued
   and whether the final frame is the last requested slice.

Targets: p95 <= 100 ms; bytes/frame <= 2 x pixels x 4; <= 25 reads, final frame correct.
Results go to ``benchmarks/results/ui.json``. ``--small`` uses a 64 x 256 x 256 cube.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
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
  const tally = window.__tse_ws = {recv: 0, sent: 0, on: false};
  const size = (d) => typeof d === 'string' ? d.length : (d.byteLength ?? d.size ?? 0);
  window.WebSocket = class extends Base {
    constructor(url, protocols) {
      super(url, protocols);
      if (String(url).includes('/channels')) {
        this.addEventListener('message', (e) => { if (tally.on) tally.recv += size(e.data); });
      }
    }
    send(data) {
      if (tally.on && String(this.url).includes('/channels')) tally.sent += size(data);
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


def browser(path: Path, px: int, moves: int, workdir: Path, driver: str = "cdp") -> dict[str, Any]:
    """Slider-to-pixel latency and websocket bytes per frame in JupyterLab."""
    import nbformat

    from tsexplore.testing.lab import jupyterlab

    cells = [c.format(path=str(path), warm=moves + 2, px=px) for c in NOTEBOOK]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, workdir / "ui_bench.ipynb")
    latencies = []
    with jupyterlab(workdir) as (url, token), _open_page(driver, workdir / "profile") as page:
        page.add_init_script(COUNT_WS)
        page.goto(f"{url}/lab/tree/ui_bench.ipynb?token={token}")
        page.run_all_cells()
        page.wait_for(FIRST_FRAME)
        time.sleep(1.0)
        page.call(ARM)
        page.call(f"() => document.querySelector({json.dumps(HANDLE)}).focus()")
        page.call("() => { window.__tse_ws.on = true; }")
        for i in range(1, moves + 1):
            page.press("ArrowRight")
            ms = page.call(TIMED_MOVE, f"temp · time={i} ")
            latencies.append(ms)
            time.sleep(0.05)
        time.sleep(0.5)
        traffic = page.call("() => { window.__tse_ws.on = false; return window.__tse_ws; }")
        page.screenshot(workdir / "ui_bench.png")
    ok = [v for v in latencies if v >= 0]
    pixels = px * px
    return {
        "driver": driver, "frame": [px, px], "moves": moves, "timed_out": len(latencies) - len(ok),
        "slider_to_pixel_ms": {"p50": float(np.percentile(ok, 50)) if ok else None,
                               "p95": float(np.percentile(ok, 95)) if ok else None,
                               "max": max(ok) if ok else None},
        "bytes_per_frame": traffic["recv"] / moves,
        "bytes_sent_back_per_frame": traffic["sent"] / moves,
        "displayed_pixels": pixels,
        "bytes_limit": 2 * pixels * 4,
        "screenshot": str(workdir / "ui_bench.png"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks ui", description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="64 x 256 x 256 cube, 256 px frame")
    ap.add_argument("--moves", type=int, default=50)
    ap.add_argument("--path", type=Path, default=None, help="cube to write/reuse")
    ap.add_argument("--skip-browser", action="store_true")
    ap.add_argument("--driver", choices=("cdp", "playwright"), default="cdp",
                    help="how Chromium is driven while timing (default: DevTools protocol with "
                         "no domain enabled; Playwright ships every websocket frame to its driver)")
    ap.add_argument("--json-only", action="store_true")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args, _unknown = ap.parse_known_args(argv or [])

    import tsexplore as tse

    result: dict[str, Any] = {"benchmark": "ui", "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    result["coalescing"] = coalescing()
    if not args.skip_browser:
        from tsexplore.testing.lab import find_chromium

        if find_chromium() is None:
            print("chromium not found: skipping the browser part", file=sys.stderr)
        else:
            n = 256 if args.small else 1024
            path = args.path or ROOT / "data" / f"bench_ui_cube_{n}.zarr"
            tse.sample_data("cube", path, shape=(64, n, n), chunks=(16, min(256, n), min(256, n)),
                            progress=not args.json_only)
            with tempfile.TemporaryDirectory(prefix="tse-ui-bench-") as tmp:
                result["browser"] = browser(path.resolve(), n, args.moves, Path(tmp), args.driver)
                shot = ROOT / "test-artifacts" / "bench" / "ui_bench.png"
                shot.parent.mkdir(parents=True, exist_ok=True)
                if os.path.exists(result["browser"]["screenshot"]):
                    shot.write_bytes(Path(result["browser"]["screenshot"]).read_bytes())
                result["browser"]["screenshot"] = str(shot.relative_to(ROOT))
    c = result["coalescing"]
    targets = {"coalesce_reads<=25": c["reads"] <= 25, "coalesce_final_slice": c["final_ok"]}
    b = result.get("browser")
    if b:
        p95 = b["slider_to_pixel_ms"]["p95"]
        targets["slider_to_pixel_p95<=100ms"] = p95 is not None and p95 <= 100 and b["timed_out"] == 0
        targets["bytes_per_frame<=2*px*4"] = b["bytes_per_frame"] <= b["bytes_limit"]
    result["targets"] = targets
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    if args.json_only:
        print(json.dumps(result))
    else:
        print(f"coalescing: {c['events']} events in {c['seconds']} s, {c['store_latency_s'] * 1e3:.0f} ms store -> "
              f"{c['reads']} reads, {c['frames']} frames, {c['cancelled']} cancelled, final slice "
              f"{c['final_slice']} ({'ok' if c['final_ok'] else 'WRONG'}), update() max {c['update_max_ms']:.2f} ms")
        if b:
            s = b["slider_to_pixel_ms"]
            print(f"browser: {b['frame'][0]}x{b['frame'][1]} frame, {b['moves']} moves: slider->pixel p50 "
                  f"{s['p50']:.0f} ms, p95 {s['p95']:.0f} ms (max {s['max']:.0f}); "
                  f"{b['bytes_per_frame'] / 1e6:.2f} MB/frame to the browser (limit {b['bytes_limit'] / 1e6:.1f}), "
                  f"{b['bytes_sent_back_per_frame'] / 1e3:.1f} kB/frame back")
        for k, v in targets.items():
            print(f"  {'PASS' if v else 'MISS'} {k}")
        print(f"-> {RESULTS.relative_to(ROOT)}")
    return 1 if args.check and not all(targets.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
