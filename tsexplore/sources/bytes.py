"""Bytes of stored objects, whole or by byte range: one small interface for every store.

A :class:`ByteStore` gets the bytes of one object (a chunk, a shard) by its key, relative
to the store's root::

    await store.get(key)                          # the whole object
    await store.get(key, ByteRange(start, stop))  # bytes [start, stop)
    await store.get(key, ByteRange.suffix(n))     # its last n bytes
    store.get_sync(key, rng)                      # the same, blocking (where store.sync)

The answer is a bytes-like object (``bytes``, ``memoryview``, a ``uint8`` array: anything
with the buffer protocol), shorter than asked when the range runs past the object's end, or
``None`` when the store has no such object (the caller decides: the fill value, or
:class:`~tsexplore.errors.MissingChunkError`). Every other failure raises: transient ones
(408/429/5xx, a reset connection, a body cut short mid-stream, no answer within
``config.http_timeout``) are retried here with jittered exponential backoff, at most
``config.retries`` times, each counted with :func:`~.base.count_retry`; what is left raises
:class:`~tsexplore.errors.RemoteReadError` or :class:`~tsexplore.errors.ReadTimeoutError`.
Each request is counted in the engine's statistics (``store_requests``, and
``range_requests`` for byte ranges) through :func:`~.base.count_io`.

Servers that ignore ``Range`` (a plain static server such as Python's ``http.server``)
answer a range with the whole object (HTTP 200), or, to obstore, seem to refuse ranges:
either way the range is cut from the whole object here, the host is remembered (its later
ranges are whole-object GETs at once) and each such range is counted as a
``whole_object_fallbacks``. A read a whole GET would serve never fails for want of ranges.

:class:`LocalFiles` (``os.pread``; a thread's whole-object reads can go to a reused buffer)
is here; the remote ones (fsspec, obstore, zarr stores) and the function that picks one for
a URL are in :mod:`.remote`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import random
import re
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from .. import config
from ..errors import ReadTimeoutError, RemoteReadError
from . import buffers
from .base import count_io, count_retry, transfer_done, transfer_start

#: bytes-like answers: ``bytes``, ``memoryview``, ``uint8`` arrays, obstore ``Bytes``
Buffer = Any
RETRY_STATUS = {408, 429}
#: byte ranges of a local file closer than this are read as one (a gap costs less than a read)
LOCAL_GAP = 64 * 1024


@dataclass(frozen=True, slots=True)
class ByteRange:
    """Bytes ``[start, stop)`` of an object; ``stop=None`` to its end; a negative ``start``
    with ``stop=None`` is a suffix (the last ``-start`` bytes, see :meth:`suffix`)."""

    start: int
    stop: int | None = None

    @classmethod
    def suffix(cls, nbytes: int) -> ByteRange:
        return cls(-int(nbytes), None)

    @property
    def is_suffix(self) -> bool:
        return self.start < 0

    def __len__(self) -> int:
        if self.is_suffix:
            return -self.start
        if self.stop is None:
            raise TypeError("an open-ended byte range has no length")
        return self.stop - self.start

    def header(self) -> str:
        """The HTTP ``Range`` header value."""
        if self.is_suffix:
            return f"bytes={self.start}"
        return f"bytes={self.start}-{'' if self.stop is None else self.stop - 1}"


class RangeIgnored(Exception):
    """A byte range was answered with the whole object (``body``), or refused (``body`` is
    None): the range is cut from the whole object (see the module docstring)."""

    def __init__(self, body: Buffer | None = None) -> None:
        super().__init__("the server ignores byte ranges")
        self.body = body


#: hosts that answered a byte range with the whole object: their ranges are whole GETs
_whole_object_hosts: set[str] = set()


def _longer_than_asked(out: Buffer, rng: ByteRange) -> bool:
    """Whether ``out`` cannot be the answer to ``rng`` (it is the whole object)."""
    if rng.is_suffix:
        return len(out) > -rng.start
    return rng.stop is not None and len(out) > rng.stop - rng.start


def cut_range(body: Buffer, rng: ByteRange) -> memoryview:
    """Bytes ``rng`` of a whole object's ``body`` (shorter past its end, as a server's)."""
    view = memoryview(body).cast("B")
    if rng.is_suffix:
        return view[max(0, len(view) + rng.start) :]
    return view[rng.start : rng.stop]


class ByteStore:
    """Gets objects' bytes by key (see the module docstring). Subclasses implement ``_get``."""

    #: ``get_sync`` works (a blocking read: local files, in-memory filesystems)
    sync: bool = False
    #: where the store is, for messages
    where: str = ""

    def url(self, key: str) -> str:
        return f"{self.where.rstrip('/')}/{key}" if self.where else key

    @property
    def host(self) -> str:
        """Who answers the requests (``scheme://host:port`` of a URL): the whole-object
        fallback is remembered for it."""
        parts = urlsplit(self.where)
        return f"{parts.scheme}://{parts.netloc}" if parts.netloc else f"{self.where}@{id(self)}"

    async def get(self, key: str, rng: ByteRange | None = None) -> Buffer | None:
        """The object's bytes (``rng``: a part of them), or None when it is absent."""
        if rng is not None and _whole_object_hosts and self.host in _whole_object_hosts:
            return await self._cut_from_whole(key, rng, None)
        try:
            out = await self._request(key, rng)
        except RangeIgnored as exc:
            _whole_object_hosts.add(self.host)
            return await self._cut_from_whole(key, rng, exc.body)  # type: ignore[arg-type]
        if rng is not None and out is not None and _longer_than_asked(out, rng):
            _whole_object_hosts.add(self.host)  # a 200 with the whole body, unnoticed below
            return await self._cut_from_whole(key, rng, out)
        return out

    async def _request(self, key: str, rng: ByteRange | None) -> Buffer | None:
        count_range(rng)
        started = transfer_start()
        out = None
        try:
            out = await with_retries(lambda: self._get(key, rng), self.url(key), self.classify)
        finally:
            transfer_done(started, 0 if out is None else len(out))
        return out

    async def _cut_from_whole(self, key: str, rng: ByteRange, body: Buffer | None) -> Buffer | None:
        """Bytes ``rng`` of the object, cut from its whole ``body`` (None: a whole GET)."""
        count_io("whole_object_fallbacks")
        if body is None:
            body = await self._request(key, None)
            if body is None:
                return None
        return cut_range(body, rng)

    def get_sync(self, key: str, rng: ByteRange | None = None, *, reuse: bool = False) -> Buffer | None:
        """Like :meth:`get`, blocking (only where ``sync`` is True). ``reuse=True``: the answer
        may be a view of this thread's scratch buffer, valid until its next reused read."""
        raise NotImplementedError(f"{type(self).__name__} has no blocking reads")

    async def get_ranges(self, key: str, ranges: Sequence[ByteRange]) -> list[Buffer | None]:
        """Several ranges of one object, fetched concurrently."""
        return list(await asyncio.gather(*(self.get(key, r) for r in ranges)))

    async def _get(self, key: str, rng: ByteRange | None) -> Buffer | None:
        raise NotImplementedError

    def advise(self, keys: Sequence[str], ranges: ByteRange | Sequence[ByteRange] | None = None) -> None:
        """Hint that these objects (``ranges``: these bytes of them, one range for all or one
        per key) will be read soon (local files: ``WILLNEED``)."""

    def classify(self, exc: BaseException) -> str:
        """``"missing"``, ``"retry"`` or ``"fatal"`` for a failed request."""
        return classify_error(exc)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.where}>"


