"""A real HTTP server on 127.0.0.1 serving a folder, with injectable latency and faults.

Used by the integration tests (404, 500-then-success, stalls) and by ``benchmarks --remote``
(20 ms per request). It is the standard library's ``ThreadingHTTPServer`` in a named thread;
``close()`` (or leaving the ``with`` block) stops it.

>>> with StoreServer("data/cube.zarr", latency=0.02) as srv:
...     ds = tse.open_dataset(srv.url)
"""

from __future__ import annotations

import os
import posixpath
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse


@dataclass
class Fault:
    """Answer requests whose path contains ``match`` with ``status`` (or stall ``stall`` s)."""

    match: str
    status: int = 500
    times: int = 1
    stall: float = 0.0


def _byte_range(header: str, data: bytes) -> tuple[int, bytes, dict[str, str]]:
    """Answer a single ``Range: bytes=a-b`` (or ``a-``, ``-n``) request (sharded stores need it)."""
    size = len(data)
    spec = header.strip()
    if not spec.startswith("bytes=") or "," in spec:
        return 200, data, {}
    first, _, last = spec[len("bytes=") :].partition("-")
    try:
        if first == "":
            start, stop = max(0, size - int(last)), size
        else:
            start = int(first)
            stop = min(size, int(last) + 1) if last else size
    except ValueError:
        return 200, data, {}
    if start >= size or start >= stop:
        return 416, b"", {"Content-Range": f"bytes */{size}"}
    return 206, data[start:stop], {"Content-Range": f"bytes {start}-{stop - 1}/{size}"}


class StoreServer:
    def __init__(self, root: str | os.PathLike[str], latency: float = 0.0, port: int = 0) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.latency = latency
        self.faults: list[Fault] = []
        self.requests: list[tuple[str, str, int]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

            def _serve(self, body: bool) -> None:
                path = unquote(urlparse(self.path).path)
                status, data = server._answer(path)
                if status == 0:  # stalled and then closed without an answer
                    self.close_connection = True
                    return
                extra: dict[str, str] = {}
                if status == 200 and self.headers.get("Range"):
                    status, data, extra = _byte_range(self.headers["Range"], data)
                with server._lock:
                    server.requests.append((self.command, path, status))
                self.send_response(status)
                for name, value in extra.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Content-Type", "application/octet-stream")
                self.end_headers()
                if body and data:
                    try:
                        self.wfile.write(data)
                    except (BrokenPipeError, ConnectionResetError):
                        pass

            def do_GET(self) -> None:  # noqa: N802 - http.server naming
                self._serve(True)

            def do_HEAD(self) -> None:  # noqa: N802
                self._serve(False)

        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # the default 5 drops bursts of connections (1 s SYN retry)

        self._httpd = Server(("127.0.0.1", port), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
            name="tsexplore-test-http", daemon=True,
        )
        self._thread.start()

    # -- faults -----------------------------------------------------------------------------
    def fail(self, match: str, status: int = 500, times: int = 1) -> None:
        """The next ``times`` requests whose path contains ``match`` get ``status``."""
        with self._lock:
            self.faults.append(Fault(match, status, times))

    def stall(self, match: str, seconds: float, times: int = 1) -> None:
        """The next ``times`` matching requests hang ``seconds`` and then get no answer."""
        with self._lock:
            self.faults.append(Fault(match, 0, times, seconds))

    def count(self, match: str) -> int:
        """Requests so far (answered or failed) whose path contains ``match``."""
        with self._lock:
            return sum(1 for _, p, _ in self.requests if match in p)

    def _answer(self, path: str) -> tuple[int, bytes]:
        if self.latency:
            time.sleep(self.latency)
        with self._lock:
            fault = next((f for f in self.faults if f.match in path and f.times > 0), None)
            if fault is not None:
                fault.times -= 1
        if fault is not None:
            if fault.stall:
                self._stop.wait(fault.stall)
                with self._lock:
                    self.requests.append(("GET", path, 0))
                return 0, b""
            return fault.status, b"injected fault"
        rel = posixpath.normpath(path).lstrip("/")
        full = os.path.join(self.root, *rel.split("/")) if rel not in ("", ".") else self.root
        if not full.startswith(self.root) or not os.path.isfile(full):
            return 404, b"not found"
        with open(full, "rb") as f:
            return 200, f.read()

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(2)

    def __enter__(self) -> StoreServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
