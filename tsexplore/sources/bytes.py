"""Bytes of stored objects, by byte ranges: the one interface every store implements.

A :class:`ByteStore` answers ``await store.get_ranges(key, ranges, ctx)`` (``get_ranges_sync``
where ``store.sync``): one bytes-like object per range of object ``key`` (None in ``ranges``:
the whole object; shorter where a range runs past the end), or None when the object is absent
(the caller fills or raises). Ranges are coalesced inside the store, one rule per medium
(:func:`coalesce`): a local file merges ranges 64 KiB apart, a remote store ranges closer than
its link's bandwidth-delay product (:mod:`.link`).

Transient failures (408/429/5xx, a reset connection, a body cut short, no answer within
``http_timeout``) are retried with jittered exponential backoff, at most ``retries`` times,
each counted; then :class:`~tsexplore.errors.RemoteReadError` or ``ReadTimeoutError``. The
settings and counters come from the read's context (``ctx``; None: one attempt, nothing
counted). Requests are counted (``store_requests``, ``range_requests``) and timed by the
store's :class:`~.link.LinkModel`. A server that ignores ``Range`` (Python's ``http.server``)
answers with the whole object, or, to obstore, refuses ranges: the ranges are cut from the
whole object, the host is remembered (its later ranges are whole GETs) and counted as
``whole_object_fallbacks``.

:class:`LocalFiles` (``os.preadv`` into the reading thread's scratch buffer) is here; the
remote stores and the choice of one for a URL are in :mod:`.remote`.
"""

from __future__ import annotations

import asyncio
import mmap
import os
import random
import re
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..errors import ReadTimeoutError, RemoteReadError
from . import buffers
from .link import LinkModel

#: bytes-like answers: ``bytes``, ``memoryview``, ``uint8`` arrays, obstore ``Bytes``
Buffer = Any
RETRY_STATUS = {408, 429}
#: ranges of a local file closer than this are read as one (a gap costs less than a read)
LOCAL_GAP = 64 * 1024
#: ranges of a remote object closer than this are fetched as one until the link is measured
REMOTE_GAP = 1 << 20
#: the longest read coalescing may make
MAX_RUN = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ByteRange:
    """Bytes ``[start, stop)`` of an object; ``stop=None`` to its end; a negative ``start``
    with ``stop=None`` is a suffix (the last ``-start`` bytes, see :meth:`suffix`).
    ``open_end``: the object may end before ``stop`` (a front of a stream read as far as an
    estimate): a shorter answer is all there is, not a corrupt object."""

    start: int
    stop: int | None = None
    open_end: bool = False

    @classmethod
    def suffix(cls, nbytes: int) -> ByteRange:
        return cls(-int(nbytes), None)

    @property
    def is_suffix(self) -> bool:
        return self.start < 0

    @property
    def bounded(self) -> bool:
        """Both ends are known offsets (it can be merged with its neighbours)."""
        return self.start >= 0 and self.stop is not None

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


@dataclass(frozen=True, slots=True)
class Run:
    """One read that serves several ranges: bytes ``[start, stop)``, holding the ranges at
    positions ``members`` of the list it was made from."""

    start: int
    stop: int
    members: tuple[int, ...]


def coalesce(ranges: Sequence[ByteRange], gap: int, max_run: int = MAX_RUN) -> list[Run]:
    """The reads that serve bounded ``ranges``: sorted by offset, a range joins the read
    before it when the gap between them is at most ``gap`` bytes and the read stays within
    ``max_run`` bytes (a single longer range is a read of its own)."""
    order = sorted(range(len(ranges)), key=lambda i: ranges[i].start)
    runs: list[Run] = []
    start = stop = -1
    members: list[int] = []
    for i in order:
        a, b = ranges[i].start, ranges[i].stop
        assert b is not None
        if members and a - stop <= gap and max(b, stop) - start <= max_run:
            stop = max(stop, b)
            members.append(i)
            continue
        if members:
            runs.append(Run(start, stop, tuple(members)))
        start, stop, members = a, b, [i]
    if members:
        runs.append(Run(start, stop, tuple(members)))
    return runs


