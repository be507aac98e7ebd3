"""The sample plan of :func:`tsexplore.batches`: pure, deterministic, property-tested.

Nothing here reads data. Given an array's shape, its chunk grid, a window (``sample``) and a
stride, :class:`WindowGrid` enumerates every window and groups them into *blocks*: all
windows whose start lies in the same chunk form one block, and a block's *region* runs from
its first window's start to its last window's end (it may reach into the neighbouring
chunk when windows cross chunk boundaries). Reading one block therefore decodes about one
chunk and yields many samples.

:func:`epoch_plan` orders one epoch (or one worker's shard of it):

1. the blocks are shuffled (``rng.permutation``) and dealt to ``nshards`` shards round-robin,
   so workers read disjoint blocks;
2. within a shard, block ``p`` (its position in the shuffled order) gives each of its windows
   the key ``p + min(buffer, 4 + p) * u`` with ``u ~ U[0, 1)``, and windows are emitted in
   key order (the ramp lets the first batch come from about four chunks instead of waiting
   for ``buffer`` of them to decode).

At any moment the windows being emitted come from at most ``buffer`` consecutive blocks of
the shuffled order: a rolling buffer of ``buffer`` decoded blocks, each released once its last
window is out. Every window appears exactly once per epoch; the same ``(seed, epoch)`` gives
the same order; with ``shuffle=False`` blocks and windows go in C order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError

#: spread (in block positions) of the first block's windows; it grows by one per block
RAMP = 4


@dataclass(frozen=True)
class WindowGrid:
    """Every window of ``window`` cells, ``stride`` apart, over an array of ``shape``.

    ``chunks`` and ``origin`` describe the storage: the array's cell ``i`` along an axis is
    the stored cell ``origin + i``, and stored chunks are ``chunks`` long. Windows are
    grouped into blocks by the stored chunk that holds their first cell.
    """

    shape: tuple[int, ...]
    window: tuple[int, ...]
    stride: tuple[int, ...]
    chunks: tuple[int, ...]
    origin: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        nd = len(self.shape)
        if not self.origin:
            object.__setattr__(self, "origin", (0,) * nd)
        for name in ("window", "stride", "chunks", "origin"):
            if len(getattr(self, name)) != nd:
                raise ConfigError(
                    f"{name}={getattr(self, name)} must have one entry per dimension of "
                    f"shape {self.shape}"
                )
        for axis, (n, w, s, c) in enumerate(zip(self.shape, self.window, self.stride, self.chunks)):
            if w < 1 or s < 1 or c < 1:
                raise ConfigError(
                    f"window, stride and chunk lengths must be >= 1; axis {axis} has "
                    f"window={w}, stride={s}, chunk={c}"
                )
            if w > n:
                raise ConfigError(
                    f"the sample is {w} long on axis {axis} but the array is only {n} long; "
                    "ask for a smaller sample"
                )

    # -- windows ---------------------------------------------------------------------------
    @property
    def counts(self) -> tuple[int, ...]:
        """Number of window positions along each axis."""
        return tuple((n - w) // s + 1 for n, w, s in zip(self.shape, self.window, self.stride))

    @property
    def n_windows(self) -> int:
        return math.prod(self.counts)

    def starts(self, window_ids: np.ndarray) -> np.ndarray:
        """The first cell of each window (shape ``(len(ids), ndim)``, int64)."""
        ids = np.asarray(window_ids, dtype=np.int64)
        pos = np.stack(np.unravel_index(ids, self.counts), axis=-1) if ids.size else np.empty(
            (0, len(self.shape)), dtype=np.int64
        )
        return pos.astype(np.int64) * np.asarray(self.stride, dtype=np.int64)

    # -- blocks ----------------------------------------------------------------------------
    def _runs(self, axis: int) -> np.ndarray:
        """Boundaries of the runs of window positions that start in the same chunk."""
        j = np.arange(self.counts[axis], dtype=np.int64)
        chunk_of = (self.origin[axis] + j * self.stride[axis]) // self.chunks[axis]
        cuts = np.flatnonzero(np.diff(chunk_of)) + 1
        return np.concatenate(([0], cuts, [len(j)])).astype(np.int64)

    @property
    def block_runs(self) -> tuple[np.ndarray, ...]:
        """Per axis, the window-position boundaries of each block (``len = nblocks_axis + 1``)."""
        cached = self.__dict__.get("_block_runs")
        if cached is None:
            cached = tuple(self._runs(a) for a in range(len(self.shape)))
            object.__setattr__(self, "_block_runs", cached)
        return cached  # type: ignore[no-any-return]

    @property
    def block_counts(self) -> tuple[int, ...]:
        """Number of blocks along each axis."""
        return tuple(len(r) - 1 for r in self.block_runs)

    @property
    def n_blocks(self) -> int:
        return math.prod(self.block_counts)

    def block_windows(self, block: int) -> np.ndarray:
        """The window ids of block ``block`` in C order."""
        bidx = np.unravel_index(block, self.block_counts)
        ranges = [np.arange(r[b], r[b + 1], dtype=np.int64) for r, b in zip(self.block_runs, bidx)]
        mesh = np.meshgrid(*ranges, indexing="ij")
        return np.ravel_multi_index(tuple(m.ravel() for m in mesh), self.counts).astype(np.int64)

    def windows_of_blocks(self, blocks: np.ndarray) -> np.ndarray:
        """The window ids of ``blocks``, block after block, each block's in C order.

        Same as concatenating :meth:`block_windows`, without a Python loop over blocks.
        """
        blocks = np.asarray(blocks, dtype=np.int64)
        if not len(blocks):
            return np.empty(0, dtype=np.int64)
        # the block of every window (C order), from each axis' run of window positions
        owner = np.zeros((), dtype=np.int64)
        for runs, nb in zip(self.block_runs, self.block_counts):
            along = np.repeat(np.arange(nb, dtype=np.int64), np.diff(runs))
            owner = np.add.outer(owner * nb, along)
        grouped = np.argsort(owner.ravel(), kind="stable")  # by block, C order inside
        sizes = self.block_sizes()
        first = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        lens = sizes[blocks]
        shift = np.repeat(first[blocks] - np.concatenate(([0], np.cumsum(lens)[:-1])), lens)
        return grouped[np.arange(int(lens.sum()), dtype=np.int64) + shift].astype(np.int64)

    def block_sizes(self) -> np.ndarray:
        """Number of windows of every block (C order over the block grid)."""
        per_axis = [np.diff(r) for r in self.block_runs]
        out = per_axis[0]
        for p in per_axis[1:]:
            out = np.multiply.outer(out, p)
        return np.asarray(out, dtype=np.int64).ravel()

    def block_region(self, block: int) -> tuple[slice, ...]:
        """The cells block ``block`` needs: from its first window's start to its last one's end."""
        bidx = np.unravel_index(block, self.block_counts)
        out = []
        for r, b, w, s in zip(self.block_runs, bidx, self.window, self.stride):
            first, last = int(r[b]), int(r[b + 1]) - 1
            out.append(slice(first * s, last * s + w))
        return tuple(out)

    def blocks_share_chunks(self) -> bool:
        """Whether some stored chunk is needed by more than one block (windows cross chunks)."""
        for r, w, s, c, o in zip(self.block_runs, self.window, self.stride, self.chunks, self.origin):
            first = o + r[:-1] * s  # stored cell where each block's region starts ...
            last = o + (r[1:] - 1) * s + w - 1  # ... and its last cell
            # blocks are ordered along the axis, so it is enough to compare neighbours
            if np.any(last[:-1] // c >= first[1:] // c):
                return True
        return False

    def block_nbytes(self, itemsize: int) -> int:
        """Bytes of the largest block region (an upper bound for buffer sizing)."""
        longest = []
        for r, w, s in zip(self.block_runs, self.window, self.stride):
            n = int(np.diff(r).max()) if len(r) > 1 else 0
            longest.append((n - 1) * s + w if n else 0)
        return math.prod(longest) * itemsize


@dataclass(frozen=True)
class EpochPlan:
    """One epoch (or one shard of it) in emission order."""

    windows: np.ndarray  # window ids in the order they are emitted
    block_pos: np.ndarray  # for each emitted window, the position of its block in ``blocks``
    blocks: np.ndarray  # block ids in shuffled order (this shard's)
    first_use: np.ndarray  # per block position: index of its first emitted window
    last_use: np.ndarray  # per block position: index of its last emitted window

    @property
    def n_windows(self) -> int:
        return len(self.windows)

    def read_order(self) -> np.ndarray:
        """Block positions in the order their first window is emitted (the order to read)."""
        return np.argsort(self.first_use, kind="stable")

    def max_live_blocks(self) -> int:
        """Most blocks that must be held at once (for a window-by-window consumer)."""
        if not len(self.blocks):
            return 0
        events = np.zeros(self.n_windows + 1, dtype=np.int64)
        np.add.at(events, self.first_use, 1)
        np.add.at(events, self.last_use + 1, -1)
        return int(np.cumsum(events).max())


def shard_blocks(n_blocks: int, shuffle: bool, seed: int, epoch: int, shard: int, nshards: int) -> np.ndarray:
    """The block ids of one shard, in this epoch's (shuffled) order."""
    if nshards < 1 or not 0 <= shard < nshards:
        raise ConfigError(f"shard must be in [0, nshards); got shard={shard}, nshards={nshards}")
    if shuffle:
        order = np.random.default_rng([int(seed) & 0xFFFFFFFF, int(epoch), 0]).permutation(n_blocks)
    else:
        order = np.arange(n_blocks, dtype=np.int64)
    return np.asarray(order[shard::nshards], dtype=np.int64)


