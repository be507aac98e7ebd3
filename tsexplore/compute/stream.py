"""The local runner: stream chunks through the engine and fold their partials into one state.

The engine keeps PLANNED reads in flight ahead of the consumer (``Engine.stream``), decoding
on its thread pool, while this thread reduces the chunk it holds. Memory stays bounded: the
reads ahead take at most a quarter of the cache budget and the accumulator has the size of
the output.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ..engine import get_engine
from ..sources.base import ChunkSource
from .job import Progress, ReductionCancelledError
from .ops import Op, State
from .plan import ChunkIndex, ReducePlan


class NumpyBackend:
    """Reduce on the CPU with NumPy (chunks are used where the engine put them)."""

    name = "numpy"
    xp = np

    def device_chunk(self, chunk: np.ndarray) -> np.ndarray:
        return chunk

    def activate(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def to_host(self, array: Any) -> np.ndarray:
        return np.asarray(array)

    def state_to_host(self, state: State) -> State:
        return state

    def close(self) -> None:
        """Nothing to release."""


def _chunks(
    source: ChunkSource,
    plan: ReducePlan,
    start: int,
    stop: int | None,
    cancel: threading.Event | None,
    chunks: Iterable[tuple[ChunkIndex, np.ndarray]] | None = None,
) -> Iterator[tuple[ChunkIndex, np.ndarray]]:
    if chunks is None:
        chunks = get_engine().stream(source, plan.order(start, stop), cache=False)  # one pass
    for index, chunk in chunks:
        if cancel is not None and cancel.is_set():
            raise ReductionCancelledError("the reduction was cancelled; no result was produced")
        yield index, chunk
    if cancel is not None and cancel.is_set():
        raise ReductionCancelledError("the reduction was cancelled; no result was produced")


def accumulate(
    source: ChunkSource,
    plan: ReducePlan,
    op: Op,
    backend: Any,
    *,
    start: int = 0,
    stop: int | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    chunks: Iterable[tuple[ChunkIndex, np.ndarray]] | None = None,
) -> State:
    """Fold chunks at positions ``start..stop`` of ``plan`` into a state of the output's shape.

    ``chunks`` replaces the engine's stream (e.g. :func:`~tsexplore.compute.feed.read_locally`).
    """
    xp = backend.xp
    axes = plan.axes
    with backend.activate():
        acc = op.empty(plan.out_shape, xp)
        for index, chunk in _chunks(source, plan, start, stop, cancel, chunks):
            x = backend.device_chunk(chunk)
            part = op.partial(x, axes, xp)
            op.merge_into(acc, plan.region(plan.kblock(index)), part, xp)
            if progress is not None:
                progress.advance(1, chunk.nbytes)
    return acc


def accumulate_blocks(
    source: ChunkSource,
    plan: ReducePlan,
    op: Op,
    backend: Any,
    *,
    start: int = 0,
    stop: int | None = None,
    cancel: threading.Event | None = None,
    chunks: Iterable[tuple[ChunkIndex, np.ndarray]] | None = None,
) -> tuple[dict[ChunkIndex, State], int, int]:
    """Like :func:`accumulate` but keeps one state per output block (what a worker returns).

    Returns ``(blocks, chunks, decoded bytes)``; states are on the host.
    """
    xp = backend.xp
    axes = plan.axes
    blocks: dict[ChunkIndex, State] = {}
    nchunks = nbytes = 0
    with backend.activate():
        for index, chunk in _chunks(source, plan, start, stop, cancel, chunks):
            part = op.partial(backend.device_chunk(chunk), axes, xp)
            kb = plan.kblock(index)
            blocks[kb] = part if kb not in blocks else op.merge(blocks[kb], part, xp)
            nchunks += 1
            nbytes += chunk.nbytes
        out = {kb: backend.state_to_host(state) for kb, state in blocks.items()}
    return out, nchunks, nbytes
