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
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar, overload

import numpy as np

from ..errors import IndexingError

Piece = tuple[int, "slice | np.ndarray", slice]  # (chunk index, selection in chunk, output slice)


class DimPlan(NamedTuple):
    """How one dimension of a selection maps onto the chunk grid (a named tuple: a plan
    builds one per dimension, which a frozen dataclass makes several times dearer)."""

    pieces: tuple[Piece, ...]
    length: int  # length of this dimension in the assembled (pre-reorder) block
    reorder: np.ndarray | None  # np.take indices restoring order/duplicates, or None
    drop: bool  # an integer indexer: the dimension disappears from the result


_T = TypeVar("_T")


class _once(Generic[_T]):  # noqa: N801 - used as a decorator, like cached_property
    """A property computed on first use and then kept in the instance (a frozen plan may be
    shared by threads: two computing it at once get equal values, so no lock is needed)."""

    def __init__(self, fn: Callable[[Any], _T]) -> None:
        self.fn = fn
        self.name = fn.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> _once[_T]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> _T: ...
    def __get__(self, obj: object, owner: type | None = None) -> _T | _once[_T]:
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.fn(obj)
        return value


@dataclass(frozen=True)
class SelectionPlan:
    """A planned selection. Immutable, so one plan serves every read of the same selection
    (:func:`plan_selection` keeps recent ones); what reads derive from it is computed once."""

    dims: tuple[DimPlan, ...]

    @_once
    def block_shape(self) -> tuple[int, ...]:
        return tuple(d.length for d in self.dims)

    @_once
    def out_shape(self) -> tuple[int, ...]:
        shape = []
        for d in self.dims:
            if d.drop:
                continue
            shape.append(len(d.reorder) if d.reorder is not None else d.length)
        return tuple(shape)

    @property
    def nchunks(self) -> int:
        return len(self.indices)

    @_once
    def indices(self) -> tuple[tuple[int, ...], ...]:
        """The chunks touched, in :meth:`chunk_indices` order."""
        return tuple(itertools.product(*([p[0] for p in d.pieces] for d in self.dims)))

    def chunk_indices(self) -> Iterator[tuple[int, ...]]:
        return iter(self.indices)

    @_once
    def placements(self) -> tuple[tuple[tuple[slice, ...], tuple[slice | np.ndarray, ...]], ...]:
        """Per chunk (in :attr:`indices` order): where its piece goes in the block and the
        chunk-local selection, ``(target, local)``."""
        return tuple(
            (tuple(p[2] for p in pieces), tuple(p[1] for p in pieces))
            for pieces in itertools.product(*(d.pieces for d in self.dims))
        )

    @_once
    def basic(self) -> bool:
        """Every chunk-local selection is a slice (plain NumPy indexing takes each piece)."""
        return all(isinstance(p[1], slice) for d in self.dims for p in d.pieces)

    @_once
    def reordered(self) -> tuple[tuple[int, np.ndarray], ...]:
        """``(axis, np.take indices)`` of each dimension whose order or duplicates
        :func:`finish` restores."""
        return tuple((axis, d.reorder) for axis, d in enumerate(self.dims) if d.reorder is not None)

    @_once
    def drop_index(self) -> tuple[int | slice, ...] | None:
        """The index that drops the integer-indexed dimensions (None: none to drop)."""
        if not any(d.drop for d in self.dims):
            return None
        return tuple(0 if d.drop else slice(None) for d in self.dims)

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
    for i, k in enumerate(key):
        if k is Ellipsis:
            key = key[:i] + (slice(None),) * (ndim - len(key) + 1) + key[i + 1 :]
            break
    if len(key) == ndim:
        return key
    if len(key) > ndim:
        raise IndexingError(f"too many indices ({len(key)}) for an array of {ndim} dims")
    return key + (slice(None),) * (ndim - len(key))


#: recent plans of selections made of ints and slices, by (key, shape, chunks)
_plans: OrderedDict[tuple[object, ...], SelectionPlan] = OrderedDict()
#: recent plans of one dimension's slice, by (start, stop, step, size, chunk length)
_dims: OrderedDict[tuple[object, ...], DimPlan] = OrderedDict()
#: plans kept in each memo, the oldest going first: a frame's plan with its dims' is about
#: 2 kB, so a memo holds at most ~2 MB. Every pan and zoom plans a new region, so a memo fills
#: in a few minutes of them: it must be small enough to be full after a warm-up (4096 grew a
#: viewer's memory for a quarter of an hour)
PLAN_MEMORY = 1024


