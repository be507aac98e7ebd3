"""Headless Chromium driven over the DevTools protocol directly, for timing (the UI benchmark).

Playwright enables the ``Network`` domain on every page it drives, so Chromium ships the
payload of every websocket frame to the driver (base64 inside JSON): about 1.4 MB per move
of a 1024 x 1024 Explorer frame, encoded by the renderer and the browser process and parsed
by the driver while the move is being timed, on the same cores. This client enables no
Network domain; it only evaluates script, presses keys and takes screenshots (``Page`` is enabled for
init scripts: its events are a few small lifecycle messages per navigation).

The browser test (``tests/test_browser.py``) keeps Playwright; this is for measurements.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .lab import CHROMIUM_ARGS, find_chromium

# every host but the loopback fails to resolve: nothing waits on DNS or leaves the machine
LOCAL_ONLY = "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"
KEYS = {"ArrowRight": 39, "ArrowLeft": 37, "ArrowUp": 38, "ArrowDown": 40}


class CdpError(RuntimeError):
    """A DevTools command failed, or script raised in the page."""


class CdpPage:
    """One page target: ``evaluate``, ``wait_for``, ``press`` and ``screenshot``."""

    def __init__(self, ws_url: str, timeout: float = 90.0) -> None:
        import websocket  # websocket-client, a dependency of jupyter_server

        self.timeout = timeout
        self._ws = websocket.create_connection(ws_url, timeout=timeout, suppress_origin=True,
                                               enable_multithread=False)
        self._id = 0

    def send(self, method: str, params: dict[str, Any] | None = None,
             timeout: float | None = None) -> dict[str, Any]:
        """Send one command and return its result (events, none enabled, are skipped)."""
        self._id += 1
        ident = self._id
        self._ws.send(json.dumps({"id": ident, "method": method, "params": params or {}}))
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        while True:
            left = deadline - time.monotonic()
            if left <= 0:  # events kept coming, but not the answer
                raise CdpError(f"{method}: no answer from Chromium within {limit} s")
            self._ws.settimeout(left)
            try:
                msg = json.loads(self._ws.recv())
            except Exception as exc:  # noqa: BLE001 - timeout or closed socket
                raise CdpError(f"{method}: no answer from Chromium ({type(exc).__name__}: {exc})") from exc
            if msg.get("id") != ident:
                continue
            if "error" in msg:
                raise CdpError(f"{method}: {msg['error']}")
            return dict(msg.get("result", {}))

    def evaluate(self, expression: str, *, timeout: float | None = None) -> Any:
        """The value of ``expression`` in the page (a promise is awaited)."""
        res = self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                             "returnByValue": True, "userGesture": True},
                        timeout=timeout)
        if "exceptionDetails" in res:
            details = res["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise CdpError(f"script raised in the page: {text}")
        return res.get("result", {}).get("value")

    def call(self, function: str, *args: Any, timeout: float | None = None) -> Any:
        """Call the function expression ``function`` with JSON-able ``args``; its value."""
        return self.evaluate(f"({function})({', '.join(json.dumps(a) for a in args)})",
                             timeout=timeout)

    def add_init_script(self, source: str) -> None:
        """Run ``source`` in every document this page loads from now on, before its scripts."""
        self.send("Page.enable")  # without it the script is registered but never run
        self.send("Page.addScriptToEvaluateOnNewDocument", {"source": source})

    def wait_for(self, expression: str, timeout: float = 90.0, poll: float = 0.2) -> Any:
        """Evaluate ``expression`` until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        error: CdpError | None = None
        while True:
            try:
                value, error = self.evaluate(expression), None
            except CdpError as exc:
                value, error = None, exc  # e.g. the page is still loading
            if value:
                return value
            if time.monotonic() > deadline:
                last = f" (last error: {error})" if error is not None else ""
                raise TimeoutError(f"waited {timeout} s for: {expression[:200]}{last}")
            time.sleep(poll)

    def goto(self, url: str) -> None:
        self.send("Page.navigate", {"url": url})

    def press(self, key: str) -> None:
        """Key down and up on the focused element."""
        code = KEYS[key]
        for kind in ("keyDown", "keyUp"):
            self.send("Input.dispatchKeyEvent", {"type": kind, "key": key, "code": key,
                                                 "windowsVirtualKeyCode": code,
                                                 "nativeVirtualKeyCode": code})

    def screenshot(self, path: Path) -> None:
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        Path(path).write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self._ws.close()
        except Exception:  # noqa: BLE001 - already gone
            pass


@contextmanager
def chromium_cdp(profile: Path, width: int = 1600, height: int = 1200,
                 timeout: float = 30.0) -> Iterator[CdpPage]:
    """Launch headless Chromium with a DevTools port and the profile folder ``profile``;
    yields its first page. On exit Chromium is stopped and ``profile`` is removed."""
    exe = find_chromium()
    if exe is None:
        raise RuntimeError("no chromium found (apt-get install chromium)")
    profile = Path(profile)
    profile.mkdir(parents=True, exist_ok=True)
    port_file = profile / "DevToolsActivePort"
    port_file.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [exe, *CHROMIUM_ARGS, LOCAL_ONLY, "--remote-debugging-port=0",
         f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    page: CdpPage | None = None
    try:
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and port_file.read_text().strip()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Chromium did not open its DevTools port (exit {proc.poll()})")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                targets = [t for t in json.load(r) if t.get("type") == "page"]
            if targets:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("Chromium has no page target")
            time.sleep(0.05)
        page = CdpPage(targets[0]["webSocketDebuggerUrl"])
        page.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        # a headless page never has focus; JupyterLab tracks its current widget by focus
        page.send("Emulation.setFocusEmulationEnabled", {"enabled": True})
        yield page
    finally:
        if page is not None:
            page.close()
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(5)
        shutil.rmtree(profile, ignore_errors=True)
