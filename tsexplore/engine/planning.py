"""Pure planning: an orthogonal selection -> the chunks it touches and where each piece goes.

``plan_selection(key, shape, chunks)`` never reads anything; it is property-tested against
NumPy. A key is a tuple with one entry per dimension: an ``int``, a ``slice`` (any step) or a
1-D integer/boolean array (orthogonal, "outer" indexing as xarray means it).

Array indexers are planned over their *sorted unique* values, so each chunk contributes one
contiguous block of the output; a final ``np.take`` per such dimension restores the
requested order and duplicates.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..errors import IndexingError

Piece = tuple[int, "slice | np.ndarray", slice]  # (chunk index, selection in chunk, output slice)


@dataclass(frozen=True)
class DimPlan:
    """How one dimension of a selection maps onto the chunk grid."""

    pieces: tuple[Piece, ...]
    length: int  # length of this dimension in the assembled (pre-reorder) block
    reorder: np.ndarray | None  # np.take indices restoring order/duplicates, or None
    drop: bool  # an integer indexer: the dimension disappears from the result


@dataclass(frozen=True)
class SelectionPlan:
    dims: tuple[DimPlan, ...]

    @property
    def block_shape(self) -> tuple[int, ...]:
        return tuple(d.length for d in self.dims)

    @property
    def out_shape(self) -> tuple[int, ...]:
        shape = []
        for d in self.dims:
            if d.drop:
                continue
            shape.append(len(d.reorder) if d.reorder is not None else d.length)
        return tuple(shape)

    @property
    def nchunks(self) -> int:
        return math.prod(len(d.pieces) for d in self.dims)

    def chunk_indices(self) -> Iterator[tuple[int, ...]]:
        return itertools.product(*([p[0] for p in d.pieces] for d in self.dims))

    def chunk_ranges(self) -> tuple[tuple[int, int], ...]:
        """Per dimension, the first and last chunk touched (empty dims give (0, -1))."""
        return tuple(
            (d.pieces[0][0], d.pieces[-1][0]) if d.pieces else (0, -1) for d in self.dims
        )


def as_index_array(k: object, size: int, axis: int) -> np.ndarray:
    """A 1-D integer or boolean indexer as int64 positions (negatives wrapped), checked in range."""
    arr = np.asarray(k)
    if arr.dtype == bool:
        if arr.shape != (size,):
            raise IndexingError(
                f"boolean indexer for axis {axis} has shape {arr.shape}; expected ({size},)"
            )
        return np.flatnonzero(arr)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise IndexingError(
            f"indexer for axis {axis} must be an int, a slice or a 1-D integer/boolean array; "
            f"got {type(k).__name__} of dtype {arr.dtype} and shape {arr.shape}"
        )
    arr = arr.astype(np.int64, copy=True)
    arr[arr < 0] += size
    if arr.size and (arr.min() < 0 or arr.max() >= size):
        raise IndexingError(f"index out of range for axis {axis} of length {size}")
    return arr


def _plan_slice(start: int, stop: int, step: int, size: int, clen: int) -> DimPlan:
    n = len(range(start, stop, step))
    if n == 0:
        return DimPlan((), 0, None, False)
    last = start + (n - 1) * step
    pieces: list[Piece] = []
    pos = 0
    for ci in range(start // clen, last // clen + 1):
        c0, c1 = ci * clen, min((ci + 1) * clen, size)
        e0 = start if start >= c0 else start + -(-(c0 - start) // step) * step
        e_last = min(c1 - 1, last)
        if e0 > e_last:
            continue
        count = (e_last - e0) // step + 1
        local = slice(e0 - c0, e0 - c0 + (count - 1) * step + 1, step)
        pieces.append((ci, local, slice(pos, pos + count)))
        pos += count
    return DimPlan(tuple(pieces), n, None, False)


def _plan_array(idx: np.ndarray, clen: int) -> DimPlan:
    if idx.size == 0:
        return DimPlan((), 0, None, False)
    uniq, inverse = np.unique(idx, return_inverse=True)
    reorder = None if len(uniq) == len(idx) and np.array_equal(uniq, idx) else inverse
    chunk_of = uniq // clen
    bounds = np.flatnonzero(np.diff(chunk_of)) + 1
    starts = np.concatenate(([0], bounds))
    ends = np.concatenate((bounds, [len(uniq)]))
    pieces: list[Piece] = []
    for s, e in zip(starts.tolist(), ends.tolist()):
        ci = int(chunk_of[s])
        local = uniq[s:e] - ci * clen
        sel: slice | np.ndarray
        if local[-1] - local[0] + 1 == len(local):
            sel = slice(int(local[0]), int(local[-1]) + 1)
        else:
            sel = local
        pieces.append((ci, sel, slice(s, e)))
    return DimPlan(tuple(pieces), len(uniq), reorder, False)


def normalize_key(key: object, ndim: int) -> tuple[object, ...]:
    """``key`` as a tuple of one indexer per dimension (an Ellipsis expanded, padded with
    whole slices)."""
    if not isinstance(key, tuple):
        key = (key,)
    if any(k is Ellipsis for k in key):
        i = next(i for i, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (slice(None),) * (ndim - len(key) + 1) + key[i + 1 :]
    if len(key) > ndim:
        raise IndexingError(f"too many indices ({len(key)}) for an array of {ndim} dims")
    return key + (slice(None),) * (ndim - len(key))


def plan_selection(
    key: tuple[object, ...], shape: tuple[int, ...], chunks: tuple[int, ...]
) -> SelectionPlan:
    """Plan an orthogonal selection ``key`` on an array of ``shape`` split into ``chunks``."""
    key = normalize_key(key, len(shape))
    dims = []
    for axis, (k, size, clen) in enumerate(zip(key, shape, chunks)):
        if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            i = int(k) + (size if int(k) < 0 else 0)
            if not 0 <= i < size:
                raise IndexingError(f"index {k} out of range for axis {axis} of length {size}")
            ci = i // clen
            dims.append(DimPlan(((ci, slice(i - ci * clen, i - ci * clen + 1), slice(0, 1)),), 1, None, True))
        elif isinstance(k, slice):
            start, stop, step = k.indices(size)
            if step > 0:
                dims.append(_plan_slice(start, stop, step, size, clen))
            else:
                dims.append(_plan_array(np.arange(start, stop, step, dtype=np.int64), clen))
        else:
            dims.append(_plan_array(as_index_array(k, size, axis), clen))
    return SelectionPlan(tuple(dims))


def take_piece(chunk: np.ndarray, sels: tuple[slice | np.ndarray, ...]) -> np.ndarray:
    """Apply per-dimension selections (slices, or sorted index arrays) to a chunk."""
    basic = tuple(s if isinstance(s, slice) else slice(None) for s in sels)
    out = chunk[basic]
    for axis, s in enumerate(sels):
        if not isinstance(s, slice):
            out = np.take(out, s, axis=axis)
    return out


def finish(block: np.ndarray, plan: SelectionPlan) -> np.ndarray:
    """Restore requested order/duplicates and drop integer-indexed dimensions."""
    for axis, d in enumerate(plan.dims):
        if d.reorder is not None:
            block = np.take(block, d.reorder, axis=axis)
    if any(d.drop for d in plan.dims):
        block = block[tuple(0 if d.drop else slice(None) for d in plan.dims)]
    return block
