"""The ChunkSource contract: one N-dimensional array read one chunk at a time.

A source knows its ``shape``, ``dtype``, ``dims``, native chunk grid (``chunks``: the chunk
length along each dimension), ``fill_value``, and the ``attrs`` and ``encoding`` that xarray's
own backend gives the stored (undecoded) variable; CF decoding happens above, in xarray's own
coders. It is built with :class:`SourceOptions` (what to do with absent chunks, which
prefetch policy), a frozen field the engine reads. The engine asks it for one chunk by
grid index with ``await source.read_chunk_counted(index)``, which returns the decoded chunk
(trimmed to the array's edge) and the number of *encoded* bytes that were moved to get it.

Synchronous sources subclass :class:`SyncChunkSource` and implement ``read_chunk_sync``; the
engine runs those on its thread pool. Asynchronous sources (remote stores) implement
``read_chunk_counted`` as a coroutine and run on the engine's I/O loop.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import copy
import itertools
import math
import threading
import time
import types
from collections.abc import Awaitable, Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError, IndexingError, ReadTimeoutError

ChunkIndex = tuple[int, ...]

@dataclass(frozen=True)
class ReadServices:
    """What the engine lends the read in progress (set per read: an asyncio task, or the
    thread of an inline read; None outside the engine).

    ``count(name, n)`` adds to a statistics counter (``store_requests``, ``range_requests``,
    ``index_reads``); ``cache_get(key)`` / ``cache_put(key, array)`` use the engine's chunk
    cache, within its byte budget, for what a source keeps between reads (shard indexes).
    A source keys its entries with a token of its own (``f"{token}#..."``), never a chunk key.
    """

    count: Callable[[str, int], None]
    cache_get: Callable[[Hashable], np.ndarray | None]
    cache_put: Callable[[Hashable, np.ndarray], bool]
    #: a network request starts (returns its start time) / finished ``(nbytes, seconds)``:
    #: how the engine measures the link's latency and bandwidth
    transfer_start: Callable[[], float] | None = None
    transfer: Callable[[int, float], None] | None = None
    #: ``helper(fn)`` runs ``fn()`` on another read thread, when one is free: it may start
    #: late or never, so share work with it through a queue both take from, and wait only
    #: for what it took (see :func:`share`)
    helper: Callable[[Callable[[], None]], None] | None = None


def share(
    jobs: list[Any],
    run: Callable[[Any], Any],
    timeout: float,
    helper: Callable[[Callable[[], None]], None] | None = None,
) -> list[Any]:
    """``run(job)`` of each job, in order: this thread and the read threads free meanwhile
    (started by ``helper``, default the engine's lent to the read in progress) take jobs in
    turn until none is left; this thread then waits (at most ``timeout`` seconds) only for
    the jobs a helper took, which are running, and raises what one of them raised. A helper
    that starts late finds nothing left and returns. Outside the engine, or for one job,
    this thread runs them all."""
    if helper is None:
        services = read_services.get()
        helper = None if services is None else services.helper
    if helper is None or len(jobs) < 2:
        return [run(job) for job in jobs]
    queue = collections.deque(enumerate(jobs))
    out: list[Any] = [None] * len(jobs)
    failed: list[BaseException] = []
    ended = threading.Semaphore(0)
    lock = threading.Lock()
    running = 0  # jobs taken and not finished

    def take() -> None:
        nonlocal running
        while True:
            with lock:
                if not queue:
                    return
                k, job = queue.popleft()
                running += 1
            try:
                out[k] = run(job)
            except BaseException as exc:  # noqa: BLE001 - raised in the thread that waits
                failed.append(exc)
            finally:
                with lock:
                    running -= 1
                ended.release()

    context = contextvars.copy_context()
    for _ in range(len(jobs) - 1):
        helper(lambda: context.copy().run(take))
    take()
    deadline = time.monotonic() + timeout
    while True:
        with lock:
            if not running:
                break
        if not ended.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise ReadTimeoutError(
                f"{running} of {len(jobs)} read jobs taken by other read threads did not finish "
                f"within {timeout} s; raise tse.config.set(wait_timeout=...) or check the store"
            )
    if failed:
        raise failed[0]
    return out


#: the services of the read running in this context (None outside the engine)
read_services: contextvars.ContextVar[ReadServices | None] = contextvars.ContextVar(
    "tsexplore_read_services", default=None
)


def transfer_start() -> float | None:
    """Note the start of a network request (see :func:`transfer_done`)."""
    services = read_services.get()
    if services is None or services.transfer_start is None:
        return None
    services.transfer_start()
    return time.perf_counter()


def transfer_done(started: float | None, nbytes: int) -> None:
    """A network request that :func:`transfer_start` noted ended, having delivered
    ``nbytes`` (0 when it failed: call it on every exit)."""
    services = read_services.get()
    if started is not None and services is not None and services.transfer is not None:
        services.transfer(nbytes, time.perf_counter() - started)


def count_io(name: str, n: int = 1) -> None:
    """Add ``n`` to the engine's counter ``name`` for the read in progress (no-op outside)."""
    services = read_services.get()
    if services is not None:
        services.count(name, n)


def count_retry() -> None:
    """Report one retried request of the read in progress (a source calls this)."""
    count_io("retries")


MISSING_POLICIES = ("fill", "raise")
PREFETCH_POLICIES = ("auto", "off", "momentum", "neighbourhood")


@dataclass(frozen=True)
class SourceOptions:
    """How the engine treats one source; sources are built with it (``source.options``).

    ``missing``: ``"fill"`` (the default, as the Zarr spec, zarr and xarray do) reads a chunk
    the store does not have as the fill value, counted as ``missing_filled`` in the stats;
    ``"raise"`` raises :class:`~tsexplore.errors.MissingChunkError` instead.
    ``prefetch``: ``"auto"`` (learn from the access pattern), ``"momentum"``,
    ``"neighbourhood"`` or ``"off"`` (``True`` means ``"auto"``; ``False``/``None`` ``"off"``).
    """

    missing: str = "fill"
    prefetch: str = "auto"

    def __post_init__(self) -> None:
        if self.missing not in MISSING_POLICIES:
            raise ConfigError(f"missing must be 'raise' or 'fill', got {self.missing!r}")
        prefetch: Any = self.prefetch
        if prefetch is True:
            object.__setattr__(self, "prefetch", "auto")
        elif prefetch in (False, None):
            object.__setattr__(self, "prefetch", "off")
        elif prefetch not in PREFETCH_POLICIES:
            raise ConfigError(f"prefetch must be one of {PREFETCH_POLICIES}, got {prefetch!r}")


DEFAULT_OPTIONS = SourceOptions()


class ChunkSource:
    """Base class of every source. Subclasses set the attributes in ``__init__``."""

    #: a stable identity for cache keys: equal tokens mean equal content
    token: str
    shape: tuple[int, ...]
    dtype: np.dtype
    dims: tuple[str, ...]
    chunks: tuple[int, ...]
    fill_value: Any = None
    attrs: Mapping[str, Any]
    #: what xarray's own backend puts in the stored variable's ``encoding`` (chunks, codecs)
    encoding: Mapping[str, Any] = types.MappingProxyType({})
    #: how the engine treats this source (absent chunks, prefetch policy)
    options: SourceOptions = DEFAULT_OPTIONS
    #: True when ``read_chunk_counted`` is a coroutine that waits on the network (it runs on
    #: the engine's I/O loop); False when reads block a thread (local files, decoders: they
    #: run on the engine's read threads through ``read_chunk_sync``)
    is_async: bool = False
    #: a hint of the latency of one read in seconds (None: unknown, learned by the engine)
    latency_hint: float | None = None

    @property
    def store_dtype(self) -> np.dtype:
        """The dtype xarray's own backend reports for the stored variable (may be
        big-endian, or differ from ``dtype`` in other ways); chunks come out as ``dtype``."""
        return np.dtype(getattr(self, "_store_dtype", None) or self.dtype)

    def with_options(self, options: SourceOptions) -> ChunkSource:
        """This source built with other ``options`` (a shallow copy; itself when equal).

        A copy that reads absent chunks differently gets its own token, so fill values
        cached for one never answer a read of the other.
        """
        if options == self.options:
            return self
        clone = copy.copy(self)
        clone.options = options
        if options.missing != self.options.missing:
            clone.token = f"{self.token}#missing={options.missing}"
        return clone

    def __dask_tokenize__(self) -> tuple[str, str]:
        return (type(self).__name__, self.token)

    # -- geometry -------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """Number of chunks along each dimension (worked out again when the shape or the
        chunks are replaced: asked for on every read)."""
        shape, chunks = self.shape, self.chunks
        found = self.__dict__.get("_grid")
        if found is None or found[0] is not shape or found[1] is not chunks:
            grid = tuple(math.ceil(s / c) if s else 0 for s, c in zip(shape, chunks))
            found = self.__dict__["_grid"] = (shape, chunks, grid)
        return found[2]  # type: ignore[no-any-return]

    @property
    def nchunks(self) -> int:
        return math.prod(self.grid_shape)

    def chunk_slices(self, index: ChunkIndex) -> tuple[slice, ...]:
        """The region of the array covered by chunk ``index``."""
        self.check_index(index)
        return tuple(
            slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, self.chunks, self.shape)
        )

    def chunk_shape(self, index: ChunkIndex) -> tuple[int, ...]:
        """Shape of chunk ``index`` once trimmed to the array's edge."""
        return tuple(sl.stop - sl.start for sl in self.chunk_slices(index))

    def chunk_nbytes(self, index: ChunkIndex | None = None) -> int:
        """Decoded size of a chunk (of a full interior chunk when ``index`` is None)."""
        shape = self.chunks if index is None else self.chunk_shape(index)
        return math.prod(shape) * self.dtype.itemsize

    def check_index(self, index: ChunkIndex) -> None:
        grid = self.grid_shape
        if len(index) != len(grid) or any(not 0 <= i < g for i, g in zip(index, grid)):
            raise IndexingError(
                f"chunk index {tuple(index)} is outside the chunk grid {grid} of {self!r}"
            )

    def iter_chunks(self) -> Iterator[ChunkIndex]:
        """Every chunk index in C order (lazy; never materialises the grid)."""
        return itertools.product(*(range(g) for g in self.grid_shape))

    def fill_chunk(self, index: ChunkIndex) -> np.ndarray:
        """A chunk made only of the fill value (an absent chunk under ``missing="fill"``)."""
        fill = self.fill_value
        if fill is None:
            fill = np.nan if self.dtype.kind in "fc" else 0
        return np.full(self.chunk_shape(index), fill, dtype=self.dtype)

    # -- reading --------------------------------------------------------------------------
    def partial_reader(self) -> Any:
        """What reads parts of this source's chunks (only the blosc blocks a region needs,
        :class:`~tsexplore.sources.parts.BloscParts`), or None: chunks are read whole."""
        return None

    def advise(self, indices: Sequence[ChunkIndex]) -> None:
        """Hint that these chunks will be read soon (e.g. start reading their files from
        disk in the background). Cheap and non-blocking; the default does nothing."""

    async def read_chunk_counted(self, index: ChunkIndex) -> tuple[np.ndarray, int]:
        """Decoded chunk ``index`` and the encoded bytes moved to read it."""
        raise NotImplementedError

    #: ``coalesce_key`` may group reads (checked before calling it, for speed)
    coalesces: bool = False
    #: most reads the engine hands ``read_chunks_counted`` at once
    max_batch: int = 1

    def coalesce_key(self, index: ChunkIndex) -> Hashable | None:
        """Reads with equal keys (not None) are cheaper together (inner chunks of one shard):
        the engine may hand them to :meth:`read_chunks_counted` as one batch."""
        return None

    def read_chunks_counted(
        self, indices: Sequence[ChunkIndex]
    ) -> list[Awaitable[tuple[np.ndarray, int]]]:
        """One awaitable per index, in order, each giving what ``read_chunk_counted`` gives
        (or raising what it raises); the source may share work among them (one ranged read
        of adjacent inner chunks). Nothing runs until the first is awaited; the engine awaits
        every one of them, each inside its own checked read."""
        return [self.read_chunk_counted(index) for index in indices]

    async def read_chunk(self, index: ChunkIndex) -> np.ndarray:
        """Decoded chunk ``index`` (trimmed at the array's edge)."""
        array, _ = await self.read_chunk_counted(index)
        return array

    def close(self) -> None:
        """Release files and sessions held by the source."""

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} dims={self.dims} shape={self.shape} "
            f"chunks={self.chunks} dtype={self.dtype}>"
        )


