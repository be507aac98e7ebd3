"""``tse.batches``: shuffled batches of windows, read block by block through the engine.

The plan (:mod:`tsexplore.loader.plan`) shuffles *blocks* (about one chunk each) and mixes
the windows of a rolling buffer of ``buffer_chunks`` blocks, so each decoded chunk yields
many samples. Blocks are requested from the engine ahead of use at PLANNED priority (the
plan announced to the prefetcher); each one is released as soon as its last window is out.
"""

from __future__ import annotations

import math
import time
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import config
from ..engine import get_engine
from ..engine.lookahead import look_ahead
from ..errors import ConfigError, missing_dependency
from .plan import EpochPlan, WindowGrid, epoch_plan, shuffle_quality
from .variables import DeferredRegion, LoaderVariable, PendingRegion, resolve_variable

BACKENDS = ("numpy", "cupy")
MAX_DEFAULT_BUFFER = 64


@dataclass
class LoaderStats:
    """Counters of the last pass over a :class:`Batches` in this process."""

    samples: int = 0
    batches: int = 0
    blocks: int = 0
    chunk_requests: int = 0
    chunk_hits: int = 0
    seconds: float = 0.0
    wait_seconds: float = 0.0
    max_buffer_blocks: int = 0

    @property
    def hit_ratio(self) -> float:
        """Chunk requests served from the cache (no read needed) / all chunk requests."""
        return self.chunk_hits / self.chunk_requests if self.chunk_requests else 0.0

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds else 0.0

    def __repr__(self) -> str:
        return (
            f"<LoaderStats {self.samples} samples in {self.batches} batches, "
            f"{self.samples_per_s:,.0f} samples/s, {self.blocks} blocks, "
            f"hit ratio {self.hit_ratio:.2f}, waited {self.wait_seconds:.2f}/{self.seconds:.2f} s, "
            f"buffer high water {self.max_buffer_blocks} blocks>"
        )


def _as_mapping(value: Any, dims: tuple[str, ...], what: str) -> dict[str, int]:
    if isinstance(value, Mapping):
        out = {str(k): v for k, v in value.items()}
    elif isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != len(dims):
            raise ConfigError(
                f"{what}={tuple(value)} gives {len(value)} lengths but the data has dims {dims}; "
                f"pass a dict such as {{{dims[0]!r}: ...}}"
            )
        out = dict(zip(dims, value))
    else:
        raise ConfigError(f"{what} must be a dict of dim -> length (dims are {dims}), got {value!r}")
    unknown = sorted(set(out) - set(dims))
    if unknown:
        raise ConfigError(f"{what} names unknown dims {unknown}; the data has dims {dims}")
    for d, n in out.items():
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
            raise ConfigError(f"{what}[{d!r}] must be a positive int, got {n!r}")
    return {d: int(n) for d, n in out.items()}


def _variables(obj: Any) -> tuple[list[LoaderVariable], bool]:
    """The variables to read (primary first) and whether the result is a single array."""
    import xarray as xr

    if isinstance(obj, xr.DataArray):
        name = str(obj.name) if obj.name is not None else "data"
        return [resolve_variable(name, obj.variable)], True
    if isinstance(obj, xr.Dataset):
        if not obj.data_vars:
            raise ConfigError("the Dataset has no data variables to batch")
        found = [resolve_variable(str(n), v.variable) for n, v in obj.data_vars.items()]
        found.sort(key=lambda v: -len(v.dims))
        return found, len(found) == 1
    if hasattr(obj, "shape") and hasattr(obj, "dtype"):
        return _variables(xr.DataArray(obj, name="data"))
    raise ConfigError(
        f"tse.batches needs an xarray DataArray/Dataset or an array, got {type(obj).__name__}"
    )


