"""A JupyterLab + headless Chromium harness for the browser test and the UI benchmark.

JupyterLab runs on 127.0.0.1 in a folder of the caller's choosing with private Jupyter/IPython
dirs and a random token; Debian's Chromium is driven by Playwright (never ``playwright
install``). Every non-local request is refused (and can be recorded) so nothing waits on DNS.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
KERNEL_IDLE = (
    "window.jupyterapp?.shell?.currentWidget?.sessionContext?.session?.kernel?.status === 'idle'"
)
ALL_RAN = """() => {
  const nb = window.jupyterapp?.shell?.currentWidget;
  const k = nb?.sessionContext?.session?.kernel;
  if (!nb?.content || !k || k.status !== 'idle') return false;
  return nb.content.widgets.every(c => c.model.type !== 'code' || c.model.executionCount);
}"""
ERRORS = """() => [...document.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
  .map(e => e.innerText).filter(t => /Error|Traceback/.test(t))"""
# the text the open notebook's cells printed (stream outputs), from the notebook's model
STREAM_TEXT = """() => window.jupyterapp.shell.currentWidget.content.widgets
  .filter(c => c.model.type === 'code')
  .flatMap(c => { const o = c.model.outputs, got = [];
    for (let i = 0; i < o.length; i++) { const j = o.get(i).toJSON();
      if (j.output_type === 'stream') got.push([].concat(j.text).join('')); }
    return got; })
  .join('\\n')"""
TITLES = """() => [...(window.Bokeh?.documents ?? [])].flatMap(d => [...d.all_models])
  .filter(m => m.type === 'Title').map(m => m.text)"""


def find_chromium() -> str | None:
    """Path of a system Chromium, or None."""
    for name in ("/usr/bin/chromium", "/usr/bin/chromium-browser"):
        if os.path.exists(name):
            return name
    return shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def jupyterlab(root: Path, env: dict[str, str] | None = None, timeout: float = 90.0,
               args: Sequence[str] = (), settings: dict[str, dict[str, Any]] | None = None) -> Iterator[tuple[str, str]]:
    """Run JupyterLab in ``root`` (extra command-line ``args``, e.g. a server extension;
    ``settings``: user settings by plugin id, e.g. ``{"@jupyter-widgets/jupyterlab-manager:plugin":
    {"saveState": True}}``); yields ``(base_url, token)``; stops it by PID on exit. Its log is
    ``root / "lab.log"``."""
    root = Path(root)
    token, cfg = secrets.token_hex(16), root / ".jcfg"
    (cfg / "labconfig").mkdir(parents=True, exist_ok=True)
    (cfg / "labconfig" / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))
    for plugin, values in (settings or {}).items():
        package, name = plugin.split(":")
        path = cfg / "lab" / "user-settings" / package / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    full_env = dict(os.environ, JUPYTER_CONFIG_DIR=str(cfg), JUPYTER_RUNTIME_DIR=str(root / ".jrt"),
                    JUPYTER_DATA_DIR=str(root / ".jdata"), IPYTHONDIR=str(root / ".ipy"),
                    **(env or {}))
    port = free_port()
    log = open(root / "lab.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip=127.0.0.1",
         f"--port={port}", "--port-retries=0", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
         "--LabApp.news_url=None",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", *args],
        cwd=root, env=full_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"JupyterLab did not start:\n{(root / 'lab.log').read_text()[-3000:]}") from None
                time.sleep(0.25)
        yield url, token
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        log.close()


LOCAL = ("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:")


@contextmanager
def chromium(profile: Path, width: int = 1600, height: int = 1200,
             refused: list[str] | None = None) -> Iterator[Any]:
    """A headless Chromium page (Playwright), with non-local requests refused; each refused
    URL is appended to ``refused`` (a notebook must look the same with no internet: a test
    asserts it stays empty)."""
    from playwright.sync_api import sync_playwright

    exe = find_chromium()
    if exe is None:
        raise RuntimeError("no chromium found (apt-get install chromium)")
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(profile), executable_path=exe, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": width, "height": height})
        try:
            ctx.set_default_timeout(90_000)
            def route(r: Any) -> None:
                if r.request.url.startswith(LOCAL):
                    r.continue_()
                else:
                    if refused is not None:
                        refused.append(r.request.url)
                    r.abort()

            ctx.route("**/*", route)
            yield ctx.pages[0]
        finally:
            ctx.close()


def run_all_cells(page: Any, timeout_ms: int = 120_000) -> None:
    """Run every cell of the open notebook and wait until each has run and the kernel is idle."""
    page.wait_for_function(KERNEL_IDLE, polling=200)
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    page.wait_for_timeout(500)
    page.wait_for_function(ALL_RAN, polling=250, timeout=timeout_ms)
    errors = page.evaluate(ERRORS)
    if errors:
        raise AssertionError("a cell failed in the browser:\n" + "\n".join(errors)[-3000:])


# -- the image canvas and the Explorer, seen from the page -----------------------------------------

EXECUTE = """(code) => new Promise((resolve) => {
  const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  const f = k.requestExecute({code});
  let text = '';
  f.onIOPub = (m) => { if (m.header.msg_type === 'stream') text += m.content.text;
                       if (m.header.msg_type === 'error') text += 'ERROR ' + m.content.evalue; };
  f.done.then(() => resolve(text));
})"""
# the colours the n-th canvas shows at the centres of the pixels of a frame covering
# ``extent`` (index edges) with ``shape`` (rows, columns): RGBA, row 0 = lowest y index, base64
CANVAS_SAMPLES = """([n, extent, shape]) => {
  const root = document.querySelectorAll('.tse-canvas')[n];
  const s = [...window.__tse_canvases].find(st => [...st.views].some(v => v.el === root));
  const [l, t, w, h] = root.dataset.plot.split(',').map(Number);
  const v = s.view, lower = s.model.get('y_origin') === 'lower', dpr = window.devicePixelRatio || 1;
  const [[ey0, ey1], [ex0, ex1]] = extent, [fh, fw] = shape;
  const g = root.querySelector('canvas').getContext('2d'), W = g.canvas.width;
  const all = g.getImageData(0, 0, W, g.canvas.height).data;
  const out = new Uint8Array(fh * fw * 4);
  for (let r = 0; r < fh; r++) {
    const y = ey0 + (r + 0.5) * (ey1 - ey0) / fh;
    const py = Math.floor((t + (lower ? v.y1 - y : y - v.y0) / (v.y1 - v.y0) * h) * dpr);
    for (let c = 0; c < fw; c++) {
      const x = ex0 + (c + 0.5) * (ex1 - ex0) / fw;
      const px = Math.floor((l + (x - v.x0) / (v.x1 - v.x0) * w) * dpr);
      for (let k = 0; k < 4; k++) out[(r * fw + c) * 4 + k] = all[(py * W + px) * 4 + k];
    }
  }
  let text = '';  // base64: one string crosses to the driver, not an array of numbers
  for (let i = 0; i < out.length; i += 8192) text += String.fromCharCode(...out.subarray(i, i + 8192));
  return btoa(text);
}"""
# the index among the page's canvases of the one whose model has uid ``uid`` (-1: none)
CANVAS_INDEX = """(uid) => [...document.querySelectorAll('.tse-canvas')].findIndex((root) =>
  [...(window.__tse_canvases ?? [])].some((s) => s.model.get('_tse_uid') === uid && [...s.views].some((v) => v.el === root)))"""
# the n-th canvas's whole picture as the page shows it: {width, height, dpr, rgba (base64)}
CANVAS_PIXELS = """(n) => {
  const c = document.querySelectorAll('.tse-canvas')[n].querySelector('canvas.tse-canvas-plot');
  const all = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let text = '';
  for (let i = 0; i < all.length; i += 8192) text += String.fromCharCode(...all.subarray(i, i + 8192));
  return {width: c.width, height: c.height, dpr: window.devicePixelRatio || 1, rgba: btoa(text)};
}"""
# the n-th canvas's browser-side state: its view (index edges), counts, last frame's meta, the
# histogram it draws (log heights per channel) and its channels' colours and toggles
CANVAS_STATE = """(n) => {
  const root = document.querySelectorAll('.tse-canvas')[n];
  const s = root && [...(window.__tse_canvases ?? [])].find(st => [...st.views].some(v => v.el === root));
  if (!s) return null;
  const m = s.last || {};
  return {view: s.view, counts: {...s.counts}, cmap: s.model.get('cmap'), dataset: {...root.dataset},
          last: {gen: m.gen, mode: m.mode, final: m.final, label: m.label, extent: m.extent, clim: m.clim,
                 shape: m.shape, index: m.index, channels: m.channels, clims: m.clims, info: m.info},
          hist: s.hist ? {ranges: s.hist.ranges, max: s.hist.max, bytes: Array.from(s.hist.bytes)} : null,
          channel_on: s.model.get('channel_on'), channel_colors: s.model.get('channel_colors'),
          clim_display: s.model.get('clim'), channel_clims: s.model.get('channel_clims')};
}"""
# every visible widget, plot and canvas inside ``selector``'s first match, and the pairs of
# them (neither inside the other) whose boxes overlap by more than one square pixel
OVERLAPS = """(selector) => {
  const root = document.querySelector(selector);
  const kinds = ['.widget-dropdown', '.widget-toggle-buttons', '.widget-text', '.widget-html',
                 '.widget-button', '.widget-slider', '.widget-play', '.widget-label', '.widget-progress',
                 '.tse-canvas', '.bk-Figure', '.bk-Column', '.tsexplore-stats-numbers'];
  const found = [...root.querySelectorAll(kinds.join(','))].filter((e) => {
    const b = e.getBoundingClientRect(), st = getComputedStyle(e);
    return b.width > 0 && b.height > 0 && st.visibility !== 'hidden' && e.offsetParent !== null;
  });
  const box = (e) => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
  const name = (e) => `${e.tagName.toLowerCase()}.${[...e.classList].slice(0, 3).join('.')}` +
    (e.textContent ? ` "${e.textContent.trim().slice(0, 24)}"` : '');
  const overlaps = [];
  for (let i = 0; i < found.length; i++) for (let j = i + 1; j < found.length; j++) {
    const a = found[i], b = found[j];
    if (a.contains(b) || b.contains(a)) continue;
    const [l1, t1, r1, b1] = box(a), [l2, t2, r2, b2] = box(b);
    const area = Math.max(0, Math.min(r1, r2) - Math.max(l1, l2)) * Math.max(0, Math.min(b1, b2) - Math.max(t1, t2));
    if (area > 1) overlaps.push([name(a), name(b), Math.round(area)]);
  }
  return {count: found.length, overlaps, boxes: found.map((e) => [name(e), box(e).map(Math.round)])};
}"""


def execute(page: Any, code: str) -> str:
    """Run ``code`` in the open notebook's kernel; its printed output (and errors)."""
    return str(page.evaluate(EXECUTE, code))


def canvas_index(page: Any, uid: str) -> int:
    """The index of the canvas of the model with ``_tse_uid`` ``uid`` among the page's."""
    return int(page.evaluate(CANVAS_INDEX, uid))


def canvas_pixels(page: Any, n: int) -> Any:
    """The ``n``-th canvas's whole picture (``(rows, columns, 4)`` uint8) as the page shows it."""
    import base64

    import numpy as np

    out = page.evaluate(CANVAS_PIXELS, n)
    return np.frombuffer(base64.b64decode(out["rgba"]), dtype=np.uint8).reshape(out["height"], out["width"], 4)


def canvas_colours(page: Any, n: int, extent: Any, shape: tuple[int, int]) -> Any:
    """What the ``n``-th canvas shows at the pixel centres of a frame (``CANVAS_SAMPLES``), as a
    ``(rows, columns, 4)`` uint8 array."""
    import base64

    import numpy as np

    text = page.evaluate(CANVAS_SAMPLES, [n, [list(map(float, e)) for e in extent], list(shape)])
    return np.frombuffer(base64.b64decode(text), dtype=np.uint8).reshape(shape[0], shape[1], 4)