def _cut(body: Buffer, start: int, rng: ByteRange) -> memoryview:
    """Bytes ``rng`` of an object from ``body``, which holds its bytes from ``start`` on
    (shorter past the object's end, as a server's answer)."""
    view = memoryview(body).cast("B")
    if rng.is_suffix:
        return view[max(0, len(view) + rng.start) :]
    return view[rng.start - start : None if rng.stop is None else rng.stop - start]


class RangeIgnored(Exception):
    """A byte range was answered with the whole object (``body``), or refused (``body`` is
    None): ranges are cut from the whole object (see the module docstring)."""

    def __init__(self, body: Buffer | None = None) -> None:
        super().__init__("the server ignores byte ranges")
        self.body = body


#: hosts that answered a byte range with the whole object: their ranges are whole GETs
_whole_object_hosts: set[str] = set()


def _count(ctx: Any, name: str, n: int = 1) -> None:
    if ctx is not None:
        ctx.count(name, n)


class ByteStore:
    """Gets byte ranges of objects by key (see the module docstring).

    Asynchronous stores implement ``_get(key, rng)`` (one request, no retries); blocking
    ones set ``sync`` and implement :meth:`get_ranges_sync`.
    """

    #: ``get_ranges_sync`` works (a blocking read: local files, in-memory filesystems)
    sync: bool = False
    #: where the store is, for messages
    where: str = ""
    #: ranges closer than this are read as one before the link is measured
    gap_default: int = REMOTE_GAP
    #: ``"zarr"``: the store's coroutines must run on zarr's own event loop (its sessions
    #: live there); None: on any loop
    home: str | None = None

    @property
    def link(self) -> LinkModel:
        """This store's link model (made on first use)."""
        found = self.__dict__.get("_link")
        if found is None:
            found = self.__dict__["_link"] = LinkModel()
        return found  # type: ignore[no-any-return]

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_link"}

    def url(self, key: str) -> str:
        return f"{self.where.rstrip('/')}/{key}" if self.where else key

    @property
    def host(self) -> str:
        """Who answers the requests (``scheme://host:port`` of a URL): the whole-object
        fallback is remembered for it."""
        parts = urlsplit(self.where)
        return f"{parts.scheme}://{parts.netloc}" if parts.netloc else f"{self.where}@{id(self)}"

    def gap(self) -> int:
        return self.link.gap(self.gap_default)

    # -- the interface ------------------------------------------------------------------------
    async def get_ranges(
        self, key: str, ranges: Sequence[ByteRange | None], ctx: Any = None
    ) -> list[Buffer] | None:
        """Bytes of ``ranges`` of object ``key`` (None in ``ranges``: the whole object), or
        None when the store has no such object."""
        if any(r is None for r in ranges) or (
            _whole_object_hosts and self.host in _whole_object_hosts
        ):
            return await self._from_whole(key, ranges, ctx, None)
        plain = [r for r in ranges if r is not None and r.bounded]
        others = [i for i, r in enumerate(ranges) if r is None or not r.bounded]
        runs = coalesce(plain, self.gap())
        wanted = [ByteRange(run.start, run.stop) for run in runs]
        wanted += [ranges[i] for i in others]  # type: ignore[misc]
        try:
            got = await asyncio.gather(*(self._request(key, rng, ctx) for rng in wanted))
        except RangeIgnored as exc:
            _whole_object_hosts.add(self.host)
            return await self._from_whole(key, ranges, ctx, exc.body)
        if any(g is None for g in got):
            return None
        if any(_longer_than_asked(g, r) for g, r in zip(got, wanted)):  # a 200 with the whole body
            _whole_object_hosts.add(self.host)
            return await self._from_whole(key, ranges, ctx, got[0])
        out: list[Buffer] = [None] * len(ranges)
        at = [i for i, r in enumerate(ranges) if r is not None and r.bounded]
        for run, body in zip(runs, got):
            for m in run.members:
                out[at[m]] = _cut(body, run.start, plain[m])
        for i, body in zip(others, got[len(runs) :]):
            out[i] = body
        return out

    def get_ranges_sync(
        self, key: str, ranges: Sequence[ByteRange | None], ctx: Any = None, *, reuse: bool = False
    ) -> list[Buffer] | None:
        """Like :meth:`get_ranges`, blocking (only where ``sync`` is True). ``reuse``: the
        answers may be views of this thread's scratch buffer, valid until its next read."""
        raise NotImplementedError(f"{type(self).__name__} has no blocking reads")

    def get_many_sync(
        self, requests: Sequence[tuple[str, Sequence[ByteRange | None]]], ctx: Any = None,
        *, reuse: bool = False,
    ) -> list[list[Buffer] | None]:
        """:meth:`get_ranges_sync` of several objects."""
        return [self.get_ranges_sync(k, r, ctx, reuse=reuse) for k, r in requests]

    def advise(self, keys: Sequence[str]) -> None:
        """Hint that these objects will be read soon (local files: ``WILLNEED``)."""

    # -- one request ----------------------------------------------------------------------------
    async def _get(self, key: str, rng: ByteRange | None) -> Buffer | None:
        raise NotImplementedError

    async def _request(self, key: str, rng: ByteRange | None, ctx: Any) -> Buffer | None:
        _count(ctx, "store_requests")
        if rng is not None:
            _count(ctx, "range_requests")
        link = self.link
        started = link.start()
        out = None
        try:
            out = await with_retries(lambda: self._get(key, rng), self.url(key), self.classify, ctx)
        finally:
            link.record(0 if out is None else len(out), time.monotonic() - started)
        return out

    async def _from_whole(
        self, key: str, ranges: Sequence[ByteRange | None], ctx: Any, body: Buffer | None
    ) -> list[Buffer] | None:
        """``ranges`` cut from the whole object's ``body`` (None: a whole GET first)."""
        if any(r is not None for r in ranges):
            _count(ctx, "whole_object_fallbacks")
        if body is None:
            body = await self._request(key, None, ctx)
            if body is None:
                return None
        return [body if r is None else _cut(body, 0, r) for r in ranges]

    def classify(self, exc: BaseException) -> str:
        """``"missing"``, ``"retry"``, ``"fatal"`` or ``"whole"`` for a failed request."""
        return classify_error(exc)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.where}>"


