"""Cold page cache for the benchmarks: see :mod:`tsexplore.testing.pagecache` (moved there so
that ``tse.advise`` uses the same code)."""

from __future__ import annotations

from tsexplore.testing.pagecache import (
    cold_cache,
    cold_summary,
    evict,
    resident_fraction,
    store_files,
)

__all__ = ["cold_cache", "cold_summary", "evict", "resident_fraction", "store_files"]
