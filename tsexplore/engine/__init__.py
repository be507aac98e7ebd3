"""The engine: chunk cache, scheduler, prefetcher, statistics and StreamingArray.

Never imports widget or plotting libraries (a test checks it).
"""

from .cache import ChunkCache
from .scheduler import (
    Engine,
    Priority,
    close_engine,
    current_engine,
    get_engine,
    set_cache_bytes,
    snapshot,
    wait_all,
)
from .stats import Stats, StatsSnapshot

__all__ = [
    "ChunkCache",
    "Engine",
    "Priority",
    "Stats",
    "StatsSnapshot",
    "close_engine",
    "current_engine",
    "snapshot",
    "get_engine",
    "set_cache_bytes",
    "wait_all",
]
