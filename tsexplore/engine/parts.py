"""Parts of chunks: requests for only the blosc blocks a thin region needs.

A selection plan gives, for each chunk it touches, the chunk-local selection. When the
source has a part reader (``source.partial_reader()``) and the selection's bounding *box*
in a chunk needs few of the chunk's blocks (:meth:`BloscParts.worth`: a frame of a deep
chunk, a few rows, a pixel's profile), the request is for that part, keyed ``ReadKey(token,
index, box)``, instead of the whole chunk ``ReadKey(token, index)``. Parts are requested
and counted like chunks, with three differences:

- a part is answered by its whole chunk when that is decoded in the cache;
- a part read for a reader is not kept (its buffer is recycled once the reader is done); a
  part of a remote chunk read ahead by the prefetcher is kept until a reader takes it;
- parts of local chunks a reader waits for are read at once by the reader's own thread and
  the idle read threads (``Engine._read_now``), not queued in the read table: decoding a
  few blocks costs less than scheduling them.

The read pipeline (:mod:`.pipeline`) reads them: the stored frame from the cache's encoded
tier when it is there (no I/O), else the frame's head from the encoded tier and only the
blocks' byte ranges from the store. What a read fetched (a head; a whole frame from a remote
store) goes to the encoded tier, so the next frame of the same chunk reads its blocks only, or
nothing at all. Read-ahead of stored bytes (``ReadKey(token, index, STORED)``) fills the
encoded tier without decoding.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from .. import config
from ..sources.base import ChunkSource
from .planning import SelectionPlan
from .types import Box, Part


def extent(sel: Any) -> tuple[int, int]:
    """First and one-past-last position a chunk-local selection (slice or sorted array) takes."""
    if isinstance(sel, slice):
        step = sel.step or 1
        n = len(range(sel.start, sel.stop, step))
        return sel.start, sel.start + (n - 1) * step + 1
    return int(sel[0]), int(sel[-1]) + 1


def part_boxes(
    plan: SelectionPlan, source: ChunkSource, following: bool = False
) -> list[Part] | None:
    """Per chunk of ``plan`` (in :meth:`SelectionPlan.chunk_indices` order) the box to read
    as a part, or None for the whole chunk; None when every chunk is read whole.

    ``following``: the views of ``source`` move along a steady pattern (play, scrub). A local
    chunk is then read and decoded whole, once: the next views need the rest of it, and one
    whole read costs less than a part read per view (measured: scrub of the benchmark cube,
    warm page cache, 129 frames/s whole against 71 by parts). A remote store keeps its
    parts (a round trip per chunk is what counts there; see ``keep_stored``).
    """
    if not plan.dims or not config.get().partial_decode:
        return None
    if following and not source.is_async:
        return None
    reader = source.partial_reader()
    if reader is None:
        return None
    per_dim = [[extent(p[1]) for p in d.pieces] for d in plan.dims]
    worth = reader.worth
    out: list[Part] = []
    found = False
    for box in itertools.product(*per_dim):
        if worth(box):
            out.append(box)
            found = True
        else:
            out.append(None)
    return out if found else None


def shift(local: tuple[Any, ...], box: Box) -> tuple[Any, ...]:
    """A chunk-local selection made relative to ``box`` (to index a part's values)."""
    out = []
    for sel, (lo, _) in zip(local, box):
        if isinstance(sel, slice):
            out.append(slice(sel.start - lo, sel.stop - lo, sel.step))
        else:
            out.append(sel - lo)
    return tuple(out)


def is_part(value: np.ndarray, box: Part) -> bool:
    """Whether ``value`` answering a request for ``box`` is the part (else: its whole chunk)."""
    return isinstance(box, tuple) and value.shape == tuple(hi - lo for lo, hi in box)
