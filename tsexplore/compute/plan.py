"""The order in which a reduction visits chunks, and where each chunk's partial lands (pure).

Chunks are visited with the *kept* axes outermost and the reduced axes innermost, so
consecutive chunks update the same block of the accumulator (a *kblock*). Positions in that
order are plain integers, so a range of them (``start``, ``stop``) describes a piece of work
that a dask worker can regenerate without receiving the list of chunks.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

ChunkIndex = tuple[int, ...]
#: where a partial lands in the output: slices, or ``(...,)`` for a scalar output
Region = tuple[Any, ...]


@dataclass(frozen=True)
class ReducePlan:
    """Chunk order and output geometry for reducing ``axes`` of an array on a chunk grid."""

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    axes: tuple[int, ...]  # reduced axes, sorted

    def __post_init__(self) -> None:
        if len(self.shape) != len(self.chunks):
            raise ConfigError(f"shape {self.shape} and chunks {self.chunks} differ in length")
        if any(not 0 <= a < len(self.shape) for a in self.axes) or len(set(self.axes)) != len(
            self.axes
        ):
            raise ConfigError(f"axes {self.axes} are not distinct axes of shape {self.shape}")

    # -- geometry -------------------------------------------------------------------------
    @property
    def kept(self) -> tuple[int, ...]:
        return tuple(i for i in range(len(self.shape)) if i not in self.axes)

    @property
    def grid(self) -> tuple[int, ...]:
        return tuple(math.ceil(s / c) if s else 0 for s, c in zip(self.shape, self.chunks))

    @property
    def out_shape(self) -> tuple[int, ...]:
        return tuple(self.shape[i] for i in self.kept)

    @property
    def nchunks(self) -> int:
        return math.prod(self.grid)

    @property
    def per_kblock(self) -> int:
        """Chunks that update one block of the output."""
        return math.prod(self.grid[a] for a in self.axes)

    @property
    def _visit_axes(self) -> tuple[int, ...]:
        return self.kept + self.axes

    # -- order ----------------------------------------------------------------------------
    def order(self, start: int = 0, stop: int | None = None) -> Iterator[ChunkIndex]:
        """Chunk indices at positions ``start..stop`` of the visiting order (lazy)."""
        stop = self.nchunks if stop is None else min(stop, self.nchunks)
        if start >= stop:
            return iter(())
        visit = self._visit_axes
        ranges = [range(self.grid[a]) for a in visit]
        inverse = [visit.index(i) for i in range(len(visit))]

        def gen() -> Iterator[ChunkIndex]:
            it = itertools.islice(itertools.product(*ranges), start, stop)
            for pos in it:
                yield tuple(pos[k] for k in inverse)

        if start == 0:
            return gen()
        # jump straight to ``start`` instead of skipping through the product
        return self._from(start, stop)

    def _from(self, start: int, stop: int) -> Iterator[ChunkIndex]:
        visit = self._visit_axes
        dims = [self.grid[a] for a in visit]
        inverse = [visit.index(i) for i in range(len(visit))]
        pos = list(_unravel(start, dims))
        for _ in range(stop - start):
            yield tuple(pos[k] for k in inverse)
            for k in range(len(dims) - 1, -1, -1):
                pos[k] += 1
                if pos[k] < dims[k]:
                    break
                pos[k] = 0

    def split(self, parts: int) -> list[tuple[int, int]]:
        """About ``parts`` ranges of positions, cut at kblock boundaries when there are enough."""
        n = self.nchunks
        if n == 0:
            return []
        parts = max(1, min(parts, n))
        per = self.per_kblock
        nk = n // per if per else 0
        if nk >= parts:  # whole kblocks per part: each output block merges on one worker
            bounds = [round(i * nk / parts) * per for i in range(parts + 1)]
        else:
            bounds = [round(i * n / parts) for i in range(parts + 1)]
        return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]

    # -- where partials land --------------------------------------------------------------
    def kblock(self, index: ChunkIndex) -> ChunkIndex:
        return tuple(index[i] for i in self.kept)

    def region(self, kblock: ChunkIndex) -> Region:
        """The slab of the output that chunks of ``kblock`` update (``(...,)`` for a scalar)."""
        if not self.kept:
            return (Ellipsis,)
        return tuple(
            slice(k * self.chunks[i], min((k + 1) * self.chunks[i], self.shape[i]))
            for k, i in zip(kblock, self.kept)
        )


def _unravel(pos: int, dims: Sequence[int]) -> tuple[int, ...]:
    out = []
    for d in reversed(dims):
        out.append(pos % d)
        pos //= d
    return tuple(reversed(out))


def normalize_axes(dims: tuple[str, ...], dim: object) -> tuple[int, ...]:
    """Positions of the dims named by ``dim`` (None or ``...``: all; a str; a list of str)."""
    if dim is None or dim is Ellipsis:
        return tuple(range(len(dims)))
    names = [dim] if isinstance(dim, str) else list(dim)  # type: ignore[call-overload]
    unknown = [d for d in names if d not in dims]
    if unknown:
        raise ConfigError(f"cannot reduce over {unknown}: the array's dims are {list(dims)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"dim lists a dimension twice: {names}")
    return tuple(sorted(dims.index(d) for d in names))
