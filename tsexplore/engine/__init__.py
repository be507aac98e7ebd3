"""The engine: chunk cache, scheduler, prefetcher, statistics and StreamingArray.

Never imports widget or plotting libraries (a test checks it).
"""

from .blocking import wait_all
from .cache import ChunkCache
from .scheduler import Engine, close_engine, current_engine, get_engine, set_cache_bytes, snapshot
from .stats import Stats, StatsSnapshot
from .types import ChunkRequest, Priority

__all__ = [
    "ChunkCache",
    "ChunkRequest",
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
