"""The read pipeline: every read of every source goes through :func:`execute`.

A batch of reads of one source (one read, or inner chunks of one shard the read table
batched) takes the same stages whatever it asks for (a whole chunk, a box of it by blosc
blocks, its stored bytes) and wherever the bytes are (a file, an object store, a zarr
``Store``, the encoded tier, a source that reads itself):

1. **locate** -- where each request's bytes are: a stored frame the encoded tier holds, else
   what the source says (:meth:`~tsexplore.sources.base.ChunkSource.locate`), once the
   auxiliary entries that say it (a shard's index, a blosc head) are read, parsed and kept --
   one read of each, whichever batch asks first;
2. **fetch** -- through the store's one interface (``get_ranges``, ranges coalesced by the
   store); a source that reads itself reads here;
3. **decode** -- into recycled buffers, on the read threads free at the time;
4. **check** -- an absent chunk is filled (``missing="fill"``, counted) or raises
   ``MissingChunkError``; shape and dtype are checked against the grid or box; every failure
   becomes a :class:`~tsexplore.errors.ChunkReadError` naming the source and the chunk;
5. **record** -- bytes moved and decoded, latency (statistics, the source's link model);
   stored bytes go to the encoded tier; the caller keeps decoded values.

:func:`execute` is a generator that yields what it does not do itself -- :class:`Fetch`,
:class:`Work` (decoding, or a source reading itself), :class:`Wait` -- and two drivers carry
them out: :func:`run_on_loop` (the I/O loop's task: awaits fetches, decodes on read threads)
and :func:`run_here` (the calling thread: blocking fetches, decoding shared with the read
threads free meanwhile).
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import functools
import math
import threading
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import (
    ChunkReadError,
    CorruptChunkError,
    EngineClosedError,
    MissingChunkError,
    ReadTimeoutError,
    TsExploreError,
)
from ..sources import buffers
from ..sources.base import ChunkSource
from ..sources.requests import SELF, Located, MoreBytes, NeedAux, Resumable
from .absent import AbsentChunks
from .cache import ChunkCache
from .context import EngineContext
from .loop import IOLoop
from .stats import Stats
from .types import STORED, AuxKey, Blocks, ChunkRequest

#: what a request located in the encoded tier reads from (its stored frame, held in memory)
MEMORY = Located("<memory>")
#: rounds of auxiliary reads before the data: a blosc head, a longer one
AUX_ROUNDS = 3
#: reads of a part's bytes: a stream's front read as far as an estimate, then further
MORE_ROUNDS = 4


@dataclass(slots=True, eq=False)
class Job:
    """One request through the stages, and what became of it."""

    request: ChunkRequest
    located: Located | NeedAux | None = None
    data: list[Any] | None = None  # the bytes fetched, one buffer per range
    value: Any = None  # the checked values (None for stored bytes)
    error: BaseException | None = None
    absent: bool = False  # the store has no such chunk
    moved: int = 0  # bytes moved from the store
    decoded: int = 0  # bytes decoded
    more: bool = False  # its bytes ended before its part: read ``located`` again (``MoreBytes``)

    @property
    def pending(self) -> bool:
        return self.error is None and not self.absent and self.value is None


@dataclass(slots=True, eq=False)
class FetchGroup:
    """Byte ranges of one object, for the jobs that need them (``spans[k]``: the ranges of
    ``jobs[k]`` in ``ranges``)."""

    key: str
    ranges: list[Any] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)
    bufs: list[Any] | None = None
    error: BaseException | None = None

    def add(self, job: Job, ranges: Sequence[Any]) -> None:
        self.spans.append((len(self.ranges), len(self.ranges) + len(ranges)))
        self.ranges.extend(ranges)
        self.jobs.append(job)

    def deliver(self, bufs: list[Any] | None) -> None:
        """The store's answer (None: the object is absent). A job's byte range that came
        back short is corrupt: the object is shorter than what located it says."""
        self.bufs = bufs
        for job, (a, b) in zip(self.jobs, self.spans):
            if bufs is None:
                job.absent = True
                continue
            job.data = bufs[a:b]
            job.moved += sum(len(d) for d in job.data)
            for rng, got in zip(self.ranges[a:b], job.data):
                if rng is not None and rng.bounded and len(got) != len(rng) and not (
                        rng.open_end and len(got) < len(rng)):
                    job.error = CorruptChunkError(
                        f"bytes {rng.start}..{rng.stop} of {self.key!r} were asked for, {len(got)} "
                        "came back (the object is shorter than its index or header says)")

    def fail(self, exc: BaseException) -> None:
        self.error = exc
        for job in self.jobs:
            job.error = exc


@dataclass(slots=True)
class Fetch:
    """Op: fetch each group's ranges from ``store`` (``reuse``: the answers may be views of
    the fetching thread's scratch buffer, decoded before its next fetch)."""

    store: Any
    groups: list[FetchGroup]
    reuse: bool = False