def count_range(rng: ByteRange | None) -> None:
    """Count one request to the store (and one byte-range request when ``rng`` is given)."""
    count_io("store_requests")
    if rng is not None:
        count_io("range_requests")


# -- retries ----------------------------------------------------------------------------------


async def with_retries(
    attempt: Callable[[], Awaitable[Buffer | None]], what: str, classify: Callable[[BaseException], str]
) -> Buffer | None:
    """``await attempt()`` within ``config.http_timeout``, retrying what is transient."""
    settings = config.get()
    tries = 0
    while True:
        try:
            return await asyncio.wait_for(attempt(), settings.http_timeout)
        except (asyncio.CancelledError, RangeIgnored):
            raise
        except (asyncio.TimeoutError, TimeoutError) as exc:
            kind, error = "timeout", exc
        except Exception as exc:  # noqa: BLE001 - classified below
            kind, error = classify(exc), exc  # type: ignore[assignment]
        if kind == "missing":
            return None
        if kind == "whole":
            raise RangeIgnored() from error
        if kind == "fatal" or tries >= settings.retries:
            raise _final(kind, error, what, tries + 1, settings.http_timeout) from error
        count_retry()
        await asyncio.sleep(settings.retry_backoff * (2**tries) * (0.5 + random.random()))
        tries += 1