class Batches:
    """An iterable of batches with ``len()``; see :func:`batches` for the arguments."""

    def __init__(
        self,
        variables: list[LoaderVariable],
        single: bool,
        sample: dict[str, int],
        stride: dict[str, int],
        *,
        batch_size: int,
        shuffle: bool,
        seed: int,
        drop_last: bool,
        buffer_chunks: int | None,
        backend: str,
        epochs: int,
        squeeze: bool,
        return_index: bool,
        timeout: float | None,
        cache: bool | None = None,
    ) -> None:
        primary = variables[0]
        self.dims = primary.dims
        for var in variables:
            missing = [d for d in var.dims if d not in self.dims]
            if missing:
                raise ConfigError(
                    f"variable {var.name!r} has dims {var.dims} but {primary.name!r} has "
                    f"{self.dims}; every variable must use dims of the largest one. "
                    "Select variables with ds[[...]]"
                )
            var.axes = tuple(self.dims.index(d) for d in var.dims)
        names = [v.name for v in variables]
        if return_index and "index" in names:
            raise ConfigError("a variable is named 'index', which return_index=True also uses")
        self.variables = variables
        self.single = single and not return_index
        self.window = tuple(sample.get(d, n) for d, n in zip(self.dims, primary.shape))
        self.stride = tuple(stride.get(d, w) for d, w in zip(self.dims, self.window))
        self.grid = WindowGrid(primary.shape, self.window, self.stride, primary.chunks, primary.origin)
        self.sample = dict(zip(self.dims, self.window))
        self._named = frozenset(sample)
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.backend = backend
        self.epochs = int(epochs)
        self.squeeze = bool(squeeze)
        self.return_index = bool(return_index)
        self.timeout = timeout
        self.epoch = 0
        block_bytes = sum(
            WindowGrid(
                tuple(primary.shape[a] for a in v.axes),
                tuple(self.window[a] for a in v.axes),
                tuple(self.stride[a] for a in v.axes),
                tuple(self.grid.chunks[a] for a in v.axes),
                tuple(self.grid.origin[a] for a in v.axes),
            ).block_nbytes(v.dtype.itemsize)
            if v.dims
            else v.dtype.itemsize
            for v in variables
        )
        self.block_bytes = max(1, block_bytes)
        budget = config.get().cache_bytes
        if buffer_chunks is None:
            buffer_chunks = int(min(MAX_DEFAULT_BUFFER, max(1, budget // 4 // self.block_bytes)))
        if buffer_chunks < 1:
            raise ConfigError(f"buffer_chunks must be >= 1, got {buffer_chunks}")
        self.buffer_chunks = int(buffer_chunks)
        io = config.get().io_threads
        self.ahead = int(max(2, min(2 * io, budget // 4 // self.block_bytes)))
        data_bytes = sum(int(np.prod(v.shape, dtype=np.int64)) * v.dtype.itemsize for v in variables)
        if cache is None:  # keep decoded chunks only when something will read them again:
            # a block whose windows reach into a neighbour's chunk, or a later epoch
            cache = self.grid.blocks_share_chunks() or (self.epochs > 1 and data_bytes <= budget // 2)
        self.cache = bool(cache)
        self.stats = LoaderStats()

    # -- sizes -------------------------------------------------------------------------------
    @property
    def n_windows(self) -> int:
        """Windows per epoch."""
        return self.grid.n_windows

    def _shard_windows(self, epoch: int, shard: int, nshards: int) -> int:
        if nshards == 1:
            return self.grid.n_windows
        sizes = self.grid.block_sizes()
        order = epoch_plan_blocks(self, epoch, shard, nshards)
        return int(sizes[order].sum())

    def _n_batches(self, n: int) -> int:
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def batches_per_epoch(self, nshards: int = 1, epoch: int | None = None) -> int:
        """Batches in one epoch when split over ``nshards`` workers (each batches its own)."""
        epoch = self.epoch if epoch is None else epoch
        return sum(self._n_batches(self._shard_windows(epoch, s, nshards)) for s in range(nshards))

    def __len__(self) -> int:
        return self.epochs * self.batches_per_epoch()

    @property
    def sample_shape(self) -> dict[str, tuple[int, ...]]:
        """Shape of one sample of each variable (after ``squeeze``)."""
        return {v.name: self._shape_of(v) for v in self.variables}

    def _shape_of(self, var: LoaderVariable) -> tuple[int, ...]:
        shape = tuple(self.window[a] for a in var.axes)
        if self.squeeze:
            shape = tuple(
                n for a, n in zip(var.axes, shape) if not (n == 1 and self.dims[a] in self._named)
            )
        return shape

    # -- plan --------------------------------------------------------------------------------
    def plan(self, epoch: int = 0, shard: int = 0, nshards: int = 1) -> EpochPlan:
        """The order of one epoch (of one shard) as window ids; see :mod:`.plan`."""
        return epoch_plan(
            self.grid,
            shuffle=self.shuffle,
            seed=self.seed,
            epoch=epoch,
            buffer=self.buffer_chunks,
            shard=shard,
            nshards=nshards,
        )

    def shuffle_quality(self, epoch: int = 0) -> dict[str, float]:
        """Lag-1 correlation of consecutive samples' positions: plan vs a random permutation."""
        return shuffle_quality(self.grid, self.plan(epoch), self.seed)

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass start at ``epoch`` (each pass then advances it by ``epochs``)."""
        self.epoch = int(epoch)

    # -- iteration ---------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        start, self.epoch = self.epoch, self.epoch + self.epochs
        return self.iter_shard(0, 1, range(start, start + self.epochs))

    def iter_shard(self, shard: int, nshards: int, epochs: Sequence[int] | range) -> Iterator[Any]:
        """Batches of one shard (a torch worker's share) for the given epochs."""
        self.stats = LoaderStats()
        t0 = time.perf_counter()
        try:
            for epoch in epochs:
                yield from self._iter_epoch(self.plan(epoch, shard, nshards))
        finally:
            self.stats.seconds = time.perf_counter() - t0

    def _iter_epoch(self, plan: EpochPlan) -> Iterator[Any]:
        grid, stats = self.grid, self.stats
        n = plan.n_windows
        stop = n - n % self.batch_size if self.drop_last else n
        starts = grid.starts(plan.windows)
        regions = [grid.block_region(int(b)) for b in plan.blocks]
        origins = np.array([[sl.start for sl in r] for r in regions], dtype=np.int64).reshape(
            len(regions), len(self.dims)
        )
        local = starts - origins[plan.block_pos] if n else starts
        read_order = plan.read_order().tolist()
        release_order = np.argsort(plan.last_use, kind="stable").tolist()
        first_use = plan.first_use
        last_use = plan.last_use
        blocks = self._read_blocks(read_order, regions)
        buffer: dict[int, list[np.ndarray]] = {}
        loaded = released = 0
        window = self.window
        block_pos = plan.block_pos.tolist()
        try:
            for b0 in range(0, stop, self.batch_size):
                b1 = min(stop, b0 + self.batch_size)
                # load every block whose first window is in this batch, keeping reads in flight
                while loaded < len(read_order) and first_use[read_order[loaded]] < b1:
                    p, buffer[p] = next(blocks)
                    loaded += 1
                stats.max_buffer_blocks = max(stats.max_buffer_blocks, len(buffer))
                m = b1 - b0
                outs = [
                    np.empty((m, *(window[a] for a in v.axes)), dtype=v.dtype) for v in self.variables
                ]
                loc = local[b0:b1].tolist()
                for i in range(m):
                    arrays = buffer[block_pos[b0 + i]]
                    cells = [slice(o, o + w) for o, w in zip(loc[i], window)]
                    for out, arr, var in zip(outs, arrays, self.variables):
                        out[i] = arr[tuple(cells[a] for a in var.axes)]
                while released < len(release_order) and last_use[release_order[released]] < b1:
                    buffer.pop(release_order[released], None)
                    released += 1
                stats.samples += m
                stats.batches += 1
                yield self._package(outs, starts[b0:b1])
        finally:
            blocks.close()
            buffer.clear()

    def _read_blocks(
        self, read_order: list[int], regions: list[tuple[slice, ...]]
    ) -> Generator[tuple[int, list[np.ndarray]], None, None]:
        """``(block, arrays)`` in ``read_order``, ``self.ahead`` blocks requested in advance."""
        engine = get_engine()
        stats = self.stats

        def hint(blocks: list[int]) -> None:  # the disk starts on the blocks after these
            for p in blocks:
                for v in self.variables:
                    v.advise(engine, regions[p])

        def issue(p: int) -> list[PendingRegion | DeferredRegion]:
            pending = [v.request(engine, regions[p], self.cache) for v in self.variables]
            stats.chunk_requests += sum(len(r.futures) for r in pending)
            stats.chunk_hits += sum(r.hits for r in pending)
            return pending

        def wait(p: int, pending: list[PendingRegion | DeferredRegion]) -> list[np.ndarray]:
            t0 = time.perf_counter()
            arrays = [r.result(self.timeout) for r in pending]
            stats.wait_seconds += time.perf_counter() - t0
            stats.blocks += 1
            return arrays

        return look_ahead(read_order, issue, wait, ahead=self._ahead_now, hint=hint)

    def _ahead_now(self) -> int:
        """Blocks requested in advance: ``self.ahead``, or for remote sources twice what the
        engine keeps in flight on the link (it learns the latency and bandwidth as it reads),
        within a quarter of the cache budget."""
        if not any(v.source.is_async for v in self.variables):
            return self.ahead
        limit = max(2, config.get().cache_bytes // 4 // self.block_bytes)
        engine = get_engine()
        depth = max(engine.concurrency(engine.context.lane(v.source)) for v in self.variables if v.source.is_async)
        return int(max(self.ahead, min(limit, 2 * depth)))

    def _package(self, outs: list[np.ndarray], starts: np.ndarray) -> Any:
        if self.squeeze:
            outs = [o.reshape((len(o), *self._shape_of(v))) for o, v in zip(outs, self.variables)]
        if self.backend == "cupy":
            import cupy

            outs = [cupy.asarray(o) for o in outs]
        if self.single:
            return outs[0]
        result = {v.name: o for v, o in zip(self.variables, outs)}
        if self.return_index:
            result["index"] = np.ascontiguousarray(starts)
        return result

    # -- adapters ----------------------------------------------------------------------------
    def torch(self, num_workers: int | None = None) -> Any:
        """A ``torch.utils.data.IterableDataset`` for ``DataLoader(ds, batch_size=None, ...)``.

        Workers read disjoint shards of blocks. ``num_workers`` (the DataLoader's) only makes
        ``len()`` exact: each worker batches its own shard, so its last batch may be partial.
        """
        from .torch_adapter import make_torch_dataset

        return make_torch_dataset(self, num_workers)

    def tf(self) -> Any:
        """A ``tf.data.Dataset`` of these batches (supports ``.prefetch(tf.data.AUTOTUNE)``)."""
        from .tf_adapter import make_tf_dataset

        return make_tf_dataset(self)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["stats"] = LoaderStats()
        return state

    def __repr__(self) -> str:
        names = ", ".join(v.name for v in self.variables)
        return (
            f"<Batches of {names}: sample {self.sample}, stride {dict(zip(self.dims, self.stride))}, "
            f"{self.n_windows} windows/epoch in {self.grid.n_blocks} blocks, batch_size "
            f"{self.batch_size}, {len(self)} batches, buffer {self.buffer_chunks} blocks, "
            f"shuffle={self.shuffle} seed={self.seed}>"
        )


def epoch_plan_blocks(b: Batches, epoch: int, shard: int, nshards: int) -> np.ndarray:
    from .plan import shard_blocks

    return shard_blocks(b.grid.n_blocks, b.shuffle, b.seed, epoch, shard, nshards)


def batches(
    obj: Any,
    sample: Mapping[str, int] | Sequence[int],
    stride: Mapping[str, int] | Sequence[int] | None = None,
    batch_size: int = 32,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = False,
    buffer_chunks: int | None = None,
    backend: str = "numpy",
    epochs: int = 1,
    *,
    squeeze: bool = False,
    return_index: bool = False,
    timeout: float | None = None,
    cache: bool | None = None,
) -> Batches:
    """Shuffled batches of windows of ``obj`` (a DataArray, a Dataset or an array).

    ``sample`` maps dims to window lengths (dims not named are taken whole); ``stride``
    (default: the window, i.e. tiles without overlap) maps dims to steps between windows.
    Each batch is an array ``(batch, *window)``, or a dict of them (one per variable of a
    Dataset, plus ``"index"``: each window's first cell, when ``return_index=True``).

    Each window appears exactly once per epoch; ``seed`` and the epoch fix the order, and each
    pass over the result advances the epoch by ``epochs`` (see :meth:`Batches.set_epoch`).
    ``buffer_chunks`` is how many decoded blocks (about a chunk each) are mixed at once; by
    default as many as fit in a quarter of the cache budget, at most 64. ``squeeze=True``
    drops sample dims of length 1. ``backend="cupy"`` returns CuPy arrays on the GPU.
    ``cache``: keep the decoded chunks in the engine's cache. The default (None) does so
    when windows cross chunk boundaries (neighbouring blocks share chunks) or when
    ``epochs > 1`` and the data fit in half the cache budget; otherwise a pass streams
    through reused memory, like ``tse.reduce``. Pass ``cache=True`` when you will iterate
    several times over data that fit in memory.
    ``.torch()`` and ``.tf()`` adapt the result to PyTorch and TensorFlow.
    """
    if backend not in BACKENDS:
        raise ConfigError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "cupy":
        try:
            import cupy  # noqa: F401
        except ImportError:
            raise missing_dependency("cupy", "gpu", "tse.batches(backend='cupy')") from None
    if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ConfigError(f"batch_size must be a positive int, got {batch_size!r}")
    if not isinstance(epochs, (int, np.integer)) or epochs < 1:
        raise ConfigError(f"epochs must be a positive int, got {epochs!r}")
    variables, single = _variables(obj)
    dims = variables[0].dims
    if not dims:
        raise ConfigError("cannot take windows of a 0-dimensional array")
    sample_map = _as_mapping(sample, dims, "sample")
    stride_map = {} if stride is None else _as_mapping(stride, dims, "stride")
    return Batches(
        variables,
        single,
        sample_map,
        stride_map,
        batch_size=int(batch_size),
        shuffle=shuffle,
        seed=seed,
        drop_last=drop_last,
        buffer_chunks=buffer_chunks,
        backend=backend,
        epochs=int(epochs),
        squeeze=squeeze,
        return_index=return_index,
        timeout=timeout,
        cache=cache,
    )