@dataclass(slots=True)
class Work:
    """Op: ``fn(job)`` for every job (it records its own failures in the job): on the read
    threads free, or, ``awaits``, as coroutines on the loop ``home`` (None: the engine's)."""

    fn: Callable[[Job], Any]
    jobs: list[Job]
    awaits: bool = False
    home: str | None = None


@dataclass(slots=True)
class Wait:
    """Op: wait for auxiliary reads another batch is making (each future holds the value)."""

    futures: list[cf.Future]


Op = Fetch | Work | Wait


@dataclass
class Services:
    """What the stages use: the cache, the counters, the absent chunks, the settings."""

    cache: ChunkCache
    stats: Stats
    absent: AbsentChunks
    context: EngineContext
    #: called with a stored frame's request when a read used it (prefetch accounting)
    used: Callable[[ChunkRequest], bool] = lambda request: False
    #: whether the views of a source follow a pattern (its frames come back: keep them)
    following: Callable[[ChunkSource], bool] = lambda source: False
    #: auxiliary entries being read: concurrent batches wait for one read of each
    loading: dict[AuxKey, cf.Future] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def claim(self, keys: Sequence[AuxKey]) -> tuple[list[AuxKey], dict[AuxKey, cf.Future]]:
        """Of ``keys``, those this batch reads (now marked loading), and the future of the
        value of every key (another batch's for those it is reading)."""
        mine, futures = [], {}
        with self.lock:
            for key in keys:
                found = self.loading.get(key)
                if found is None:
                    found = self.loading[key] = cf.Future()
                    mine.append(key)
                futures[key] = found
        return mine, futures

    def loaded(self, key: AuxKey, value: Any = None, exc: BaseException | None = None) -> None:
        with self.lock:
            future = self.loading.pop(key)
        if exc is None:
            future.set_result(value)
        else:
            future.set_exception(exc)


# -- the stages -----------------------------------------------------------------------------------


def execute(source: ChunkSource, requests: Sequence[ChunkRequest], services: Services,
            nested: bool = False) -> Generator[Op, None, list[Job]]:
    """Run ``requests`` of ``source`` through the stages; the jobs, in order. ``nested``: a
    read inside another read (a wrapper's), which checks and records the values itself: an
    absent chunk is a ``MissingChunkError``, nothing is counted."""
    started = time.perf_counter()
    jobs = [Job(r) for r in requests]
    yield from _locate(source, jobs, services)
    selfs = [j for j in jobs if j.located is SELF and j.pending]
    if selfs:
        if source.awaits:
            ctx = services.context
            yield Work(lambda job: _read_async(source, job, ctx), selfs, True, source.home)
        else:
            yield Work(lambda job: _read_sync(source, job), selfs)
    groups = _groups(jobs)
    if groups:
        stored_only = all(j.request.part is STORED for g in groups.values() for j in g.jobs)
        yield Fetch(source.store, list(groups.values()), reuse=not stored_only)
    todo = [j for j in jobs if j.pending and j.data is not None]
    for reads in range(1, MORE_ROUNDS + 1):
        if not todo:
            break
        yield Work(lambda job: _decode(source, job, services), todo)
        again = [j for j in todo if j.more]
        todo = []
        for job in again:
            job.more = False
            if reads == MORE_ROUNDS:
                job.error = CorruptChunkError(f"the stored bytes of chunk {job.request.index} still end "
                                              f"before the part asked for after {reads} reads")
        groups = _groups(again)
        if groups:
            yield Fetch(source.store, list(groups.values()), reuse=True)
            todo = [j for j in again if j.pending and j.data is not None]
    for job in jobs:
        if not nested:
            _check(source, job, services, time.perf_counter() - started)
        elif job.error is None and job.absent:
            job.error = source.missing(job.request.index)
    return jobs