def memo_key(key: tuple[object, ...]) -> tuple[object, ...] | None:
    """``key`` as a hashable tuple when it holds only ints and slices (else None)."""
    out: list[object] = []
    for k in key:
        if type(k) is int:
            out.append(k)
        elif isinstance(k, slice):
            out.append((k.start, k.stop, k.step))
        else:
            return None
    return tuple(out)


def plan_selection(
    key: tuple[object, ...], shape: tuple[int, ...], chunks: tuple[int, ...]
) -> SelectionPlan:
    """Plan an orthogonal selection ``key`` on an array of ``shape`` split into ``chunks``.

    Selections of ints and slices are planned once: the same selection again (a frame
    revisited, a tile re-read) gets the same immutable plan."""
    if type(key) is not tuple:
        key = (key,)
    memo = memo_key(key)
    if memo is None:
        return _plan(key, shape, chunks)
    name = (memo, tuple(shape), tuple(chunks))
    plan = _plans.get(name)
    if plan is None:
        plan = _plan(key, shape, chunks)
        _remember(_plans, name, plan)
    return plan


def _remember(memo: OrderedDict, name: object, value: object) -> None:
    """Keep ``value`` in ``memo``, forgetting the oldest entry beyond :data:`PLAN_MEMORY`
    (an ``OrderedDict``: the oldest goes without rehashing its key or scanning past the
    slots of those gone before, as ``del d[next(iter(d))]`` on a dict does)."""
    if len(memo) >= PLAN_MEMORY:
        try:
            memo.popitem(last=False)
        except (KeyError, RuntimeError):  # another thread emptied or changed it meanwhile
            pass
    memo[name] = value


def _slice_dim(k: slice, size: int, clen: int) -> DimPlan:
    """The plan of a slice on one dimension (kept: a frame's whole y and x are planned once)."""
    name = (k.start, k.stop, k.step, size, clen)
    found = _dims.get(name)
    if found is None:
        start, stop, step = k.indices(size)
        if step > 0:
            found = _plan_slice(start, stop, step, size, clen)
        else:
            found = _plan_array(np.arange(start, stop, step, dtype=np.int64), clen)
        _remember(_dims, name, found)
    return found


def _plan(key: tuple[object, ...], shape: tuple[int, ...], chunks: tuple[int, ...]) -> SelectionPlan:
    key = normalize_key(key, len(shape))
    dims = []
    # a plan touching one chunk per axis, each by a slice in its order (a frame, a tile, a
    # point), gets what reads derive from it in this same pass (no products: a plan not
    # remembered costs its reader that much less); any other computes them when used
    index: list[int] | None = []
    target: list[slice] = []
    local: list[slice | np.ndarray] = []
    block: list[int] = []
    out: list[int] = []
    drop: list[int | slice] = []
    for axis, (k, size, clen) in enumerate(zip(key, shape, chunks)):
        if type(k) is int or (isinstance(k, (int, np.integer)) and not isinstance(k, bool)):
            i = int(k) + (size if k < 0 else 0)
            if not 0 <= i < size:
                raise IndexingError(f"index {k} out of range for axis {axis} of length {size}")
            ci = i // clen
            sel, to = slice(i - ci * clen, i - ci * clen + 1), slice(0, 1)
            dims.append(DimPlan(((ci, sel, to),), 1, None, True))
            if index is not None:
                index.append(ci)
                local.append(sel)
                target.append(to)
                block.append(1)
                drop.append(0)
            continue
        d = _slice_dim(k, size, clen) if isinstance(k, slice) else _plan_array(as_index_array(k, size, axis), clen)
        dims.append(d)
        if index is None:
            continue
        if len(d.pieces) != 1 or d.reorder is not None or type(d.pieces[0][1]) is not slice:
            index = None
            continue
        ci, piece, to = d.pieces[0]
        index.append(ci)
        local.append(piece)
        target.append(to)
        block.append(d.length)
        out.append(d.length)
        drop.append(slice(None))
    plan = SelectionPlan(tuple(dims))
    if index:  # not a 0-d selection: that one takes the general properties
        known = plan.__dict__  # what the @_once properties keep (see _once.__get__)
        known["indices"] = (tuple(index),)
        known["placements"] = ((tuple(target), tuple(local)),)
        known["basic"] = True
        known["block_shape"] = tuple(block)
        known["out_shape"] = tuple(out)
        known["drop_index"] = tuple(drop) if len(out) < len(block) else None
        known["reordered"] = ()
    return plan


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
    for axis, reorder in plan.reordered:
        block = np.take(block, reorder, axis=axis)
    drop = plan.drop_index
    return block if drop is None else block[drop]
