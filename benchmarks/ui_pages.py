"""The browser side of ``python -m benchmarks ui``: driving a JupyterLab page and timing moves.

A :class:`Page` is the few calls the benchmark makes (Playwright, or the DevTools protocol with
no domain enabled: ``--driver cdp``, the default). :func:`timed_moves` presses ArrowRight on a
slider ``warmup + moves`` times with a random pause after each, timing each move in the page;
:func:`summary` turns the times and the websocket tally (``COUNT_WS``, counted in the page) into
the figures reported. The pages: :func:`explorer_page` (the Explorer, its slider in the canvas
or an ipywidgets one) and :func:`canvas_page` (the bare canvas reference, ``ui_canvas.py``).
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

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
          if (size(e.data) > 100000) tally.lastBinary = performance.now();  // a frame's arrival
        });
      }
    }
    send(data) {
      if (tally.on && String(this.url).includes('/channels')) { tally.sent += size(data); tally.nsent += 1; }
      return super.send(data);
    }
  };
})()"""



class Page:
    """The few calls the benchmark makes; the subclasses adapt one driver's page to them."""

    def __init__(self, page: Any) -> None:
        self.page = page

    def add_init_script(self, source: str) -> None:
        self.page.add_init_script(source)

    def goto(self, url: str) -> None:
        self.page.goto(url)


class PlaywrightPage(Page):
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


class CdpPage(Page):
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
def open_page(driver: str, profile: Path) -> Iterator[Page]:
    if driver == "playwright":
        from tsexplore.testing.lab import chromium

        with chromium(profile, 1800, 1500) as page:
            yield PlaywrightPage(page)
    elif driver == "cdp":
        from tsexplore.testing.cdp import chromium_cdp

        with chromium_cdp(profile, 1800, 1500) as page:
            yield CdpPage(page)
    else:
        raise ValueError(f"unknown driver {driver!r}; known: cdp, playwright")


# JupyterLab asks "leave the page?" when a notebook has unsaved output, which blocks the next
# page's navigation: the benchmark never registers that prompt
NO_LEAVE_PROMPT = """(() => {
  const add = window.addEventListener.bind(window);
  window.addEventListener = (type, fn, opts) => (type === 'beforeunload' ? undefined : add(type, fn, opts));
})()"""


def shutdown_kernels(url: str, token: str) -> None:
    """Stop every kernel of the server (the next page gets the machine to itself)."""
    import urllib.request

    with urllib.request.urlopen(f"{url}/api/kernels?token={token}", timeout=10) as r:
        kernels = json.load(r)
    for k in kernels:
        req = urllib.request.Request(f"{url}/api/kernels/{k['id']}?token={token}", method="DELETE")
        urllib.request.urlopen(req, timeout=30).close()


def open_notebook(page: Page, url: str, token: str, workdir: Path, name: str, cells: list[str]) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, workdir / f"{name}.ipynb")
    # a workspace of its own: JupyterLab does not reopen the previous page's notebook
    page.goto(f"{url}/lab/workspaces/{name}/tree/{name}.ipynb?token={token}")
    page.run_all_cells()


def timed_moves(page: Page, handle: str, timed: str, want: Any, moves: int, warmup: int,
                 seed: int) -> tuple[list[float], dict[str, Any]]:
    """``warmup`` + ``moves`` ArrowRight presses on ``handle``, each timed by ``timed(want(i))``;
    a random pause (50-67 ms) after each, so key presses fall at random phases of the
    display's frames. Websocket traffic is counted over the timed moves only."""
    rng = random.Random(seed)
    page.call(f"() => document.querySelector({json.dumps(handle)}).focus()")
    latencies = []
    for i in range(1, warmup + moves + 1):
        if i == warmup + 1:
            page.call("() => { Object.assign(window.__tse_ws, {recv: 0, sent: 0, nrecv: 0, nsent: 0, on: true}); "
                      "window.__tse_marks = []; window.__tse_profile = []; }")
        page.press("ArrowRight")
        ms = page.call(timed, want(i))
        if ms < 0 and (i == 1 or latencies and all(v < 0 for v in latencies[-2:])):
            # the page waits 20 s for each frame that never comes: stop rather than wait out
            # every move left
            raise RuntimeError(f"move {i}: the page painted nothing for it (nor for the moves "
                               f"before); is {handle!r} the slider's handle?")
        if i > warmup:
            latencies.append(ms)
        time.sleep(0.05 + rng.uniform(0, 1 / 60))
    time.sleep(0.5)
    traffic = page.call("() => { window.__tse_ws.on = false; const profile = window.__tse_profile || []; "
                        "window.__tse_profile = null; "
                        "return Object.assign({marks: window.__tse_marks || [], profile}, window.__tse_ws); }")
    return latencies, traffic