def _longer_than_asked(out: Buffer, rng: ByteRange | None) -> bool:
    """Whether ``out`` cannot be the answer to ``rng`` (it is the whole object)."""
    if rng is None:
        return False
    if rng.is_suffix:
        return len(out) > -rng.start
    return rng.stop is not None and len(out) > rng.stop - rng.start


# -- retries ----------------------------------------------------------------------------------


async def with_retries(
    attempt: Callable[[], Awaitable[Buffer | None]], what: str,
    classify: Callable[[BaseException], str], ctx: Any,
) -> Buffer | None:
    """``await attempt()`` within ``ctx``'s ``http_timeout``, retrying what is transient
    (``ctx`` None: one attempt, no time limit of tsexplore's)."""
    settings = None if ctx is None else ctx.settings
    tries = 0
    while True:
        try:
            if settings is None:
                return await attempt()
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
        if settings is None or kind == "fatal" or tries >= settings.retries:
            timeout = None if settings is None else settings.http_timeout
            raise _final(kind, error, what, tries + 1, timeout) from error
        _count(ctx, "retries")
        await asyncio.sleep(settings.retry_backoff * (2**tries) * (0.5 + random.random()))
        tries += 1


def _final(kind: str, exc: BaseException, what: str, attempts: int, timeout: float | None) -> Exception:
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


