"""A NumPy-backed stand-in for CuPy whose copies and events are really asynchronous.

What the GPU code must get right is ordering: a host->device copy reads its (pinned) host
buffer *later*, on the device's own time, so the host must not overwrite the buffer until the
copy's event has completed; kernels queued on the same stream see the copied data; results
come back to the host only through ``cupy.asnumpy``. The stand-in keeps those rules:

- ``DeviceArray.set(host, stream)`` queues the copy on the stream. Queued work runs on the
  stream's own thread, and only when someone waits for it (``Event.synchronize``,
  ``Stream.synchronize``, or a kernel that uses the array), so code that reuses a staging
  buffer without waiting for its event copies the *newer* data: the mistake shows every time.
- Any NumPy function or ufunc given a device array first waits for the copies into it
  (kernels on the stream run after the copy), then returns device arrays.
- Device arrays are their own type (``DeviceArray``, module ``cupy``), so a result that was
  never brought back to the host is not an ``np.ndarray`` (check ``type(x) is np.ndarray``).
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable
from typing import Any

import numpy as np

WAIT = 30.0  # seconds any wait on the fake device may take before it is a test failure


class Stream:
    """An in-order queue of work run on its own thread when something waits for it."""

    def __init__(self, non_blocking: bool = False) -> None:
        self._lock = threading.Condition()
        self._queue: list[Callable[[], None]] = []
        self._queued = 0  # work items ever queued
        self._done = 0  # work items ever run
        self._wanted = 0  # run everything up to here
        self._closed = False
        self.records = 0
        self.copies = 0
        self._thread = threading.Thread(target=self._run, name="fake-cuda-stream", daemon=True)
        self._thread.start()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._closed and self._done >= self._wanted:
                    self._lock.wait()
                if self._closed and self._done >= self._wanted:
                    return
                work = self._queue.pop(0)
            work()
            with self._lock:
                self._done += 1
                self._lock.notify_all()

    def enqueue(self, work: Callable[[], None]) -> int:
        with self._lock:
            self._queue.append(work)
            self._queued += 1
            return self._queued

    def run_until(self, ticket: int) -> None:
        """Run the queued work up to ``ticket`` (on the stream's thread) and wait for it."""
        with self._lock:
            self._wanted = max(self._wanted, ticket)
            self._lock.notify_all()
            if not self._lock.wait_for(lambda: self._done >= ticket, WAIT):
                raise TimeoutError(f"the fake stream did not reach work item {ticket} in {WAIT} s")

    def synchronize(self) -> None:
        with self._lock:
            ticket = self._queued
        self.run_until(ticket)

    def record(self) -> Event:
        self.records += 1
        event = Event(self)
        event.ticket = self.enqueue(event._flag.set)
        return event

    def close(self) -> None:
        self.synchronize()
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        self._thread.join(WAIT)


class Event:
    """Completes when the stream's thread reaches it; ``synchronize`` waits for that."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.ticket = 0
        self._flag = threading.Event()

    def synchronize(self) -> None:
        self.stream.run_until(self.ticket)
        assert self._flag.is_set()

    def done(self) -> bool:
        return self._flag.is_set()


def _host(x: Any) -> Any:
    """``x`` with device arrays seen as the NumPy arrays they are (lists/tuples/dicts too)."""
    if isinstance(x, DeviceArray):
        return x.view(np.ndarray)
    if isinstance(x, (list, tuple)):
        return type(x)(_host(v) for v in x)
    if isinstance(x, dict):
        return {k: _host(v) for k, v in x.items()}
    return x


def _wait_for(x: Any) -> None:
    """Wait for the copies into every device array in ``x`` (kernels run after them)."""
    if isinstance(x, DeviceArray):
        stream = x._stream
        if stream is not None:
            stream.synchronize()
    elif isinstance(x, (list, tuple)):
        for v in x:
            _wait_for(v)
    elif isinstance(x, dict):
        for v in x.values():
            _wait_for(v)


def _device(x: Any) -> Any:
    if type(x) is np.ndarray:
        return x.view(DeviceArray)
    if isinstance(x, tuple):
        return tuple(_device(v) for v in x)
    if isinstance(x, list):
        return [_device(v) for v in x]
    return x


class DeviceArray(np.ndarray):
    """Device memory: an ndarray subclass whose writes come from queued copies."""

    _stream: Stream | None = None

    def __array_finalize__(self, obj: Any) -> None:
        self._stream = getattr(obj, "_stream", None)

    def set(self, host: np.ndarray, stream: Stream | None = None) -> None:  # noqa: A003 - CuPy's name
        """Queue the copy of ``host`` into this array; it reads ``host`` when it runs."""
        if stream is None:
            stream = _default_stream()
        target = self.view(np.ndarray)

        def copy() -> None:
            np.copyto(target, host)
            stream.copies += 1

        self._stream = stream
        stream.enqueue(copy)

    def get(self, stream: Stream | None = None) -> np.ndarray:
        return asnumpy(self, stream)

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        _wait_for(inputs)
        _wait_for(kwargs.get("out"))
        if "out" in kwargs:
            kwargs["out"] = _host(kwargs["out"])
        return _device(getattr(ufunc, method)(*_host(inputs), **kwargs))

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        _wait_for(args)
        _wait_for(kwargs)
        return _device(func(*_host(args), **_host(kwargs)))


def _reads_data(name: str) -> Callable[..., Any]:
    method = getattr(np.ndarray, name)

    def wrapper(self: DeviceArray, *args: Any, **kwargs: Any) -> Any:
        _wait_for(self)  # this method reads the values: it runs after the copies into them
        return method(self, *args, **kwargs)

    wrapper.__name__ = name
    return wrapper


for _name in ("__getitem__", "astype", "copy", "item", "tolist", "tobytes", "__float__",
              "__int__", "__bool__", "__repr__", "__str__"):
    setattr(DeviceArray, _name, _reads_data(_name))

DeviceArray.__module__ = "cupy"  # what code that tells CuPy arrays apart looks at

_DEFAULT: list[Stream] = []


def _default_stream() -> Stream:
    if not _DEFAULT:
        _DEFAULT.append(Stream())
    return _DEFAULT[0]


def asnumpy(a: Any, stream: Stream | None = None) -> np.ndarray:
    """Bring ``a`` back to the host: waits for the copies into it, returns an exact ndarray."""
    _wait_for(a)
    return np.array(_host(a))


class FakeCupy(types.ModuleType):
    """``cupy`` made of NumPy: functions take and return :class:`DeviceArray`."""

    def __getattr__(self, name: str) -> Any:
        obj = getattr(np, name)
        if isinstance(obj, type) or not callable(obj):
            return obj  # dtypes, constants

        def on_device(*args: Any, **kwargs: Any) -> Any:
            _wait_for(args)
            _wait_for(kwargs)
            return _device(obj(*_host(args), **_host(kwargs)))

        return on_device


def fake_cupy() -> FakeCupy:
    cp = FakeCupy("cupy")
    cp.ndarray = DeviceArray
    cp.empty = lambda shape, dtype=float: np.empty(shape, dtype).view(DeviceArray)
    cp.asnumpy = asnumpy
    cp.pinned_allocations = []
    cp.streams = []

    def alloc_pinned_memory(n: int) -> bytearray:
        buf = bytearray(n)
        cp.pinned_allocations.append(n)
        return buf

    def stream(non_blocking: bool = False) -> Stream:
        s = Stream(non_blocking)
        cp.streams.append(s)
        return s

    cp.cuda = types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDeviceCount=lambda: 1),
        Stream=stream,
        alloc_pinned_memory=alloc_pinned_memory,
    )
    return cp


def close(cp: FakeCupy) -> None:
    """Stop the fake's stream threads (what was queued runs first)."""
    for s in cp.streams + _DEFAULT:
        s.close()
    _DEFAULT.clear()