def _groups(jobs: list[Job]) -> dict[str, FetchGroup]:
    """The byte ranges to fetch for the pending jobs that have no bytes yet, by object (a job
    located in the encoded tier has them; one located nowhere is absent)."""
    groups: dict[str, FetchGroup] = {}
    for job in jobs:
        where = job.located
        if job.pending and job.data is None and isinstance(where, Located) and where is not SELF:
            if where.key is None:
                job.absent = True
            elif where.ranges == ():
                job.data = []
            else:
                group = groups.get(where.key)
                if group is None:
                    group = groups[where.key] = FetchGroup(where.key)
                group.add(job, where.ranges or (None,))
    return groups


def _locate(source: ChunkSource, jobs: list[Job], services: Services) -> Generator[Op, None, None]:
    """Each job's place: its stored frame in memory, else where the source says (after the
    auxiliary entries it needs, fetched and kept)."""
    cache = services.cache
    look = cache.get
    ranges_pay = _ranges_pay(source, services)
    for job in jobs:
        request = job.request
        if request.part is STORED:
            if request in cache:  # a read kept the frame meanwhile
                job.value = STORED
                continue
            request = request.whole
        elif cache.encoded_entries:
            frame = look(request.stored)
            if frame is not None:
                services.stats.count("encoded_hits")
                if services.used(request.stored):
                    services.stats.count("prefetch_used")
                job.located, job.data = MEMORY, [frame]
                continue
        job.located = source.locate(request, look, ranges_pay)
    for _ in range(AUX_ROUNDS):
        need: dict[AuxKey, list[Job]] = {}
        for job in jobs:
            if isinstance(job.located, NeedAux) and job.error is None:
                need.setdefault(job.located.aux, []).append(job)
        if not need:
            return
        mine, futures = services.claim(list(need))
        try:
            yield from _read_aux(source, mine, futures, need, services)
        finally:  # (a batch abandoned half way: the others waiting for it go on)
            for aux in mine:
                if not futures[aux].done():
                    services.loaded(aux, exc=EngineClosedError("the read of it was abandoned"))
        for aux, waiting in need.items():
            try:
                value = futures[aux].result(0)
            except Exception as exc:  # noqa: BLE001 - goes to every job waiting for it
                if isinstance(exc, cf.TimeoutError):
                    exc = ReadTimeoutError(f"the read of {aux} by another batch did not end within "
                                           "wait_timeout; raise tse.config.set(wait_timeout=...)")
                for job in waiting:
                    job.error = exc
                continue
            for job in waiting:
                if isinstance(value, NeedAux):
                    job.located = value
                    continue
                request = job.request.whole if job.request.part is STORED else job.request
                job.located = source.locate(request, _with(aux, value, look), ranges_pay)
    for job in jobs:
        if isinstance(job.located, NeedAux) and job.error is None:
            job.error = CorruptChunkError(f"the auxiliary data of chunk {job.request.index} "
                                          f"cannot be read in {AUX_ROUNDS} rounds")