def _scratch_view(nbytes: int) -> memoryview:
    """This thread's scratch buffer, at least ``nbytes`` long (reused, so reading a chunk
    file does not first-touch fresh pages; a large one on huge pages, which the kernel copies
    a file's cached pages into faster: :func:`.buffers.mapping`)."""
    buf: mmap.mmap | None = getattr(_scratch, "buf", None)
    if buf is None or len(buf) < nbytes:
        buf = _scratch.buf = buffers.mapping(max(nbytes, 2 * len(buf) if buf is not None else 1), huge=True)
    return memoryview(buf)


class LocalFiles(ByteStore):
    """Files under a folder, read with ``os.preadv`` (blocking: call from a read thread)."""

    sync = True
    gap_default = LOCAL_GAP

    def __init__(self, root: str) -> None:
        self.root = root[len("file://") :] if root.startswith("file://") else root
        self.where = self.root

    def path(self, key: str) -> str:
        return os.path.join(self.root, key)

    def gap(self) -> int:
        return LOCAL_GAP

    async def get_ranges(
        self, key: str, ranges: Sequence[ByteRange | None], ctx: Any = None
    ) -> list[Buffer] | None:
        return self.get_ranges_sync(key, ranges, ctx)

    def get_many_sync(
        self, requests: Sequence[tuple[str, Sequence[ByteRange | None]]], ctx: Any = None,
        *, reuse: bool = False,
    ) -> list[list[Buffer] | None]:
        """Each file opened once. Several reads: what the page cache holds is read first
        without waiting for the disk, then the kernel is told of every read left (of every
        file) before any of them is read, so the disk works on all of them at once (telling
        it of bytes it already holds costs a walk of their pages). A file read only by
        bounded ranges is read as asked, without the kernel's read-ahead
        (:func:`no_read_ahead`)."""
        fds: dict[str, int | None] = {}
        ranged: dict[str, bool] = {}
        plans = []
        try:
            for key, ranges in requests:
                if key not in fds:
                    fds[key] = _open(self.path(key))
                fd = fds[key]
                ranged[key] = ranged.get(key, True) and all(r is not None and r.bounded for r in ranges)
                plans.append(None if fd is None else self._plan(fd, ranges))
            for key, fd in fds.items():
                if fd is not None and ranged[key]:
                    no_read_ahead(fd)
            several = sum(len(p[0]) for p in plans if p is not None) > 1
            total = sum(sum(b - a for a, b, _ in p[0]) for p in plans if p is not None) if reuse else 0
            arena = _scratch_view(total) if reuse else None
            # every read: (file, its start, where it goes, bytes read without waiting)
            todo: list[tuple[int, int, memoryview, int]] = []
            at = 0
            for (key, ranges), plan in zip(requests, plans):
                fd = fds[key]
                if fd is None or plan is None:
                    continue
                for start, stop, run in plan[0]:
                    if arena is not None:
                        view = arena[at : at + stop - start]
                        at += stop - start
                    else:
                        view = memoryview(bytearray(stop - start))
                    _count(ctx, "store_requests")
                    if any(ranges[m] is not None for m in run.members):
                        _count(ctx, "range_requests")
                    todo.append((fd, start, view, read_cached(fd, start, view) if several else 0))
            if several:
                for fd, start, view, got in todo:
                    if got < len(view):
                        hint(fd, start + got, len(view) - got)
            bodies = [view[: got + read_into(fd, start + got, view[got:])] for fd, start, view, got in todo]
            out: list[list[Buffer] | None] = []
            first = 0
            for (key, _), plan in zip(requests, plans):
                if fds[key] is None or plan is None:
                    out.append(None)
                    continue
                reads, cuts = plan
                out.append([_cut(bodies[first + k], reads[k][0], rng) for k, rng in cuts])
                first += len(reads)
            return out
        finally:
            for fd in fds.values():
                if fd is not None:
                    os.close(fd)

    def get_ranges_sync(
        self, key: str, ranges: Sequence[ByteRange | None], ctx: Any = None, *, reuse: bool = False
    ) -> list[Buffer] | None:
        return self.get_many_sync([(key, ranges)], ctx, reuse=reuse)[0]

    @staticmethod
    def _plan(fd: int, ranges: Sequence[ByteRange | None]) -> tuple[list[tuple[int, int, Run]],
                                                                     list[tuple[int, ByteRange]]]:
        """The reads (start, stop, run) that serve ``ranges`` of the open file, and for each
        range which read holds it (a range of the whole file for None and suffixes)."""
        size = None
        absolute: list[ByteRange] = []
        for rng in ranges:
            if rng is None or not rng.bounded:
                if size is None:
                    size = os.fstat(fd).st_size
                if rng is None:
                    rng = ByteRange(0, size)
                elif rng.is_suffix:
                    rng = ByteRange(max(0, size + rng.start), size)
                else:
                    rng = ByteRange(rng.start, size)
            absolute.append(rng)
        runs = coalesce(absolute, LOCAL_GAP)
        reads = [(run.start, run.stop, run) for run in runs]
        which = {m: k for k, run in enumerate(runs) for m in run.members}
        return reads, [(which[i], rng) for i, rng in enumerate(absolute)]

    def advise(self, keys: Sequence[str]) -> None:
        """Ask the kernel to start reading these files (``WILLNEED``), so cold reads overlap
        with decoding instead of waiting on the disk one by one."""
        for key in keys:
            fd = _open(self.path(key))
            if fd is not None:
                try:
                    hint(fd, 0, 0)
                finally:
                    os.close(fd)