#: the page's stages of a frame (``window.__tse_profile``, marked by the canvas's JS): from the
#: key press to the frame's websocket message (the kernel and the link), to the widget's
#: handler (JupyterLab's message decode and comm dispatch), to its pixels decoded (raw: none),
#: coloured (colour table, putImageData), drawn (drawImage, axes, histogram), and the next
#: animation frame (the paint); ``draw_histogram``: the histogram, its fields and chips, drawn
#: after the image is painted (off the move's path)
PAGE_STAGES = (("kernel_and_link", "key", "ws"), ("message_decode", "ws", "recv"),
               ("pixels_decode", "recv", "decoded"), ("colour", "decoded", "coloured"),
               ("draw", "coloured", "drawn"), ("to_paint", "drawn", "raf"))


def page_stages(profile: list[dict[str, Any]]) -> dict[str, Any]:
    """p50 / p95 ms of each of :data:`PAGE_STAGES` (and of the histogram's part of ``draw``)."""
    out: dict[str, Any] = {"frames": len(profile)}
    for name, a, b in PAGE_STAGES:
        v = [r[b] - r[a] for r in profile if r.get(a) is not None and r.get(b) is not None and r[b] >= r[a]]
        out[name] = ({"p50": float(np.percentile(v, 50)), "p95": float(np.percentile(v, 95)), "n": len(v)}
                     if v else None)
    h = [r["hist"] for r in profile if r.get("hist") is not None]
    out["draw_histogram"] = {"p50": float(np.percentile(h, 50)), "p95": float(np.percentile(h, 95)),
                             "n": len(h)} if h else None
    return out


def per_move(traffic: dict[str, Any]) -> list[tuple[int, int]]:
    """Messages (received, sent) from each timed key press to the next (the last: to the end
    of the count), from the tally the page took at each press."""
    marks = [tuple(m) for m in traffic.get("marks", [])] + [(traffic["nrecv"], traffic["nsent"])]
    return [(b[0] - a[0], b[1] - a[1]) for a, b in zip(marks, marks[1:])]


def summary(kind: str, latencies: list[float], traffic: dict[str, Any], px: int, moves: int,
             warmup: int) -> dict[str, Any]:
    ok = [v for v in latencies if v >= 0]
    pixels = px * px
    counts = [r + s for r, s in per_move(traffic)]
    return {
        "page": kind, "frame": [px, px], "moves": moves, "warmup": warmup,
        "timed_out": len(latencies) - len(ok),
        "slider_to_pixel_ms": {"p50": float(np.percentile(ok, 50)) if ok else None,
                               "p95": float(np.percentile(ok, 95)) if ok else None,
                               "max": max(ok) if ok else None},
        "bytes_per_frame": traffic["recv"] / moves,
        "bytes_per_pixel": traffic["recv"] / moves / pixels,
        "bytes_sent_back_per_frame": traffic["sent"] / moves,
        # the mean over the timed moves (stray messages included: a viewport, a lone ack), and
        # each move's own count (key press to the next one): median and most
        "ws_messages_per_move": {"received": traffic["nrecv"] / moves, "sent": traffic["nsent"] / moves,
                                 "total": (traffic["nrecv"] + traffic["nsent"]) / moves,
                                 "median": float(np.median(counts)) if counts else None,
                                 "max": max(counts) if counts else None},
        "page_stages_ms": page_stages(traffic.get("profile") or []),
        "displayed_pixels": pixels,
        "bytes_limit": 2 * pixels * 4,
    }


# -- the pages ----------------------------------------------------------------------------------