def _read_aux(source: ChunkSource, mine: list[AuxKey], futures: dict[AuxKey, cf.Future],
              need: dict[AuxKey, list[Job]], services: Services) -> Generator[Op, None, None]:
    """Read and parse the auxiliary entries ``mine``, wait for the others (``futures``):
    every future holds its value, a larger read it needs, or its error."""
    theirs = [f for aux, f in futures.items() if aux not in mine]
    if theirs:
        yield Wait(theirs)
    groups = [FetchGroup(need[aux][0].located.key, [need[aux][0].located.rng])  # type: ignore[union-attr, arg-type]
              for aux in mine]
    if groups:
        yield Fetch(source.store, groups)
    for aux, group in zip(mine, groups):
        try:
            if group.error is not None:
                raise group.error
            parsed = source.parse_aux(aux, None if group.bufs is None else group.bufs[0])
        except Exception as exc:  # noqa: BLE001 - goes to every job waiting for it
            services.loaded(aux, exc=exc)
            continue
        need[aux][0].moved += 0 if group.bufs is None else len(group.bufs[0])
        if isinstance(parsed, NeedAux):
            services.loaded(aux, parsed)
            continue
        value, nbytes = parsed
        services.cache.put(aux, value, nbytes)
        if aux.kind == "index":
            services.stats.count("index_reads")
        services.loaded(aux, value)


def _with(aux: AuxKey, value: Any, look: Callable[[AuxKey], Any]) -> Callable[[AuxKey], Any]:
    """``look`` that answers ``aux`` with ``value`` (which the cache may not have kept)."""
    return lambda key: value if key == aux else look(key)


def _ranges_pay(source: ChunkSource, services: Services) -> Callable[[int, int, bool], bool] | None:
    """For a part of a chunk: whether its blocks' byte ranges pay against the whole frame,
    which the engine then keeps (:func:`_keeps_frame`): ``keep_stored="always"``: never;
    ``"remote"`` (the default): not on a remote store whose views follow a pattern (the next
    frames of the chunk come next), else as the store's link says; ``"never"``: always.
    Local files read by ranges: the page cache holds the frames."""
    store = source.store
    if source.blocks is None or store is None:
        return None
    policy = services.context.settings.keep_stored
    if policy == "always" or (policy == "remote" and not store.sync and services.following(source)):
        return _never
    return None if store.sync else store.link.ranges_pay  # type: ignore[no-any-return]


def _never(whole: int, needed: int, head_known: bool) -> bool:
    return False


def _keeps_frame(source: ChunkSource, request: ChunkRequest, services: Services) -> bool:
    """Whether a chunk's stored bytes, fetched whole, are kept in the encoded tier: for a part
    (read whole: the next parts decode from it) by ``keep_stored``; for a whole chunk of a
    remote store whose views follow a pattern (its decoded values leave the cache once the
    views have passed it, a revisit decodes from memory)."""
    policy = services.context.settings.keep_stored
    if policy == "never" or (policy == "remote" and source.store.sync):
        return False
    return isinstance(request.part, Blocks) or (not source.store.sync and services.following(source))


def _read_sync(source: ChunkSource, job: Job) -> None:
    try:
        job.value, job.moved = source.read_chunk_sync(job.request.index)
    except Exception as exc:  # noqa: BLE001 - checked below
        job.error = exc


async def _read_async(source: ChunkSource, job: Job, ctx: EngineContext) -> None:
    try:
        job.value, job.moved = await source.read_chunk_async(job.request.index, ctx)
    except Exception as exc:  # noqa: BLE001 - checked below
        job.error = exc