def _final(kind: str, exc: BaseException, what: str, attempts: int, timeout: float) -> Exception:
    if kind == "timeout":
        return ReadTimeoutError(
            f"no answer from {what} within {timeout} s ({attempts} attempt(s)); "
            "raise it with tse.config.set(http_timeout=...)"
        )
    return RemoteReadError(
        f"{what} failed after {attempts} attempt(s): {type(exc).__name__}: {_short(exc)}"
    )


def _short(exc: BaseException) -> str:
    text = str(exc).split("\n\nDebug source", 1)[0]
    return text if len(text) < 400 else text[:400] + "..."


_STATUS = re.compile(r"status code: (\d{3})|\b(?:HTTP|status)\s*(\d{3})\b|\((\d{3})\)")
#: messages of transport failures worth another try (aiohttp, botocore, obstore/reqwest)
_TRANSIENT = (
    "ServerDisconnectedError", "ClientConnectorError", "ClientOSError", "ClientPayloadError",
    "IncompleteRead", "ContentLengthError", "ResponseStreamingError", "ReadTimeoutError",
    "EndpointConnectionError", "ConnectionClosedError",
)
_TRANSIENT_TEXT = (
    "body error", "error sending request", "connection closed", "connection reset",
    "payload is not completed", "broken pipe", "timed out", "incomplete",
)


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None) or getattr(exc, "code", None)
    if isinstance(status, int) and 100 <= status < 600:
        return status
    response = getattr(exc, "response", None)
    if isinstance(response, dict):  # botocore ClientError
        code = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if isinstance(code, int):
            return code
    found = _STATUS.search(str(exc).split("\n\nDebug source", 1)[0])
    if found:
        return int(next(g for g in found.groups() if g))
    return None


def classify_error(exc: BaseException) -> str:
    """What a failed request means: ``"missing"`` (absent object), ``"retry"``, ``"fatal"``
    or ``"whole"`` (the server does not serve byte ranges: ask for the whole object).

    Works on the errors of aiohttp/fsspec, s3fs/botocore, obstore and zarr stores.
    """
    if isinstance(exc, (FileNotFoundError, KeyError)):
        return "missing"
    if type(exc).__name__ == "NotSupportedError" and "range request not supported" in str(exc).lower():
        return "whole"  # obstore, when a range was answered with 200 and the whole object
    if isinstance(exc, PermissionError) or type(exc).__name__ in (
        "PermissionDeniedError", "UnauthenticatedError",
    ):
        return "fatal"
    status = _status(exc)
    if status == 404:
        return "missing"
    if status is not None:
        return "retry" if status in RETRY_STATUS or 500 <= status < 600 else "fatal"
    for e in _chain(exc):
        if type(e).__name__ in _TRANSIENT or isinstance(e, (ConnectionError, asyncio.IncompleteReadError)):
            return "retry"
    text = str(exc).lower()
    if any(t in text for t in _TRANSIENT_TEXT):
        return "retry"
    if isinstance(exc, OSError) and type(exc) in (OSError, IOError):  # s3fs: EIO for 5xx
        return "retry"
    return "fatal"


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen and len(out) < 8:
        out.append(e)
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return out


# -- local files --------------------------------------------------------------------------------

_scratch = threading.local()


