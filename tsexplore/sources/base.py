"""The ChunkSource contract: one N-dimensional array, read one chunk at a time by the engine.

A source knows its ``shape``, ``dtype``, ``dims``, native chunk grid (``chunks``: the chunk
length along each dimension), ``fill_value``, and the ``attrs`` and ``encoding`` that xarray's
own backend gives the stored (undecoded) variable; CF decoding happens above, in xarray's own
coders. It is built with :class:`SourceOptions` (what to do with absent chunks, which prefetch
policy, which remote reader), a frozen field the engine reads.

The engine reads every chunk through one pipeline (``tsexplore.engine.execute``): *locate*
(where the bytes of a :class:`~.requests.ChunkRequest` are) -> *fetch* (through the source's
:class:`~.bytes.ByteStore`) -> *decode* -> *check* -> *cache*. A source takes part in it in one
of two ways:

- it has a byte store (``store``) and says where a request's bytes are (:meth:`ChunkSource.locate`,
  perhaps after an auxiliary entry such as a shard index: :meth:`ChunkSource.parse_aux`) and
  how to decode them (:meth:`ChunkSource.decode`): Zarr arrays;
- or it reads its chunks itself (``locate`` says :data:`~.requests.SELF`): blocking sources
  subclass :class:`SyncChunkSource` and implement ``read_chunk_sync(index)``, run on a read
  thread; sources that wait on an event loop implement ``read_chunk_async(index, ctx)`` and
  set ``awaits``. Both return the decoded chunk and the encoded bytes moved for it.
  ``is_async`` says where its reads take their slots: among the read threads (False) or on
  the link of an asynchronous store (True).

A read is given a :class:`ReadContext`: the settings in force and the engine's counters.
"""

from __future__ import annotations

import copy
import itertools
import math
import operator
import types
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..config import REMOTE_READERS, Settings
from ..errors import ConfigError, IndexingError, MissingChunkError
from .requests import SELF, AuxKey, ChunkIndex, ChunkRequest, Located, NeedAux


class ReadContext(Protocol):
    """What the engine gives a read: the settings in force, its counters, and nested reads
    (a wrapper reading the source it wraps through the same stages)."""

    settings: Settings

    def count(self, name: str, n: int = 1) -> None: ...

    async def read(self, source: ChunkSource, index: ChunkIndex) -> tuple[np.ndarray, int]: ...


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
    ``reader``: who fetches remote chunk bytes (``tse.config`` ``remote_reader``).
    """

    missing: str = "fill"
    prefetch: str = "auto"
    reader: str = "auto"

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
        if self.reader not in REMOTE_READERS:
            raise ConfigError(f"remote_reader must be one of {REMOTE_READERS}, got {self.reader!r}")


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
    #: True when reads wait on an event loop (a remote store, ``read_chunk_async``): they run
    #: on the engine's I/O loop; False when they block a thread (local files, decoders: they
    #: run on the engine's read threads)
    is_async: bool = False

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
        self.check_index(index)
        return tuple([min(c, s - i * c) for i, c, s in zip(index, self.chunks, self.shape)])

    def chunk_nbytes(self, index: ChunkIndex | None = None) -> int:
        """Decoded size of a chunk (of a full interior chunk when ``index`` is None)."""
        shape = self.chunks if index is None else self.chunk_shape(index)
        return math.prod(shape) * self.dtype.itemsize

    def check_index(self, index: ChunkIndex) -> None:
        grid = self.grid_shape
        if len(index) != len(grid) or not all(map(operator.lt, index, grid)) or (index and min(index) < 0):
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

    # -- reading: the pipeline's questions ----------------------------------------------------
    #: where chunk bytes come from (None: the source reads its chunks itself)
    store: Any = None
    #: reads whose ``batch_key`` is equal (and not None) are cheaper together (inner chunks of
    #: one shard, read by ranges of one object): the engine runs up to ``max_batch`` as one
    max_batch: int = 1
    #: reads parts of chunks from their blosc blocks (``worth(box)``), or None
    blocks: Any = None
    #: a source that reads itself on an event loop (``read_chunk_async``), not on a thread
    awaits: bool = False
    #: ``"zarr"``: ``read_chunk_async`` runs on zarr's own event loop; None: on any
    home: str | None = None

    def batch_key(self, index: ChunkIndex) -> Hashable | None:
        return None

    def locate(self, request: ChunkRequest, aux: Callable[[AuxKey], Any],
               ranges_pay: Callable[[int, int, bool], bool] | None = None) -> Located | NeedAux:
        """Where the bytes of ``request`` are (``aux(key)``: an auxiliary entry the engine
        holds, or None); :data:`~.requests.SELF` for a source that reads itself.
        ``ranges_pay(whole, needed, head_known)``: whether a part's byte ranges pay against
        the whole object (a remote store; None: they do)."""
        return SELF

    def parse_aux(self, aux: AuxKey, data: Any) -> tuple[Any, int] | NeedAux:
        """The auxiliary entry ``aux`` from its bytes ``data`` (None: the object is absent)
        and the bytes it is counted for, or the larger read it needs."""
        raise NotImplementedError

    def decode(self, request: ChunkRequest, located: Located, data: list[Any]) -> tuple[np.ndarray, int]:
        """The values of ``request`` from the bytes of ``located`` (``data``: one buffer per
        range, or the whole object) and the bytes decoded. Raises what names the chunk."""
        raise NotImplementedError

    def read_chunk_sync(self, index: ChunkIndex) -> tuple[np.ndarray, int]:
        """A source reading itself, blocking: the decoded chunk and the bytes moved."""
        raise NotImplementedError

    async def read_chunk_async(self, index: ChunkIndex, ctx: ReadContext) -> tuple[np.ndarray, int]:
        """A source reading itself on an event loop (``awaits``)."""
        raise NotImplementedError

    def describe(self, index: ChunkIndex) -> str:
        """Chunk ``index`` in words, for error messages."""
        return f"chunk {tuple(index)} of {self!r}"

    def missing(self, index: ChunkIndex) -> MissingChunkError:
        """The error of a chunk the store does not have (read under ``missing="raise"``)."""
        return MissingChunkError(
            f"{self.describe(index)} is not in the store (opened with missing='raise'); "
            "open with missing='fill' (the default) to read it as the fill value",
            source=self.token, index=tuple(index),
        )

    def advise(self, indices: Sequence[ChunkIndex]) -> None:
        """Hint that these chunks will be read soon (e.g. start reading their files from
        disk in the background). Cheap and non-blocking; the default does nothing."""

    def close(self) -> None:
        """Release files and sessions held by the source."""

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} dims={self.dims} shape={self.shape} "
            f"chunks={self.chunks} dtype={self.dtype}>"
        )


class SyncChunkSource(ChunkSource):
    """A source that reads its chunks itself, blocking: implement ``read_chunk_sync``."""


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
