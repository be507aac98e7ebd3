"""Process-wide settings, read from the environment once and settable at run time.

Environment variables (all optional):

- ``TSEXPLORE_CACHE_BYTES``: the chunk-cache budget in bytes (default: 25 % of RAM), one for
  the process; ``set(cache_bytes=...)`` changes it live.
- ``TSEXPLORE_HTTP_TIMEOUT``: seconds before one remote read times out (default 30).
- ``TSEXPLORE_RETRIES``: retries of 408/429/5xx answers (default 3).
- ``TSEXPLORE_SWITCH_INTERVAL``: the GIL switch interval the engine sets when it starts
  (default 0.0005 s; Python's own is 0.005 s, which convoys the read threads behind a busy
  main thread). ``0`` leaves Python's setting alone.
- ``TSEXPLORE_READ_NICE``: the nice value of the engine's read threads on Linux (default 5:
  decoding yields to the thread that waits for the data). ``0`` leaves them alone.
- ``TSEXPLORE_SAMPLE_SIZE``: ``"full"`` (default) or ``"small"``; the size of the tutorial
  data that notebooks and ``tse.sample_data`` write. Tests set ``small``.
- ``TSEXPLORE_REMOTE_READER``: ``"auto"`` (default: obstore's Rust client for ``http(s)://``
  and ``s3://`` chunk reads when it is installed and the storage options translate, else
  fsspec/aiohttp), ``"obstore"`` or ``"fsspec"``. Metadata is always read through zarr.
- ``TSEXPLORE_CBLOSC2``: ``0`` decodes blosc chunks with numcodecs instead of C-Blosc2
  (read once, at the first blosc chunk).
- ``TSEXPLORE_PARTIAL_DECODE``: ``0`` decodes blosc chunks whole even for a thin selection
  (a frame of a deep chunk); by default only the blocks that hold it are read and decoded.
- ``TSEXPLORE_KEEP_STORED``: when reading a part of a blosc chunk (a frame of a deep chunk)
  fetches the whole stored frame and the cache keeps it (the encoded tier): ``remote``
  (default; local files read only the blocks' bytes and the page cache holds the rest),
  ``always`` or ``never``.
- ``TSEXPLORE_VISIBLE_FIRST``: ``0`` lets PLANNED and SPECULATIVE reads start while VISIBLE
  reads are queued or running, and background streams (reductions, region statistics) go on
  while a view is busy; by default visible work wins (:mod:`tsexplore.engine.activity`).
- ``TSEXPLORE_VISIBLE_GRACE``: seconds background streams still wait after a view's frame
  went out (default 0.5: the user is likely to move again, the frame is still being painted).
- ``TSEXPLORE_BACKGROUND_WAIT``: the longest a background stream waits for visible work per
  chunk (default 1.0 s), so it always moves on.
"""

from __future__ import annotations

import builtins
import numbers
import os
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

from .errors import ConfigError

#: who fetches remote chunk bytes: obstore when installed and it can ("auto"), or always one
REMOTE_READERS = ("auto", "obstore", "fsspec")


def _total_ram() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - exotic platforms
        return 8 * 2**30


KEEP_STORED = ("remote", "always", "never")


@dataclass(frozen=True)
class Settings:
    """Frozen view of the settings in force."""

    cache_bytes: int
    http_timeout: float = 30.0
    retries: int = 3
    retry_backoff: float = 0.2
    wait_timeout: float = 300.0
    sample_size: str = "full"
    io_threads: int = 4
    switch_interval: float = 0.0005
    read_nice: int = 5
    remote_reader: str = "auto"
    keep_stored: str = "remote"
    partial_decode: bool = True
    visible_first: bool = True
    visible_grace: float = 0.5
    background_wait: float = 1.0


def _from_env() -> Settings:
    env = os.environ
    try:
        return Settings(
            cache_bytes=int(env.get("TSEXPLORE_CACHE_BYTES", _total_ram() // 4)),
            http_timeout=float(env.get("TSEXPLORE_HTTP_TIMEOUT", 30.0)),
            retries=int(env.get("TSEXPLORE_RETRIES", 3)),
            wait_timeout=float(env.get("TSEXPLORE_WAIT_TIMEOUT", 300.0)),
            sample_size=env.get("TSEXPLORE_SAMPLE_SIZE", "full"),
            io_threads=int(env.get("TSEXPLORE_IO_THREADS", max(4, 2 * (os.cpu_count() or 2)))),
            switch_interval=float(env.get("TSEXPLORE_SWITCH_INTERVAL", 0.0005)),
            read_nice=int(env.get("TSEXPLORE_READ_NICE", 5)),
            remote_reader=env.get("TSEXPLORE_REMOTE_READER", "auto"),
            keep_stored=env.get("TSEXPLORE_KEEP_STORED", "remote"),
            partial_decode=env.get("TSEXPLORE_PARTIAL_DECODE", "1") != "0",
            visible_first=env.get("TSEXPLORE_VISIBLE_FIRST", "1") != "0",
            visible_grace=float(env.get("TSEXPLORE_VISIBLE_GRACE", 0.5)),
            background_wait=float(env.get("TSEXPLORE_BACKGROUND_WAIT", 1.0)),
        )
    except ValueError as exc:
        raise ConfigError(f"a TSEXPLORE_* environment variable is not a number: {exc}") from exc


_settings = _from_env()
#: called with the new settings after every :func:`set` (the running engine resizes its cache)
_watchers: list[Callable[[Settings], None]] = []


def watch(fn: Callable[[Settings], None]) -> Callable[[], None]:
    """Call ``fn(settings)`` after every :func:`set`; returns the function that stops it."""
    _watchers.append(fn)

    def stop() -> None:
        try:
            _watchers.remove(fn)
        except ValueError:
            pass

    return stop


def get() -> Settings:
    """Return the settings in force."""
    return _settings


def set(**changes: object) -> Settings:  # noqa: A001 - mirrors dask.config.set
    """Change settings for this process, e.g. ``tse.config.set(http_timeout=5)``.

    ``cache_bytes`` is the one cache budget of the process, shared by every dataset: setting
    it resizes the running engine's cache at once (shrinking evicts the least recently used
    chunks before this returns).
    """
    global _settings
    allowed = {f.name for f in fields(Settings)}
    unknown = sorted(builtins.set(changes) - allowed)
    if unknown:
        raise ConfigError(f"unknown setting(s) {unknown}; allowed: {sorted(allowed)}")
    if "cache_bytes" in changes:
        changes["cache_bytes"] = _budget(changes["cache_bytes"])
    if "sample_size" in changes and changes["sample_size"] not in ("full", "small"):
        raise ConfigError(f"sample_size must be 'full' or 'small', got {changes['sample_size']!r}")
    if "remote_reader" in changes and changes["remote_reader"] not in REMOTE_READERS:
        raise ConfigError(
            f"remote_reader must be one of {REMOTE_READERS}, got {changes['remote_reader']!r}"
        )
    if "keep_stored" in changes and changes["keep_stored"] not in KEEP_STORED:
        raise ConfigError(f"keep_stored must be one of {KEEP_STORED}, got {changes['keep_stored']!r}")
    _settings = replace(_settings, **changes)  # type: ignore[arg-type]
    for fn in list(_watchers):
        fn(_settings)
    return _settings


def _budget(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or value < 0:
        raise ConfigError(
            f"cache_bytes must be a number of bytes >= 0 (e.g. 2 * 2**30), got {value!r}"
        )
    return int(value)  # type: ignore[call-overload]  # (typeshed: Real has no __int__)


def total_ram() -> int:
    """Physical memory of this machine in bytes."""
    return _total_ram()
