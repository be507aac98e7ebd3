"""One way from an xarray object to the engine source behind it and the selection over it.

``resolve(da)`` unwraps the lazy layers xarray keeps around a tsexplore variable
(``LazilyIndexedArray`` holding the composed ``isel``/``sel`` keys, copy-on-write and
memory-cache wrappers; or the dask array of ``open_dataset(chunks={})``) and returns a
frozen :class:`Resolved`: the :class:`~tsexplore.sources.ChunkSource` and the outer
selection over it, one part per source axis (an ``int`` drops the axis, a ``range`` or a
1-D integer array keeps it). Everything that streams a DataArray -- the Explorer,
``tse.reduce``, ``tse.batches``, ``tse.advise`` -- starts here, so they all see exactly the
selection.

A variable whose values are not a selection of a source (the result of arithmetic, CF
decoding that changes values, point-wise indexing or a transpose, another backend, NumPy)
raises :class:`~tsexplore.errors.NotStreamableError`; :func:`fallback_source` wraps such a
variable in an :class:`~tsexplore.sources.ArraySource` for the callers that can still
stream it through the engine.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import xarray as xr
from xarray.core import indexing

from .engine.array import StreamingArray, dask_source, read_selection
from .engine.planning import as_index_array
from .engine.types import Priority
from .errors import IndexingError, NotStreamableError
from .sources.base import ChunkIndex, ChunkSource, SyncChunkSource
from .sources.memory import ArraySource

#: one part of a selection: a fixed index (the axis is dropped), a range or an index array
Part = int | range | np.ndarray
_PASS_THROUGH = (indexing.CopyOnWriteArray, indexing.MemoryCachedArray)
WHAT_TO_DO = (
    "Open the data with tse.open_dataset(...) and select with .isel/.sel (those stay "
    "streamable), or call tse.open_dataset(obj) on this object to stream its values"
)


def _take(part: range | np.ndarray, k: Any, axis: int) -> Part:
    """Index one kept part with ``k`` (an int, a slice or an index array)."""
    n = len(part)
    if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
        i = int(k) + (n if int(k) < 0 else 0)
        if not 0 <= i < n:
            raise IndexingError(f"index {k} out of range for axis {axis} of length {n}")
        return int(part[i])
    if isinstance(k, slice):
        return part[k]  # a range of a range is a range; numpy slicing keeps arrays
    idx = as_index_array(k, n, axis)
    if isinstance(part, range):
        return part.start + idx * part.step
    return part[idx]


def _as_key(part: Part) -> Any:
    """A part as an entry of an orthogonal key for :func:`~tsexplore.engine.planning.plan_selection`."""
    if isinstance(part, range):
        if part.step > 0:
            return slice(part.start, part.stop, part.step)
        return slice(part.start, part.stop if part.stop >= 0 else None, part.step)
    return part


@dataclass(frozen=True, eq=False)
class Resolved:
    """A source and the outer selection over it: one part per source axis.

    ``int`` parts drop their axis; ``range`` and 1-D ``int64`` array parts keep it, in order.
    """

    source: ChunkSource
    selection: tuple[Part, ...]

    @classmethod
    def whole(cls, source: ChunkSource) -> Resolved:
        """The whole of ``source``."""
        return cls(source, tuple(range(int(n)) for n in source.shape))

    # -- what the selection is -------------------------------------------------------------
    @cached_property
    def axes(self) -> tuple[int, ...]:
        """The source axes the selection keeps, in order."""
        return tuple(a for a, p in enumerate(self.selection) if not isinstance(p, int))

    @property
    def dims(self) -> tuple[str, ...]:
        return tuple(self.source.dims[a] for a in self.axes)

    @cached_property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(self.selection[a]) for a in self.axes)  # type: ignore[arg-type]

    @property
    def ndim(self) -> int:
        return len(self.axes)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.source.dtype)

    @cached_property
    def is_whole(self) -> bool:
        """True when the selection is the whole source, in the source's order."""
        return all(
            isinstance(p, range) and p == range(n) for p, n in zip(self.selection, self.source.shape)
        )

    def grid(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The source's chunk grid as seen in selection space: ``(chunks, origin)``.

        Selection cell ``i`` of a step-1 range lies in stored chunk ``(origin + i) // chunk``;
        for strided ranges and index arrays these are the nearest regular grid (what block
        plans and screen-resolution strides use; reads always go through the exact key).
        """
        chunks, origin = [], []
        for a in self.axes:
            part, clen = self.selection[a], self.source.chunks[a]
            if isinstance(part, range) and part.step > 0:  # exact for step 1
                chunks.append(max(1, clen // part.step))
                origin.append(part.start // part.step)
            elif isinstance(part, range):
                chunks.append(max(1, clen // -part.step))
                origin.append(0)
            else:
                arr = np.asarray(part)
                span = int(arr.max() - arr.min() + 1) if arr.size else 1
                chunks.append(max(1, clen * arr.size // span))
                origin.append(0)
        return tuple(chunks), tuple(origin)

    # -- composing -------------------------------------------------------------------------
    def sub(self, key: tuple[Any, ...] = ()) -> Resolved:
        """The selection ``key`` (in this selection's index space) of this selection."""
        key = tuple(key)
        axes = self.axes
        if len(key) > len(axes):
            raise IndexingError(f"too many indices ({len(key)}) for a selection of {len(axes)} dims")
        parts = list(self.selection)
        for k, a in zip(key, axes):
            parts[a] = _take(parts[a], k, a)  # type: ignore[arg-type]
        return Resolved(self.source, tuple(parts))

    def source_key(self) -> tuple[Any, ...]:
        """The selection as an orthogonal key on the source (for ``read_selection``)."""
        return tuple(_as_key(p) for p in self.selection)

    def key(self, key: tuple[Any, ...] = ()) -> tuple[Any, ...]:
        """The source key of ``key`` given in this selection's index space."""
        if self.is_whole:  # the same index space: nothing to compose
            return tuple(key)
        return self.sub(key).source_key()

    def read(self, key: tuple[Any, ...] = (), **kwargs: Any) -> np.ndarray:
        """Read ``key`` of this selection through the engine (see ``read_selection``)."""
        return read_selection(self.source, self.key(key), **kwargs)

    def as_source(self) -> ChunkSource:
        """A source with exactly this selection's values: the source itself when whole."""
        return self.source if self.is_whole else SelectionSource(self)

    def __repr__(self) -> str:
        parts = ", ".join(
            str(p) if isinstance(p, (int, range)) else f"array(len={len(p)})" for p in self.selection
        )
        return f"<Resolved {self.source!r}[{parts}]>"


class SelectionSource(SyncChunkSource):
    """A selection of an engine source seen as a source of its own (a regular grid).

    Each chunk is read from the underlying source through the engine, so it shares that
    source's cache; read it on the caller's threads (``read_locally``) or the engine's
    (nested reads run inline), never both waiting on the same pool.
    """

    def __init__(self, resolved: Resolved) -> None:
        self.resolved = resolved
        src = resolved.source
        self.shape = resolved.shape
        self.dtype = resolved.dtype
        self.dims = resolved.dims
        self.chunks = resolved.grid()[0]
        self.fill_value = src.fill_value
        self.attrs = dict(src.attrs)
        self.name = getattr(src, "name", "data")
        self.is_async = False
        digest = hashlib.sha1(repr([_digest_part(p) for p in resolved.selection]).encode())
        self.token = f"{src.token}|sel-{digest.hexdigest()[:16]}"

    def read_chunk_sync(self, index: ChunkIndex) -> tuple[np.ndarray, int]:
        data = self.resolved.read(
            self.chunk_slices(index), priority=Priority.PLANNED, observe=True
        )
        return data, data.nbytes

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (SelectionSource, (self.resolved,))


def _digest_part(part: Part) -> Any:
    if isinstance(part, np.ndarray):
        return hashlib.sha1(np.ascontiguousarray(part).tobytes()).hexdigest()
    return part


# -- from xarray ----------------------------------------------------------------------------


def _variable(obj: Any) -> xr.Variable:
    if isinstance(obj, xr.DataArray):
        return obj.variable
    if isinstance(obj, xr.Variable):
        return obj
    if isinstance(obj, xr.Dataset):
        raise NotStreamableError(
            "expected one variable, got a Dataset; pick one, e.g. ds['temp'] "
            f"(its data variables are {list(map(str, obj.data_vars))})"
        )
    raise NotStreamableError(
        f"expected an xarray DataArray or Variable, got {type(obj).__name__}; "
        "open data with tse.open_dataset(...) first"
    )


def _is_dask(data: Any) -> bool:
    return hasattr(data, "dask") and hasattr(data, "chunks") and hasattr(data, "name")


def _describe(obj: Any, var: xr.Variable) -> str:
    name = getattr(obj, "name", None)
    label = f"variable {name!r}" if name is not None else "this variable"
    return f"{label} (dims {tuple(map(str, var.dims))}, shape {var.shape}, {var.dtype})"


def _why_not(data: Any) -> str:
    """Why the layer ``data`` is not a selection of a source, in words."""
    if isinstance(data, np.ndarray) or isinstance(data, indexing.NumpyIndexingAdapter):
        return "its values are in memory (a NumPy array: the result of arithmetic, .load() or .values)"
    if _is_dask(data):
        return "it is a dask array computed from other arrays (arithmetic, slicing or rechunking of dask data)"
    if isinstance(data, indexing.LazilyVectorizedIndexedArray):
        return "it was indexed point-wise or transposed (xarray holds a vectorized indexer)"
    name = type(data).__name__
    if "Elementwise" in name or "Coder" in name or "Endianness" in name or "BoolType" in name:
        return f"CF decoding changes its values lazily ({name}: scale_factor, add_offset, a mask or a cast)"
    return f"it is read by something other than a tsexplore source ({name})"


def resolve(obj: Any) -> Resolved:
    """The source behind ``obj`` (a DataArray or Variable) and the selection xarray holds over it.

    Raises :class:`~tsexplore.errors.NotStreamableError` when ``obj``'s values are not a
    selection of a tsexplore source.
    """
    var = _variable(obj)
    data: Any = var._data
    keys: list[tuple[Any, ...]] = []
    if _is_dask(data):
        src = dask_source(data)
        if src is None:
            raise NotStreamableError(
                f"{_describe(obj, var)} cannot be streamed from its store: {_why_not(data)}. {WHAT_TO_DO}"
            )
        found = Resolved.whole(src)
    else:
        for _ in range(64):
            if isinstance(data, StreamingArray):
                break
            if isinstance(data, indexing.LazilyIndexedArray):
                keys.append(tuple(data.key.tuple))
                data = data.array
            elif isinstance(data, _PASS_THROUGH):
                data = data.array
            else:
                raise NotStreamableError(
                    f"{_describe(obj, var)} cannot be streamed from its store: {_why_not(data)}. {WHAT_TO_DO}"
                )
        else:  # pragma: no cover - xarray never nests this deep
            raise NotStreamableError(f"too many lazy layers around this variable. {WHAT_TO_DO}")
        found = Resolved.whole(data.source)
        for key in reversed(keys):  # the innermost key applies first
            found = found.sub(key)
    if found.shape != tuple(var.shape) or found.dtype != np.dtype(var.dtype):
        raise NotStreamableError(
            f"{_describe(obj, var)} is not a selection of its source ({found.dtype}, shape "
            f"{found.shape}): CF decoding or a cast changed its values. {WHAT_TO_DO}"
        )
    return found


def try_resolve(obj: Any) -> Resolved | None:
    """:func:`resolve`, or None when ``obj`` is not a selection of a source."""
    try:
        return resolve(obj)
    except NotStreamableError:
        return None


def source_behind(obj: Any) -> ChunkSource | None:
    """The source at the bottom of ``obj``'s lazy layers, whatever they do to its values.

    Unlike :func:`resolve` this ignores the selection and any decoding on the way (a
    CF-decoded variable's stored source is found too): use it to find where data comes from,
    never to read it. None when no tsexplore source is behind ``obj``.
    """
    data: Any = _variable(obj)._data
    if _is_dask(data):
        return dask_source(data)
    for _ in range(64):
        if isinstance(data, StreamingArray):
            return data.source
        data = getattr(data, "array", None)
        if data is None:
            return None
    return None


def engine_backed(obj: Any) -> bool:
    """Whether reading ``obj``'s values waits on engine reads (resolvable or not)."""
    data: Any = _variable(obj)._data
    if _is_dask(data):
        return any(str(name).startswith("tsexplore-") for name in data.dask.layers)
    return source_behind(obj) is not None


def sources_of(obj: xr.Dataset | xr.DataArray) -> list[ChunkSource]:
    """The sources behind the variables of ``obj`` (see :func:`source_behind`)."""
    variables = obj.variables.values() if isinstance(obj, xr.Dataset) else [obj.variable]
    found = (source_behind(v) for v in variables)
    return [src for src in found if src is not None]


def fallback_source(obj: Any, name: str | None = None) -> ArraySource:
    """An :class:`ArraySource` over a variable that does not resolve (see :func:`resolve`).

    In-memory and dask data are sliced directly; any other lazy array is indexed through
    xarray's own layers. Chunks follow the variable's ``preferred_chunks`` when it has them.
    """
    var = _variable(obj)
    if name is None:
        name = str(getattr(obj, "name", None) or "data")
    dims = tuple(str(d) for d in var.dims)
    preferred = var.encoding.get("preferred_chunks") or {}
    chunks: Any = None
    if isinstance(preferred, dict) and dims and all(d in preferred for d in dims):
        chunks = tuple(min(int(preferred[d]), max(1, n)) for d, n in zip(dims, var.shape))
    data: Any = var._data
    array = data if isinstance(data, np.ndarray) or _is_dask(data) else var
    return ArraySource(array, dims, chunks, dict(var.attrs), name)


__all__ = [
    "Resolved",
    "SelectionSource",
    "engine_backed",
    "fallback_source",
    "resolve",
    "source_behind",
    "sources_of",
    "try_resolve",
]
