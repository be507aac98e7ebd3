"""A real HTTP server on 127.0.0.1 with a modelled link and injectable faults.

It serves a folder (``StoreServer(root)``) or stands in front of another server
(``StoreServer(upstream="http://127.0.0.1:9000")``, e.g. a moto S3 server, which cannot
inject faults itself: requests and answers pass through unchanged, signatures included).
Used by the integration tests (404, 500-then-success, stalls, bodies cut short) and by
``benchmarks --remote`` / ``--s3``.

The link: ``latency`` seconds before each answer (time to first byte, as object storage
has), and ``bandwidth`` bytes/s shared by every connection (answers are sent in pieces
of :data:`PIECE` bytes, each reserving its share of the link in arrival order). ``requests``
records ``(method, path, status)`` of every request; ``bytes_sent`` the body bytes sent.
It is the standard library's ``ThreadingHTTPServer`` in a named thread; ``close()`` (or
leaving the ``with`` block) stops it.

>>> with StoreServer("data/cube.zarr", latency=0.1, bandwidth=200e6) as srv:
...     ds = tse.open_dataset(srv.url)
"""

from __future__ import annotations

import http.client
import os
import posixpath
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlparse

#: bytes sent at once under a bandwidth cap (a connection's turn on the link)
PIECE = 256 * 1024
#: headers of an upstream answer passed on to the client (the length is set again)
_PASSED_HEADERS = ("content-type", "content-range", "etag", "last-modified", "accept-ranges")
_HOP_HEADERS = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"}


@dataclass
class Fault:
    """The next ``times`` requests whose path contains ``match``: answer ``status``, or
    stall ``stall`` seconds and close, or (``cut`` > 0) send headers for the whole body and
    then only its first ``cut`` fraction before closing."""

    match: str
    status: int = 500
    times: int = 1
    stall: float = 0.0
    cut: float = 0.0
    #: requests of this fault stalling now (their client gave up on them or still waits)
    stalling: int = 0


