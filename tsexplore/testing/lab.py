"""A JupyterLab + headless Chromium harness for the browser test and the UI benchmark.

JupyterLab runs on 127.0.0.1 in a folder of the caller's choosing with private Jupyter/IPython
dirs and a random token; Debian's Chromium is driven by Playwright (never ``playwright
install``). Every non-local request is refused so nothing waits on DNS.
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
               args: Sequence[str] = ()) -> Iterator[tuple[str, str]]:
    """Run JupyterLab in ``root`` (extra command-line ``args``, e.g. a server extension);
    yields ``(base_url, token)``; stops it by PID on exit. Its log is ``root / "lab.log"``."""
    root = Path(root)
    token, cfg = secrets.token_hex(16), root / ".jcfg"
    (cfg / "labconfig").mkdir(parents=True, exist_ok=True)
    (cfg / "labconfig" / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))
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


@contextmanager
def chromium(profile: Path, width: int = 1600, height: int = 1200) -> Iterator[Any]:
    """A headless Chromium page (Playwright), with non-local requests refused."""
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
            ctx.route("**/*", lambda route: route.continue_()
                      if route.request.url.startswith(("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:"))
                      else route.abort())
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