class LocalFiles(ByteStore):
    """Files under a folder, read with ``os.pread`` (blocking: call from a read thread)."""

    sync = True

    def __init__(self, root: str) -> None:
        self.root = root[len("file://") :] if root.startswith("file://") else root
        self.where = self.root

    def path(self, key: str) -> str:
        return os.path.join(self.root, key)

    def get_sync(
        self, key: str, rng: ByteRange | None = None, *, reuse: bool = False
    ) -> Buffer | None:
        """``reuse=True``: a view of this thread's scratch buffer (decoders copy out; a new
        buffer per chunk is fresh memory, and first touches of fresh pages are dear: see
        :mod:`.buffers`)."""
        count_range(rng)
        try:
            fd = os.open(self.path(key), os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            if rng is None or rng.is_suffix or rng.stop is None:
                size = os.fstat(fd).st_size
                start = 0 if rng is None else max(0, size + rng.start) if rng.is_suffix else rng.start
                stop = size
            else:
                start, stop = rng.start, rng.stop
            return _pread(fd, start, max(0, stop - start), reuse, grow=rng is None)
        finally:
            os.close(fd)

    async def get(self, key: str, rng: ByteRange | None = None) -> Buffer | None:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, contextvars.copy_context().run, self.get_sync, key, rng)

    @contextlib.contextmanager
    def opened(self, keys: Sequence[str]) -> Iterator[dict[str, int | None]]:
        """Each file of ``keys`` opened once for reading (None: missing), closed on leaving:
        a batch of part reads hints and reads each file through one descriptor."""
        fds: dict[str, int | None] = {}
        try:
            for key in keys:
                if key not in fds:
                    try:
                        fds[key] = os.open(self.path(key), os.O_RDONLY)
                    except FileNotFoundError:
                        fds[key] = None
            yield fds
        finally:
            for fd in fds.values():
                if fd is not None:
                    os.close(fd)

    @staticmethod
    def hint(fd: int, rng: ByteRange) -> None:
        """Ask the kernel to start reading bytes ``rng`` of the open file ``fd`` (``(0, 0)``:
        the whole file); only a hint: where the system refuses, nothing happens."""
        if hasattr(os, "posix_fadvise"):
            try:
                os.posix_fadvise(fd, rng.start, len(rng), os.POSIX_FADV_WILLNEED)
            except OSError:
                pass

    @staticmethod
    def read_into(fd: int, rng: ByteRange, out: memoryview) -> int:
        """Bytes ``rng`` of the open file ``fd`` into ``out`` (``len(rng)`` long); the bytes
        read (fewer at the end of the file)."""
        count_range(rng)
        got, n = 0, len(out)
        while got < n:
            k = os.preadv(fd, [out[got:]], rng.start + got)
            if not k:
                break
            got += k
        return got

    def advise(self, keys: Sequence[str], ranges: ByteRange | Sequence[ByteRange] | None = None) -> None:
        """Ask the kernel to start reading these files, or these bytes of them (``WILLNEED``),
        so cold reads overlap with decoding instead of waiting on the disk one by one."""
        if not hasattr(os, "posix_fadvise"):
            return
        if ranges is None or isinstance(ranges, ByteRange):
            ranges = [ranges or ByteRange(0, 0)] * len(keys)  # (0, 0): the whole file
        for key, rng in zip(keys, ranges):
            try:
                fd = os.open(self.path(key), os.O_RDONLY)
            except OSError:
                continue  # a missing file is reported by its read
            try:
                self.hint(fd, rng)
            finally:
                os.close(fd)


def _pread(fd: int, start: int, n: int, reuse: bool, grow: bool) -> memoryview | np.ndarray:
    """``n`` bytes at ``start`` (fewer at the end of the file; ``grow``: and more if the file
    grew since it was sized, read to its end)."""
    if reuse:
        buf: bytearray | None = getattr(_scratch, "buf", None)
        if buf is None or len(buf) < n + 1:
            buf = bytearray(max(n + 1, 2 * len(buf) if buf is not None else 0))
            _scratch.buf = buf
        view = memoryview(buf)
    else:
        view = memoryview(buffers.empty(n + 1 if grow else n))  # type: ignore[arg-type]  # recycled when unused
    got = 0
    while got < n or (grow and got == len(view)):
        if got == len(view):  # the file grew: enlarge and keep reading
            bigger = bytearray(2 * len(view))
            bigger[:got] = view[:got]
            view = memoryview(bigger)
            if reuse:
                _scratch.buf = bigger
        k = os.preadv(fd, [view[got : len(view) if grow else n]], start + got)
        if not k:
            break
        got += k
    return view[:got]
