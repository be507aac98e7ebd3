"""Where widget updates run: the Jupyter kernel's IOLoop when there is one, else inline.

Plot and widget updates send comm messages, which must happen on the kernel's main thread.
Background threads (the view thread, the profile thread) hand their updates to
:func:`dispatch`; the StatsPanel's timer runs on the IOLoop (or on a ``tsexplore-stats-*``
thread when there is no kernel, e.g. in headless tests).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any


def kernel_loop() -> Any:
    """The running IPython kernel's tornado IOLoop, or None outside a kernel."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with ipywidgets
        return None
    shell = get_ipython()
    kernel = getattr(shell, "kernel", None)
    return getattr(kernel, "io_loop", None)


class Dispatcher:
    """Runs callbacks on the kernel's IOLoop (from any thread), or inline under a lock."""

    def __init__(self, loop: Any = "auto") -> None:
        self.loop = kernel_loop() if loop == "auto" else loop
        self._lock = threading.RLock()

    @property
    def lock(self) -> threading.RLock:
        """Held while inline callbacks run (and by the Explorer while it rebuilds its plot)."""
        return self._lock

    def __call__(self, fn: Callable[..., Any], *args: Any) -> None:
        if self.loop is not None:
            self.loop.add_callback(fn, *args)
        else:
            with self._lock:
                fn(*args)


class Timer:
    """Calls ``fn`` every ``interval`` seconds: a PeriodicCallback on the kernel's IOLoop, or
    a ``tsexplore-stats-*`` thread outside a kernel. ``stop()`` ends it."""

    def __init__(self, fn: Callable[[], Any], interval: float, name: str, loop: Any = "auto") -> None:
        self.fn = fn
        self.interval = float(interval)
        self.loop = kernel_loop() if loop == "auto" else loop
        self._stop = threading.Event()
        self._pc: Any = None
        self._thread: threading.Thread | None = None
        self.errors = 0
        self.last_error: BaseException | None = None
        if self.loop is not None:
            from tornado.ioloop import PeriodicCallback

            self._pc = PeriodicCallback(self._safe, self.interval * 1000)
            self.loop.add_callback(self._pc.start)
        else:
            self._thread = threading.Thread(target=self._run, name=name, daemon=True)
            self._thread.start()

    @property
    def running(self) -> bool:
        return not self._stop.is_set()

    def _safe(self) -> None:
        if self._stop.is_set():
            return
        try:
            self.fn()
        except Exception as exc:  # noqa: BLE001 - one bad tick must not stop the panel
            self.errors += 1
            self.last_error = exc

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._safe()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._pc is not None:
            self.loop.add_callback(self._pc.stop)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)


@functools.cache
def _bokeh_model_class() -> Any:
    from jupyter_bokeh.widgets import BokehModel

    class TseBokehModel(BokehModel):  # type: ignore[misc]
        """jupyter_bokeh's widget with an idempotent ``close()`` (its own raises KeyError
        from ``__del__`` once it was closed explicitly) and :meth:`batch`, which sends the
        changes made inside it as one document patch (jupyter_bokeh sends one per change, and
        the browser then lays out and paints the plot once per patch)."""

        _tse_held: list[Any] | None = None

        def close(self) -> None:
            if getattr(self, "_tse_closed", False):
                return
            self._tse_closed = True
            super().close()

        def _document_patched(self, event: Any) -> None:
            if event.setter is self:
                return
            if self._tse_held is not None:
                self._tse_held.append(event)
                return
            self._send_patch([event])

        def _send_patch(self, events: list[Any]) -> None:
            import json

            from bokeh.protocol import Protocol

            msg = Protocol().create("PATCH-DOC", events)
            self.send({"msg": "patch", "payload": msg.header_json})
            self.send({"msg": "patch", "payload": msg.metadata_json})
            self.send({"msg": "patch", "payload": msg.content_json})
            for buffer in msg.buffers:
                self.send({"msg": "patch", "payload": json.dumps(buffer.ref)})
                self.send({"msg": "patch"}, [buffer.to_bytes()])

        @contextlib.contextmanager
        def batch(self) -> Iterator[None]:
            """Changes to the bokeh document inside this block go out as one patch."""
            if self._tse_held is not None:  # nested: the outer block sends
                yield
                return
            self._tse_held = []
            try:
                yield
            finally:
                events, self._tse_held = self._tse_held, None
                if events:
                    self._send_patch(events)

    return TseBokehModel


# jupyter_bokeh 4.1's browser side forwards every document change event to the kernel,
# including the ones BokehJS marks ``sync = false`` because they came from the kernel's own
# patch (bokeh >= 3.4): each frame's image went straight back (626 kB per 1024^2 frame).
# Run once the document is ready: wrap its change listeners so that those events are dropped.
NO_ECHO_JS = """
const doc = cb_obj;
if (doc != null && doc._callbacks instanceof Map && !doc.__tse_no_echo) {
  doc.__tse_no_echo = true;
  for (const [callback, batches] of [...doc._callbacks]) {
    doc._callbacks.delete(callback);
    doc._callbacks.set((event) => { if (event.sync !== false) callback(event); }, batches);
  }
}
"""


def bokeh_widget(layout: Any) -> Any:
    """An ipywidget showing the bokeh ``layout``. Changes made on the kernel's thread travel
    as binary patches; the browser sends back only its own changes (pan/zoom, clicks), never
    an echo of a kernel patch (see ``NO_ECHO_JS``)."""
    from bokeh.document import Document
    from bokeh.models import CustomJS

    doc = layout.document
    if doc is None:
        doc = Document()
        doc.add_root(layout)
    doc.js_on_event("document_ready", CustomJS(code=NO_ECHO_JS))
    return _bokeh_model_class()(layout, combine_events=True)
