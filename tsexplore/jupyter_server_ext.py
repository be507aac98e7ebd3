"""An opt-in jupyter_server extension: ``TCP_NODELAY`` on kernel websockets.

Tornado leaves Nagle's algorithm on for websockets, so a small message from the kernel (a
frame under 64 kB, an ack reply, a status message) can wait for the browser's delayed ACK
(15-30 ms here) before it leaves the server. This extension makes every kernel websocket set
``TCP_NODELAY`` when it opens. It changes nothing else.

Enable it once for your Jupyter (writes a config file)::

    jupyter server extension enable tsexplore.jupyter_server_ext

or for one run::

    jupyter lab --ServerApp.jpserver_extensions=tsexplore.jupyter_server_ext=True

or, without loading an extension, in ``jupyter_server_config.py``::

    c.ServerApp.kernel_websocket_connection_class = (
        "tsexplore.jupyter_server_ext.NoDelayWebsocketConnection")
"""

from __future__ import annotations

from typing import Any

from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection


def set_nodelay(connection: Any) -> bool:
    """Set ``TCP_NODELAY`` on the websocket behind ``connection``; True when it was set."""
    handler = getattr(connection, "websocket_handler", None)
    if handler is None or getattr(handler, "ws_connection", None) is None:
        return False
    handler.set_nodelay(True)
    log = getattr(connection, "log", None)
    if log is not None:
        log.info("tsexplore: TCP_NODELAY on the websocket of kernel %s", getattr(connection, "kernel_id", "?"))
    return True


def with_nodelay(base: type) -> type:
    """A subclass of the websocket connection class ``base`` that sets ``TCP_NODELAY``."""
    if getattr(base, "_tse_nodelay", False):
        return base

    class NoDelay(base):  # type: ignore[misc, valid-type]
        _tse_nodelay = True

        def connect(self) -> Any:
            set_nodelay(self)
            return super().connect()

    NoDelay.__name__ = NoDelay.__qualname__ = f"NoDelay{base.__name__}"
    return NoDelay


#: for ``c.ServerApp.kernel_websocket_connection_class`` (the default class, with TCP_NODELAY)
NoDelayWebsocketConnection = with_nodelay(ZMQChannelsWebsocketConnection)


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "tsexplore.jupyter_server_ext"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    """Wrap whatever kernel websocket connection class the server uses."""
    settings = serverapp.web_app.settings
    base = settings.get("kernel_websocket_connection_class") or ZMQChannelsWebsocketConnection
    settings["kernel_websocket_connection_class"] = with_nodelay(base)
    serverapp.log.info("tsexplore: kernel websockets set TCP_NODELAY (%s)",
                       settings["kernel_websocket_connection_class"].__name__)