EXPLORER_CELLS = [
    "import holoviews as hv, numpy as np, tsexplore as tse\n"
    "hv.extension('bokeh', inline=True, comms='ipywidgets')",
    "ds = tse.open_dataset({path!r})\n"
    "_ = ds.temp.isel(time=slice(0, {warm})).values  # warm cache\n"
    "ex = ds.tse.explore(width={px}, height={px}, stats=False, slider={slider!r})\n"
    "ex",
]
EXPLORER_FIRST = "document.querySelector('.tse-canvas')?.dataset.index === '0'"
# --under-load: mean(time) of the same cube, one background reduction after another, while
# the slider moves (the visible reads must win)
LOAD_CELL = (
    "import threading\n"
    "tse.config.set(visible_first={visible_first})\n"
    "_stop, _scans = threading.Event(), []\n"
    "def _scan():\n"
    "    while not _stop.is_set():\n"
    "        job = tse.reduce(ds.temp, 'mean', dim='time', background=True, progress=False)\n"
    "        while not job.wait(0.1):\n"
    "            if _stop.is_set():\n"
    "                job.cancel()\n"
    "        _scans.append(job.done())\n"
    "_loader = threading.Thread(target=_scan, name='tse-bench-load', daemon=True)\n"
    "_loader.start()"
)
LOAD_STOP = ("_stop.set(); _loader.join(60); import json; _a = tse.get_engine().activity\n"
             "print('TSE ' + json.dumps({'scans': len(_scans), 'pauses': _a.pauses, "
             "'paused_s': round(_a.paused_seconds, 2)}))")


def explorer_page(page: Page, url: str, token: str, workdir: Path, path: Path, px: int, moves: int,
                  warmup: int, seed: int, slider: str = "canvas", load: str = "") -> dict[str, Any]:
    """The Explorer (its slider in the canvas or an ipywidgets one): slider-to-pixel latency
    and websocket traffic per move, timed as the bare canvas (``tse-paint`` of the index);
    ``load="load"``: while background reductions of the same cube run (``LOAD_CELL``);
    ``"loadoff"``: the same with ``visible_first=False`` (the reductions do not yield)."""
    from .ui_canvas import CANVAS_ARM, CANVAS_MOVE, EXECUTE, HANDLES

    name = ("explorer" if slider == "canvas" else f"explorer-{slider}") + (f"-{load}" if load else "")
    cells = [c.format(path=str(path), warm=moves + warmup + 2, px=px, slider=slider) for c in EXPLORER_CELLS]
    if load:
        cells.append(LOAD_CELL.format(visible_first=load == "load"))
    open_notebook(page, url, token, workdir, name, cells)
    page.wait_for(EXPLORER_FIRST)
    time.sleep(1.0)
    handle = HANDLES["js" if slider == "canvas" else "ipywidgets"]
    page.call(CANVAS_ARM, handle)
    latencies, traffic = timed_moves(page, handle, CANVAS_MOVE, lambda i: i, moves, warmup, seed)
    extra: dict[str, Any] = {}
    if load:
        told = page.call(EXECUTE, LOAD_STOP)
        extra = json.loads(next((t for t in str(told).splitlines() if t.startswith("TSE ")), "TSE {}")[4:])
    shot = workdir / f"ui_bench_{name}.png"
    page.screenshot(shot)
    canvas = page.call(EXECUTE, "import json; print('TSE ' + json.dumps(ex.canvas.stats()))")
    line = next((t for t in str(canvas).splitlines() if t.startswith("TSE ")), "TSE {}")
    return dict(summary(name, latencies, traffic, px, moves, warmup), slider=slider, screenshot=str(shot),
                canvas=json.loads(line[4:]), **extra)


def canvas_page(page: Page, url: str, token: str, workdir: Path, px: int, moves: int, warmup: int,
                seed: int, slider: str, ack: str) -> dict[str, Any]:
    """The bare canvas reference: a precomputed uint8 frame per slider move."""
    from .ui_canvas import CANVAS_ARM, CANVAS_FIRST, CANVAS_MOVE, HANDLES, canvas_cells

    name = f"canvas-{slider}-{ack}"
    open_notebook(page, url, token, workdir, name, canvas_cells(px, slider, ack))
    page.wait_for(CANVAS_FIRST)
    time.sleep(1.0)
    page.call(CANVAS_ARM, HANDLES[slider])
    latencies, traffic = timed_moves(page, HANDLES[slider], CANVAS_MOVE, lambda i: i, moves, warmup, seed)
    page.screenshot(workdir / f"ui_bench_{name}.png")
    return dict(summary(name, latencies, traffic, px, moves, warmup), slider=slider, ack=ack)