class Link:
    """A shared link of ``bandwidth`` bytes/s (0: unlimited): ``send(n)`` waits its turn."""

    def __init__(self, bandwidth: float = 0.0) -> None:
        self.bandwidth = float(bandwidth)
        self._lock = threading.Lock()
        self._free_at = 0.0

    def reserve(self, nbytes: int) -> float:
        """Seconds to wait before ``nbytes`` have crossed the link (reserved now, in order)."""
        if self.bandwidth <= 0:
            return 0.0
        now = time.monotonic()
        with self._lock:
            start = max(now, self._free_at)
            self._free_at = start + nbytes / self.bandwidth
            return self._free_at - now


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
    """Serve ``root`` (a folder) or pass requests on to ``upstream``, over a modelled link."""

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        latency: float = 0.0,
        port: int = 0,
        *,
        bandwidth: float = 0.0,
        upstream: str | None = None,
    ) -> None:
        if (root is None) == (upstream is None):
            raise ValueError("StoreServer serves a folder (root) or an upstream URL, not both")
        self.root = os.path.abspath(os.fspath(root)) if root is not None else None
        self.upstream = upstream.rstrip("/") if upstream else None
        self.latency = latency
        self.link = Link(bandwidth)
        self.faults: list[Fault] = []
        self.requests: list[tuple[str, str, int]] = []
        self.bytes_sent = 0
        #: requests being answered now, and the most at once (``reset_peak`` starts again)
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._local = threading.local()  # one upstream connection per server thread
        self._httpd = _Server(("127.0.0.1", port), _handler(self))
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
            name="tsexplore-test-http", daemon=True,
        )
        self._thread.start()

    @property
    def bandwidth(self) -> float:
        return self.link.bandwidth

    def set_link(self, latency: float | None = None, bandwidth: float | None = None) -> None:
        """Change the link's latency (seconds per request) and bandwidth (bytes/s; 0: none)."""
        if latency is not None:
            self.latency = float(latency)
        if bandwidth is not None:
            self.link = Link(bandwidth)

    # -- faults -----------------------------------------------------------------------------
    def fail(self, match: str, status: int = 500, times: int = 1) -> None:
        """The next ``times`` requests whose path contains ``match`` get ``status``."""
        with self._lock:
            self.faults.append(Fault(match, status, times))

    def stall(self, match: str, seconds: float, times: int = 1) -> Fault:
        """The next ``times`` matching requests hang ``seconds`` and then get no answer;
        the fault returned counts the requests ``stalling`` now."""
        fault = Fault(match, 0, times, seconds)
        with self._lock:
            self.faults.append(fault)
        return fault

    def cut(self, match: str, fraction: float = 0.5, times: int = 1) -> None:
        """The next ``times`` matching answers stop after ``fraction`` of their body (the
        headers promise all of it) and the connection closes: a body cut short mid-stream."""
        with self._lock:
            self.faults.append(Fault(match, 200, times, 0.0, max(1e-9, min(fraction, 0.999))))

    def reset_peak(self) -> None:
        """Start counting ``max_in_flight`` again from the requests in flight now."""
        with self._lock:
            self.max_in_flight = self.in_flight

    def _enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def count(self, match: str) -> int:
        """Requests so far (answered or failed) whose path contains ``match``."""
        with self._lock:
            return sum(1 for _, p, _ in self.requests if match in p)

    def _take_fault(self, path: str) -> Fault | None:
        with self._lock:
            fault = next((f for f in self.faults if f.match in path and f.times > 0), None)
            if fault is not None:
                fault.times -= 1
            return fault

    # -- answers ----------------------------------------------------------------------------
    def _from_folder(self, path: str, range_header: str | None) -> tuple[int, bytes, dict[str, str]]:
        assert self.root is not None
        rel = posixpath.normpath(path).lstrip("/")
        full = os.path.join(self.root, *rel.split("/")) if rel not in ("", ".") else self.root
        if not full.startswith(self.root) or not os.path.isfile(full):
            return 404, b"not found", {}
        with open(full, "rb") as f:
            data = f.read()
        if range_header:
            return _byte_range(range_header, data)
        return 200, data, {}

    def _from_upstream(
        self, method: str, target: str, headers: Any, body: bytes | None
    ) -> tuple[int, bytes, dict[str, str]]:
        assert self.upstream is not None
        conn = getattr(self._local, "conn", None)
        if conn is None:
            parsed = urlparse(self.upstream)
            conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port, timeout=60)
            self._local.conn = conn
        sent = {k: v for k, v in headers.items() if k.lower() not in _HOP_HEADERS}
        for attempt in (0, 1):  # a kept-alive upstream connection may have been closed
            try:
                conn.request(method, target, body=body, headers=sent)
                resp = conn.getresponse()
                data = resp.read()
                break
            except (http.client.HTTPException, OSError):
                conn.close()
                if attempt:
                    raise
        extra = {k: v for k, v in resp.getheaders() if k.lower() in _PASSED_HEADERS
                 or k.lower().startswith("x-amz-")}
        return resp.status, data, extra

    def _send_body(self, wfile: Any, data: bytes | memoryview) -> None:
        view = memoryview(data)
        for start in range(0, len(view), PIECE if self.link.bandwidth > 0 else len(view) or 1):
            piece = view[start : start + PIECE] if self.link.bandwidth > 0 else view
            wait = self.link.reserve(len(piece))
            if wait > 0:
                time.sleep(wait)
            wfile.write(piece)
            with self._lock:
                self.bytes_sent += len(piece)

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


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # the default 5 drops bursts of connections (1 s SYN retry)


def _handler(server: StoreServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out at once, no 40 ms ACK wait

        def log_message(self, *args: object) -> None:  # keep test output quiet
            pass

        def _serve(self) -> None:
            server._enter()
            try:
                self._answer()
            finally:
                server._leave()

        def _answer(self) -> None:
            path = unquote(urlparse(self.path).path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            if server.latency:
                time.sleep(server.latency)
            fault = server._take_fault(path)
            if fault is not None and fault.stall:
                with server._lock:
                    server.requests.append((self.command, path, 0))
                    fault.stalling += 1
                server._stop.wait(fault.stall)
                with server._lock:
                    fault.stalling -= 1
                self.close_connection = True  # stalled, then closed without an answer
                return
            extra: dict[str, str]
            if fault is not None and not fault.cut:
                status, data, extra = fault.status, b"injected fault", {}
            elif server.upstream is not None:
                status, data, extra = server._from_upstream(self.command, self.path, self.headers, body)
            else:
                status, data, extra = server._from_folder(path, self.headers.get("Range"))
            with server._lock:
                server.requests.append((self.command, path, status))
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            if "content-type" not in {k.lower() for k in extra}:
                self.send_header("Content-Type", "application/octet-stream")
            if fault is not None and fault.cut:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command == "HEAD" or not data:
                return
            if fault is not None and fault.cut:
                data = data[: max(1, int(len(data) * fault.cut))] if len(data) > 1 else b""
                self.close_connection = True
            try:
                server._send_body(self.wfile, data)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _serve  # noqa: N815 - http.server naming

    return Handler
