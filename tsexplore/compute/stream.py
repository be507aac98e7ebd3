"""The local runner: stream chunks through the engine and fold their partials into one state.

The engine keeps PLANNED reads in flight ahead of the consumer (``Engine.stream``), decoding
on its thread pool, while this thread reduces the chunk it holds. Memory stays bounded: the
reads ahead take at most a quarter of the cache budget and the accumulator has the size of
the output.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from ..engine import get_engine
from ..errors import BackendUnavailableError
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


def _close_started(future: cf.Future) -> None:
    """Close the backend a start gives (a done-callback: the reduction ended without it)."""
    if not future.cancelled() and future.exception() is None:
        future.result().close()


def warm_kernels(op: Op, plan: ReducePlan, chunk_shape: tuple[int, ...], dtype: Any
                 ) -> Callable[[Any], None]:
    """What :func:`accumulate` does with one chunk, on a chunk of zeros of the first chunk's
    shape: run on a backend as it starts, it makes CuPy compile (or load) the kernels."""

    def warm(backend: Any) -> None:
        xp = backend.xp
        with backend.activate():
            acc = op.empty(plan.out_shape, xp)
            part = op.partial(xp.zeros(chunk_shape, dtype), plan.axes, xp)
            op.merge_into(acc, plan.region(plan.kblock((0,) * len(chunk_shape))), part, xp)
            backend.state_to_host(part)  # waits for the kernels

    return warm


def accumulate(
    source: ChunkSource,
    plan: ReducePlan,
    op: Op,
    starting: cf.Future,
    *,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    chunks: Iterable[tuple[ChunkIndex, np.ndarray]] | None = None,
    wait: float = 300.0,
) -> State:
    """Fold every chunk of ``plan`` into a host-side state, on the backend ``starting``
    (:func:`~.gpu.start_backend`) gives once it is ready, and with NumPy until then.

    A GPU takes about a second to start (CuPy's import, the CUDA context, loading the
    kernels). The reduction does not wait for it: the chunks that arrive meanwhile are
    reduced on the CPU, the rest on the GPU, and the two states merge at the end (every op's
    merge is associative). When the chunks end before the GPU is up, the start is still
    waited for (at most ``wait`` seconds), so that a GPU that cannot start raises as it
    would have before any chunk was read; the unused backend is then closed.

    ``chunks`` replaces the engine's stream (e.g. :func:`~tsexplore.compute.feed.read_locally`).
    """
    axes = plan.axes
    cpu: State | None = None
    device: Any = None
    acc: State | None = None

    def unused() -> None:  # the run ended before it took the backend: close it when it comes
        if device is None:
            starting.add_done_callback(_close_started)

    with contextlib.ExitStack() as stack:
        stack.callback(unused)
        for index, chunk in _chunks(source, plan, 0, None, cancel, chunks):
            if device is None and starting.done():
                device = starting.result()  # a start that failed raises here
                stack.callback(device.close)
                stack.enter_context(device.activate())
                acc = op.empty(plan.out_shape, device.xp)
            region = plan.region(plan.kblock(index))
            if acc is not None:
                xp = device.xp
                op.merge_into(acc, region, op.partial(device.device_chunk(chunk), axes, xp), xp)
            else:
                if cpu is None:
                    cpu = op.empty(plan.out_shape, np)
                op.merge_into(cpu, region, op.partial(chunk, axes, np), np)
            if progress is not None:
                progress.advance(1, chunk.nbytes)
        if acc is None:
            try:
                starting.result(timeout=wait)
            except cf.TimeoutError:
                raise BackendUnavailableError(
                    f"the compute backend did not start within {wait:.0f} s (tse.config "
                    'wait_timeout); use backend="numpy", or check the GPU with nvidia-smi'
                ) from None
            return cpu if cpu is not None else op.empty(plan.out_shape, np)
        state = device.state_to_host(acc)
    return state if cpu is None else op.merge(cpu, state, np)


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
