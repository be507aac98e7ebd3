"""The profile through one pixel along a slider dim, streamed chunk by chunk (pure + engine)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..engine import Engine
from ..engine.planning import SelectionPlan, plan_selection, take_piece
from ..errors import ConfigError
from ..sources.base import ChunkIndex, ChunkSource
from .planning import PlaneGeometry


@dataclass(frozen=True)
class Profile:
    """The values along ``dim`` through ``point`` read so far (NaN where not read yet)."""

    generation: int
    dim: str
    point: tuple[tuple[str, int], ...]
    values: np.ndarray = field(repr=False)
    filled: int
    done: bool


def profile_chunks(
    geom: PlaneGeometry, point: Mapping[str, int], dim: str
) -> tuple[tuple[Any, ...], list[ChunkIndex]]:
    """The source key of the 1-D profile through ``point`` along ``dim`` and its chunks, in order."""
    key, plan = _profile_plan(geom, point, dim)
    return key, list(plan.chunk_indices())


def _profile_plan(
    geom: PlaneGeometry, point: Mapping[str, int], dim: str
) -> tuple[tuple[Any, ...], SelectionPlan]:
    if dim not in geom.dims:
        raise ConfigError(f"profile dim {dim!r} is not one of {geom.dims}")
    key: list[Any] = []
    for axis, d in enumerate(geom.dims):
        if d == dim:
            key.append(slice(None))
        else:
            i = int(point.get(d, 0))
            if not 0 <= i < geom.shape[axis]:
                raise ConfigError(f"index {i} of {d!r} is outside 0..{geom.shape[axis] - 1}")
            key.append(i)
    source_key = geom.source_key(tuple(key))
    shape, chunks = geom.shape, geom.chunks
    if geom.selection is not None:
        shape, chunks = geom.selection.source.shape, geom.selection.source.chunks
    return source_key, plan_selection(source_key, shape, chunks)


def stream_profile(
    source: ChunkSource,
    geom: PlaneGeometry,
    point: Mapping[str, int],
    dim: str,
    *,
    engine: Engine,
    cancelled: Callable[[], bool] = lambda: False,
    timeout: float | None = None,
) -> Iterator[tuple[np.ndarray, int]]:
    """Yield ``(values, filled)`` as the chunks of the profile arrive through ``engine``.

    ``values`` is a float64 array along ``dim`` (NaN where not read yet); stops early when
    ``cancelled()`` becomes true.
    """
    _, plan = _profile_plan(geom, point, dim)
    along = next(d for d in plan.dims if not d.drop)  # the one kept source axis
    axis = plan.dims.index(along)
    block = np.full(along.length, np.nan)
    got = np.zeros(along.length, dtype=bool)
    pieces = {p[0]: p for p in along.pieces}
    fixed = tuple(d.pieces[0][1] for d in plan.dims)
    stream: Any = engine.stream(source, plan.chunk_indices(), timeout=timeout)
    try:
        for index, chunk in stream:
            if cancelled():
                return
            _, local, out = pieces[index[axis]]
            sels = fixed[:axis] + (local,) + fixed[axis + 1 :]
            block[out] = np.asarray(take_piece(chunk, sels), dtype=np.float64).reshape(-1)
            got[out] = True
            if along.reorder is None:
                yield block, int(got.sum())
            else:  # an index array out of order or with repeats: the profile in its order
                yield block[along.reorder], int(got[along.reorder].sum())
    finally:
        stream.close()