def _decode(source: ChunkSource, job: Job, services: Services) -> None:
    """Decode a job's bytes (stored bytes are copied out of the fetch's buffer, kept)."""
    request, data = job.request, job.data
    assert data is not None
    try:
        if request.part is STORED:
            frame = _own(data[0])
            services.cache.put(request, frame, frame.nbytes)
            job.value = STORED
            return
        located = job.located
        assert isinstance(located, Located)
        try:
            job.value, job.decoded = source.decode(request, located, data)
        except MoreBytes as more:
            job.located, job.more = more.located, True
            return
        except Exception:
            if isinstance(located.how, Resumable):  # a broken stream: the next read starts afresh
                services.cache.discard((located.how.aux,))
            raise
        how = located.how
        if isinstance(how, Resumable):
            if how.whole is None:
                services.cache.put(how.aux, how, how.nbytes)
            else:  # decoded to its end: the chunk itself
                services.cache.discard((how.aux,))
                services.cache.put(request.whole, how.whole)
        if located.ranges is None and located is not MEMORY and _keeps_frame(source, request, services):
            frame = _own(data[0])
            services.cache.put(request.stored, frame, frame.nbytes)
    except Exception as exc:  # noqa: BLE001 - checked below
        job.error = exc
    finally:
        job.data = None  # the fetch's buffers may be a scratch to reuse


def _own(data: Any) -> np.ndarray:
    """A copy of fetched bytes to keep, in a recycled buffer (the fetch's may be a scratch)."""
    view = np.frombuffer(data, dtype=np.uint8)
    out = buffers.empty(view.size)
    out[:] = view
    return out


def _check(source: ChunkSource, job: Job, services: Services, seconds: float) -> None:
    """Fill, check and record a finished job (see the module docstring)."""
    request, stats = job.request, services.stats
    stats.add((("reads", 1), ("part_reads", 1)) if isinstance(request.part, Blocks) else (("reads", 1),))
    error = job.error
    if isinstance(error, MissingChunkError) or (error is None and job.absent):
        if request.part is STORED:  # the read that decodes it will fill or raise
            job.error, job.value = None, None
            return
        if source.options.missing == "fill":
            job.error = None
            stats.count("missing_filled")
            services.absent.add(request.array, request.index)
            whole = source.fill_chunk(request.index)
            box = request.box
            job.value = whole if box is None else np.ascontiguousarray(whole[tuple(slice(lo, hi) for lo, hi in box)])
        else:
            job.error = error or source.missing(request.index)
    elif error is None and request.part is not STORED:
        job.error = _shape_error(source, job)
    if job.error is not None:
        job.error, job.value = _named(source, request, job.error), None
        stats.count("errors")
        return
    if job.value is STORED:
        job.value = None
    stats.record_read(job.moved, job.decoded, seconds)
    services.context.link(source).read_done(seconds)


def _shape_error(source: ChunkSource, job: Job) -> ChunkReadError | None:
    """Check a job's values against the grid (or its box) and cast them to the source's
    dtype (in place); the error, if any."""
    value, request = job.value, job.request
    box = request.box
    expected = source.chunk_shape(request.index) if box is None else tuple(hi - lo for lo, hi in box)
    if value.shape != expected:
        what = f"chunk {request.index}" if box is None else f"part {box} of chunk {request.index}"
        return ChunkReadError(f"{source!r} returned shape {value.shape} for {what}, expected {expected}",
                              source=source.token, index=request.index)
    if value.dtype != source.dtype:
        job.value = value = value.astype(source.dtype)
    if not job.decoded:
        job.decoded = value.nbytes
    return None


def _named(source: ChunkSource, request: ChunkRequest, exc: BaseException) -> BaseException:
    """``exc`` as an error naming the source and the chunk (a store's error names only the
    object it read: the chunk is added to its message)."""
    if isinstance(exc, ChunkReadError):
        if exc.index is None:
            named = type(exc)(f"{source.describe(request.index)}: {exc}", source=source.token,
                              index=request.index)
            named.__cause__ = exc
            return named
        return exc
    if isinstance(exc, TsExploreError):
        return exc
    return ChunkReadError(f"reading chunk {request.index} of {source!r} failed: {exc!r}",
                          source=source.token, index=request.index)


# -- the drivers ----------------------------------------------------------------------------------


