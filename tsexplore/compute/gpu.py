"""The CuPy backend: chunks go to the GPU through pinned staging buffers and reduce there.

Each decoded chunk is copied into one of two page-locked (pinned) host buffers and sent to
the device with an asynchronous copy on a dedicated CUDA stream; the reduction kernels are
queued on the same stream. The host thread does not wait for the GPU: it goes back to the
engine for the next chunk while the copy and the kernels run, and only waits for a staging
buffer's previous copy (two chunks ago) before it overwrites that buffer. CuPy is imported
only here, only when ``backend="cupy"`` (or ``"auto"``) is asked for.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import importlib.util
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import BackendUnavailableError, ConfigError, missing_dependency
from .ops import State

BACKENDS = ("numpy", "cupy", "auto")


def import_cupy() -> Any:
    """CuPy with a usable CUDA device, or a clear error saying why not."""
    try:
        import cupy
    except ImportError as exc:
        raise missing_dependency("cupy", "gpu", 'backend="cupy"') from exc
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # noqa: BLE001 - CUDARuntimeError and friends
        raise BackendUnavailableError(
            f'backend="cupy" needs a CUDA GPU, but CuPy cannot reach one ({exc}). '
            'Use backend="numpy", or backend="auto" to fall back to the CPU'
        ) from exc
    if count < 1:
        raise BackendUnavailableError(
            'backend="cupy" needs a CUDA GPU and CuPy sees none. '
            'Use backend="numpy", or backend="auto" to fall back to the CPU'
        )
    return cupy


def check_cupy_installed() -> None:
    """Raise :class:`MissingDependencyError` now when CuPy is not installed; cheap (CuPy is
    not imported: that and the GPU's start happen in :func:`start_backend`)."""
    if "cupy" in sys.modules:
        return
    if importlib.util.find_spec("cupy") is None:
        raise missing_dependency("cupy", "gpu", 'backend="cupy"')


def gpu_available() -> bool:
    """Whether ``backend="cupy"`` can run here (CuPy importable and a GPU visible)."""
    try:
        import_cupy()
    except (BackendUnavailableError, ImportError):
        return False
    return True


class CupyBackend:
    """Stage chunks through ``nbuf`` pinned buffers onto one CUDA stream and reduce there."""

    name = "cupy"

    def __init__(self, chunk_nbytes: int, nbuf: int = 2) -> None:
        cp = import_cupy()
        self.xp = cp
        self._cp = cp
        self._nbytes = max(1, int(chunk_nbytes))
        self.stream = cp.cuda.Stream(non_blocking=True)
        self._buffers = [cp.cuda.alloc_pinned_memory(self._nbytes) for _ in range(max(2, nbuf))]
        self._events: list[Any] = [None] * len(self._buffers)
        self._next = 0
        self.staged = 0

    def activate(self) -> contextlib.AbstractContextManager[Any]:
        """Make the backend's stream current, so the reductions queue behind the copies."""
        return self.stream  # type: ignore[no-any-return]

    def device_chunk(self, chunk: np.ndarray) -> Any:
        """Copy ``chunk`` to the device without waiting for the copy to finish."""
        cp = self._cp
        if chunk.nbytes > self._nbytes:  # a chunk larger than planned: grow the buffers
            self.stream.synchronize()
            self._nbytes = chunk.nbytes
            self._buffers = [cp.cuda.alloc_pinned_memory(self._nbytes) for _ in self._buffers]
            self._events = [None] * len(self._buffers)
        k = self._next
        self._next = (k + 1) % len(self._buffers)
        event = self._events[k]
        if event is not None:
            event.synchronize()  # the copy out of this buffer (two chunks ago) is done
        host = np.frombuffer(self._buffers[k], dtype=chunk.dtype, count=chunk.size)
        host = host.reshape(chunk.shape)
        np.copyto(host, chunk)
        device = cp.empty(chunk.shape, dtype=chunk.dtype)
        device.set(host, stream=self.stream)
        self._events[k] = self.stream.record()
        self.staged += 1
        return device

    def to_host(self, array: Any) -> np.ndarray:
        self.stream.synchronize()
        return np.asarray(self._cp.asnumpy(array))

    def state_to_host(self, state: State) -> State:
        self.stream.synchronize()
        return tuple(self._cp.asnumpy(a) if isinstance(a, self._cp.ndarray) else a for a in state)

    def close(self) -> None:
        """Wait for queued work and release the pinned buffers."""
        with contextlib.suppress(Exception):
            self.stream.synchronize()
        self._buffers = []
        self._events = []


def start_backend(
    name: str, chunk_nbytes: int, warm: Callable[[Any], None] | None = None
) -> cf.Future:
    """:func:`make_backend` on a thread of its own, as a Future: a GPU's start (CuPy's
    import, the CUDA context, the stream and pinned buffers) runs while chunks are read.

    ``warm(backend)`` runs on that thread before the Future is done (a reduction launches
    its kernels once, so that CuPy compiles or loads them there and not at the first chunk).
    The thread ends when the backend is made; NumPy needs no start and is returned done.
    """
    future: cf.Future = cf.Future()
    if name == "numpy":
        future.set_result(make_backend(name, chunk_nbytes))
        return future

    def start() -> None:
        try:
            backend = make_backend(name, chunk_nbytes)
        except BaseException as exc:  # noqa: BLE001 - handed to the reduction
            future.set_exception(exc)
            return
        try:
            if warm is not None and backend.name != "numpy":
                warm(backend)
        except BaseException as exc:  # noqa: BLE001 - handed to the reduction
            backend.close()
            future.set_exception(exc)
            return
        future.set_result(backend)

    threading.Thread(target=start, name="tsexplore-gpu-start", daemon=True).start()
    return future


def make_backend(name: str, chunk_nbytes: int) -> Any:
    """The backend called ``name``; ``"auto"`` is CuPy when a GPU is usable, else NumPy."""
    from .stream import NumpyBackend

    if name not in BACKENDS:
        raise ConfigError(f"backend must be one of {BACKENDS}, got {name!r}")
    if name == "numpy":
        return NumpyBackend()
    if name == "cupy":
        return CupyBackend(chunk_nbytes)
    try:
        return CupyBackend(chunk_nbytes)
    except (BackendUnavailableError, ImportError):
        return NumpyBackend()