class SyncChunkSource(ChunkSource):
    """A source whose reads block: implement ``read_chunk_sync``; the engine threads it."""

    def read_chunk_sync(self, index: ChunkIndex) -> tuple[np.ndarray, int]:
        raise NotImplementedError

    async def read_chunk_counted(self, index: ChunkIndex) -> tuple[np.ndarray, int]:
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()  # the read thread reports to this read's counter
        return await loop.run_in_executor(None, context.run, self.read_chunk_sync, index)


@dataclass
class SourceGroup:
    """Everything needed to build an xarray.Dataset over engine-backed variables.

    ``coords``: variables read eagerly (index coordinates, scalars), each
    ``(dims, values, attrs)`` or ``(dims, values, attrs, encoding[, dtype])`` as xarray's own
    backend gives the stored variable (undecoded; ``dtype`` what the backend reports).
    ``encoding``: the dataset's encoding (e.g. ``unlimited_dims`` of a NetCDF file).
    ``coord_names``: variables that are coordinates although nothing in their attributes
    says so (the ``file`` of an image folder, the coordinates of an xarray object).
    """

    variables: dict[str, ChunkSource]
    coords: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)
    encoding: dict[str, Any] = field(default_factory=dict)
    coord_names: set[str] = field(default_factory=set)
    #: the pyramid this is ``level`` of (``tsexplore.sources.multiscale``), or None
    multiscale: Any = None
    level: int = 0

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        return ("SourceGroup", tuple(sorted((k, v.token) for k, v in self.variables.items())))