def _open(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None


def hint(fd: int, start: int, length: int) -> None:
    """Ask the kernel to start reading bytes ``start .. start + length`` of the open file
    ``fd`` (``length`` 0: to its end)."""
    _fadvise(fd, start, length, "POSIX_FADV_WILLNEED")


def no_read_ahead(fd: int) -> None:
    """Tell the kernel to read of the open file ``fd`` only what is asked
    (``POSIX_FADV_RANDOM``). Its read-ahead takes a read at a file's start followed by the
    bytes after it (a blosc chunk's header, then its first blocks) for a sequential read and
    reads on to ``read_ahead_kb`` (often MiBs: the whole chunk file), so a frame in its
    chunks' first blocks would read every one of their files whole. What a reader's pattern
    predicts, the engine reads ahead itself (:mod:`tsexplore.engine.prefetch`)."""
    _fadvise(fd, 0, 0, "POSIX_FADV_RANDOM")


def _fadvise(fd: int, start: int, length: int, advice: str) -> None:
    """``posix_fadvise`` with ``os``'s constant ``advice``; only a hint: where the system has
    no such call or advice, or refuses, nothing happens."""
    value = getattr(os, advice, None)
    if value is not None and hasattr(os, "posix_fadvise"):
        try:
            os.posix_fadvise(fd, start, length, value)
        except OSError:
            pass


#: whether reads that do not wait for the disk work here (RWF_NOWAIT: Linux, most file systems)
_nowait = hasattr(os, "RWF_NOWAIT")


def read_cached(fd: int, start: int, out: memoryview) -> int:
    """Bytes of the open file ``fd`` from ``start`` into ``out`` that the page cache holds
    now, without waiting for the disk (``preadv2(RWF_NOWAIT)``); 0 where none are, or where
    the system cannot tell."""
    global _nowait
    if not _nowait or not len(out):
        return 0
    try:
        return os.preadv(fd, [out], start, os.RWF_NOWAIT)
    except BlockingIOError:
        return 0
    except OSError:  # not supported by this kernel or file system: never asked again
        _nowait = False
        return 0


def read_into(fd: int, start: int, out: memoryview) -> int:
    """Bytes of the open file ``fd`` from ``start`` into ``out``; the bytes read (fewer at
    the end of the file)."""
    got, n = 0, len(out)
    while got < n:
        k = os.preadv(fd, [out[got:]], start + got)
        if not k:
            break
        got += k
    return got