def epoch_plan(
    grid: WindowGrid,
    *,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
    buffer: int = 16,
    shard: int = 0,
    nshards: int = 1,
) -> EpochPlan:
    """Order the windows of one epoch (of one shard); see the module docstring."""
    if buffer < 1:
        raise ConfigError(f"buffer_chunks must be >= 1, got {buffer}")
    blocks = shard_blocks(grid.n_blocks, shuffle, seed, epoch, shard, nshards)
    sizes = grid.block_sizes()[blocks] if len(blocks) else np.empty(0, dtype=np.int64)
    n = int(sizes.sum())
    windows = grid.windows_of_blocks(blocks)
    block_pos = np.repeat(np.arange(len(blocks), dtype=np.int64), sizes)
    if shuffle and n:
        rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, int(epoch), 1, shard, nshards])
        # block p spreads its windows over min(buffer, RAMP + p) positions: the same rolling
        # buffer, but the first batches wait for a few decoded chunks, not a whole buffer
        spread = np.minimum(buffer, RAMP + np.arange(len(blocks), dtype=np.int64))
        keys = block_pos + spread[block_pos] * rng.random(n)
        order = np.argsort(keys, kind="stable")
        windows, block_pos = windows[order], block_pos[order]
    first_use = np.full(len(blocks), n, dtype=np.int64)
    last_use = np.full(len(blocks), -1, dtype=np.int64)
    positions = np.arange(n, dtype=np.int64)
    np.minimum.at(first_use, block_pos, positions)
    np.maximum.at(last_use, block_pos, positions)
    return EpochPlan(windows, block_pos, blocks, first_use, last_use)


def lag1_correlation(positions: np.ndarray) -> float:
    """Mean over axes of the correlation between consecutive samples' positions.

    ``positions`` is ``(n, ndim)``; axes with a single position are skipped. A full random
    permutation gives about 0; reading windows in storage order gives close to 1.
    """
    pos = np.asarray(positions, dtype=np.float64)
    if pos.ndim == 1:
        pos = pos[:, None]
    if len(pos) < 3:
        return 0.0
    values = []
    for a in range(pos.shape[1]):
        x, y = pos[:-1, a], pos[1:, a]
        if x.std() == 0 or y.std() == 0:
            continue
        values.append(float(np.corrcoef(x, y)[0, 1]))
    return float(np.mean(values)) if values else 0.0


def shuffle_quality(grid: WindowGrid, plan: EpochPlan, seed: int = 0) -> dict[str, float]:
    """Lag-1 position correlation of ``plan`` beside a full random permutation and C order."""
    ids = plan.windows
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, 99])
    return {
        "plan": lag1_correlation(grid.starts(ids)),
        "random_permutation": lag1_correlation(grid.starts(rng.permutation(ids))),
        "storage_order": lag1_correlation(grid.starts(np.sort(ids))),
    }
