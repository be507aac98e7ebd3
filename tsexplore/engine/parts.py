"""Which request to make for each chunk of a selection: the whole chunk, or a part of it.

A selection plan gives, for each chunk it touches, the chunk-local selection. When the source
reads parts of chunks from their blosc blocks (``source.blocks``) and the selection's bounding
*box* in a chunk needs few of the chunk's blocks (``blocks.worth(box, shape)``: a frame of a deep
chunk, a few rows, a pixel's profile), the request is a :class:`~.types.Blocks` part of the
chunk instead of the whole chunk. Parts go through the same read table and pipeline as whole
chunks, with four differences: a part is answered by its whole chunk when that is cached, and
joins the read of its whole chunk when that is in flight (:func:`is_part` tells which came
back); a part read for a reader is one-pass (its buffer is recycled once the reader is done),
a part read ahead by the prefetcher is kept until a reader takes it; and the parts of local
chunks a reader waits for are read in the reader's own thread. So when play becomes a steady
pattern, the frame on screen is still read by parts while the prefetcher reads the chunks
ahead whole, and once they are cached the frames are cut from them. A view that goes on with a
scrub of local chunks (a steady step shorter than the chunks, no pause:
:meth:`.ahead.ViewsAhead.scrubs`) asks for whole chunks: the views after it take the rest of
each, so its parts would be decoded twice. A part is the box the source says a read of it
makes (``blocks.made``): a frame whose decode decodes its whole blosc block anyway asks for the
block, which a reader keeps (``blocks.keeps``), and the block's other frames are cut from it
(``blocks.held``).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ..sources.base import ChunkSource
from .planning import SelectionPlan
from .types import Blocks, Box, ChunkRequest


def extent(sel: Any) -> tuple[int, int]:
    """First and one-past-last position a chunk-local selection (slice or sorted array) takes."""
    if isinstance(sel, slice):
        step = sel.step or 1
        n = len(range(sel.start, sel.stop, step))
        return sel.start, sel.start + (n - 1) * step + 1
    return int(sel[0]), int(sel[-1]) + 1


def plan_requests(plan: SelectionPlan, source: ChunkSource, parts: bool = True,
                  made: bool = False) -> list[ChunkRequest]:
    """The request for each chunk of ``plan`` (in :attr:`SelectionPlan.indices` order);
    ``parts`` False (``tse.config`` ``partial_decode``): whole chunks only. ``made``: a
    part is the box its read makes (``source.blocks.made``: the whole blosc block when its
    decode decodes the block anyway), else the selection's box."""
    token = source.token
    blocks = source.blocks
    if blocks is None or not parts or not plan.dims:
        return [ChunkRequest(token, index) for index in plan.indices]
    # per piece: its box along the dimension, and the chunk's length there (edge chunks trimmed)
    per_dim = [[(extent(p[1]), min(c, n - p[0] * c)) for p in d.pieces]
               for d, c, n in zip(plan.dims, source.chunks, source.shape)]
    worth = blocks.worth
    makes = getattr(blocks, "made", None) if made else None
    out = []
    for index, pieces in zip(plan.indices, itertools.product(*per_dim)):
        box = tuple([p[0] for p in pieces])
        shape = tuple([p[1] for p in pieces])
        if not worth(box, shape):
            out.append(ChunkRequest(token, index))
        else:
            out.append(ChunkRequest(token, index, Blocks(box if makes is None else makes(box, shape))))
    return out


def shift(local: tuple[Any, ...], box: Box) -> tuple[Any, ...]:
    """A chunk-local selection made relative to ``box`` (to index a part's values)."""
    out = []
    for sel, (lo, _) in zip(local, box):
        if isinstance(sel, slice):
            out.append(slice(sel.start - lo, sel.stop - lo, sel.step))
        else:
            out.append(sel - lo)
    return tuple(out)


def is_part(value: np.ndarray, request: ChunkRequest) -> bool:
    """Whether ``value`` answering ``request`` is its part (else: the whole chunk)."""
    box = request.box
    return box is not None and value.shape == tuple(hi - lo for lo, hi in box)