def native_dtype(dtype: Any) -> np.dtype:
    """``dtype`` in the machine's byte order: what a decoded chunk holds. Only fixed-width
    numbers (and structured dtypes of them) have a byte order; variable-width strings
    (object, NumPy ``StringDType``) and single bytes are returned as they are (NumPy's
    new-style dtypes refuse ``newbyteorder``)."""
    dt = np.dtype(dtype)
    if dt.kind in "OT" or dt.isnative:
        return dt
    return dt.newbyteorder("=")


def normalize_chunks(
    chunks: int | tuple[int, ...] | Mapping[str, int] | None,
    shape: tuple[int, ...],
    dims: tuple[str, ...],
    default_bytes: int,
    itemsize: int,
) -> tuple[int, ...]:
    """Turn a user's chunk request into one chunk length per dimension.

    ``None`` picks a grid of about ``default_bytes`` per chunk, splitting the leading
    dimensions first (the trailing ones stay whole, like an image plane).
    """
    if chunks is None:
        out = list(shape)
        budget = max(1, default_bytes // max(itemsize, 1))
        for axis in range(len(shape)):
            rest = math.prod(out[axis + 1 :]) or 1
            if math.prod(out) <= budget:
                break
            out[axis] = max(1, min(shape[axis], budget // rest))
        return tuple(max(1, c) for c in out)
    if isinstance(chunks, int):
        chunks = (chunks,) * len(shape)
    if isinstance(chunks, Mapping):
        unknown = set(chunks) - set(dims)
        if unknown:
            raise ConfigError(f"chunks names unknown dims {sorted(unknown)}; dims are {dims}")
        chunks = tuple(int(chunks.get(d, s) or s) for d, s in zip(dims, shape))
    chunks = tuple(int(c) for c in chunks)
    if len(chunks) != len(shape) or any(c <= 0 for c in chunks):
        raise ConfigError(
            f"chunks={chunks} must give one positive length per dimension of shape {shape}"
        )
    return tuple(min(c, s) if s else 1 for c, s in zip(chunks, shape))