async def run_on_loop(gen: Generator[Op, None, list[Job]], io: IOLoop, ctx: EngineContext) -> list[Job]:
    """Drive ``gen`` on the I/O loop: fetches awaited, decoding on read threads."""
    op: Any = None
    try:
        op = next(gen)
        while True:
            if isinstance(op, Fetch) and op.store.sync:
                await io.to_thread(_fetch_here, op, ctx, False)
            elif isinstance(op, Fetch):
                store = op.store
                await asyncio.gather(*(_fetch_async(store, g, io, ctx) for g in op.groups))
            elif isinstance(op, Work) and op.awaits:
                await _await_all(io, op)
            elif isinstance(op, Work):
                await asyncio.gather(*(io.to_thread(_run_all, op.fn, part)
                                       for part in _split(op.jobs, io.cpus)))
            else:
                await asyncio.wait([asyncio.wrap_future(f) for f in op.futures], timeout=ctx.settings.wait_timeout)
            op = gen.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def _fetch_async(store: Any, group: FetchGroup, io: IOLoop, ctx: EngineContext) -> None:
    try:
        group.deliver(await io.at_home(store.home, store.get_ranges(group.key, group.ranges, ctx)))
    except Exception as exc:  # noqa: BLE001 - the group's jobs carry it
        group.fail(exc)


def run_here(gen: Generator[Op, None, list[Job]], io: IOLoop, ctx: EngineContext,
             threads: int | None = None) -> list[Job]:
    """Drive ``gen`` in the calling thread: blocking fetches, decoding shared with the read
    threads free meanwhile, ``threads`` in all at most (default: every read thread; a remote
    fetch or a read on an event loop waits for the loop)."""
    timeout = ctx.settings.wait_timeout
    op: Any = None
    try:
        op = next(gen)
        while True:
            if isinstance(op, Fetch) and op.store.sync:
                _fetch_here(op, ctx, op.reuse)
            elif isinstance(op, Fetch):
                requests = [(g.key, g.ranges) for g in op.groups]
                try:
                    got = io.run_coroutine(_at_home_all(io, op.store, requests, ctx), timeout)
                except Exception as exc:  # noqa: BLE001 - the groups' jobs carry it
                    for group in op.groups:
                        group.fail(exc)
                else:
                    for group, bufs in zip(op.groups, got):
                        group.deliver(bufs)
            elif isinstance(op, Work) and op.awaits:
                io.run_coroutine(_await_all(io, op), timeout)
            elif isinstance(op, Work):
                work: Callable[[list[Job]], None] = functools.partial(_run_all, op.fn)
                io.share(_split(op.jobs, io.cpus), work, timeout, threads)
            else:
                cf.wait(op.futures, timeout)
            op = gen.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def _fetch_here(op: Fetch, ctx: EngineContext, reuse: bool) -> None:
    """A blocking store's fetch, in this thread (``reuse``: into its scratch buffer)."""
    try:
        got = op.store.get_many_sync([(g.key, g.ranges) for g in op.groups], ctx, reuse=reuse)
    except Exception as exc:  # noqa: BLE001 - the groups' jobs carry it
        for group in op.groups:
            group.fail(exc)
        return
    for group, bufs in zip(op.groups, got):
        group.deliver(bufs)


async def _at_home_all(io: IOLoop, store: Any, requests: list[Any], ctx: EngineContext) -> list[Any]:
    return list(await asyncio.gather(*(io.at_home(store.home, store.get_ranges(k, r, ctx)) for k, r in requests)))


async def _await_all(io: IOLoop, op: Work) -> None:
    await asyncio.gather(*(io.at_home(op.home, op.fn(job)) for job in op.jobs))


def _run_all(fn: Callable[[Job], None], jobs: list[Job]) -> None:
    for job in jobs:
        fn(job)


def _split(jobs: list[Job], threads: int) -> list[list[Job]]:
    """Jobs in groups for the threads: two groups per thread that may take them (balance)."""
    step = max(1, math.ceil(len(jobs) / (2 * max(1, threads))))
    return [jobs[i : i + step] for i in range(0, len(jobs), step)]
