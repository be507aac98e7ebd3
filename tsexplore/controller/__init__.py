"""Headless view control: view state -> engine requests, with "latest wins" generations.

The Explorer widget (``tsexplore/ui``) is a thin face over :class:`ViewController`; the
controller never imports a widget library and is tested with a mock :class:`View`.

- :mod:`.planning` (pure): :class:`PlaneGeometry`, :class:`ViewState`, :func:`resolve` ->
  :class:`ViewRequest`.
- :mod:`.colour` (pure): a frame's colour range (:func:`robust_range`), 8-bit colour indices
  (:func:`to_uint8`) and histogram (:func:`frame_histogram`), in reused scratch buffers.
- :mod:`.view`: :class:`ViewController` and the :class:`View` it reports to.
- :mod:`.profile`: the profile through one pixel, streamed chunk by chunk (:class:`Profile`).
- :mod:`.levels` (pure): pyramid levels (:class:`ViewLevel`) and :func:`plan_view`: the level
  that fits the screen, a coarser picture first, the tiles of a progressive read.
- :mod:`.reading`: one generation's frames read through the engine, whole or tile by tile.
- :mod:`.roi`: the mean/min/max of a region along a slider dim, streamed as PLANNED reads
  (:class:`RoiStats`).
- :mod:`.labels`: a label layer (integer ids) read under each frame (:class:`LabelLayer`).
- :mod:`.projection`: a max / mean / min projection along a dim, streamed through
  ``tse.reduce`` tile by tile (:class:`Projection`).
"""

from .colour import Histogram, frame_histogram, log_counts, robust_range, to_uint8
from .labels import LabelFrame, LabelLayer, label_samples, read_labels
from .levels import ViewLevel, ViewPlan, plan_view, tile_requests
from .planning import (
    FRAME_MODES,
    Extent,
    Frame,
    PlaneGeometry,
    Range,
    ViewRequest,
    ViewState,
    resolve,
)
from .profile import Profile, profile_chunks, stream_profile
from .projection import Projection
from .roi import RoiStats, roi_plan, stream_roi
from .view import View, ViewController

__all__ = [
    "FRAME_MODES",
    "Extent",
    "Frame",
    "Histogram",
    "LabelFrame",
    "LabelLayer",
    "PlaneGeometry",
    "Profile",
    "Projection",
    "Range",
    "RoiStats",
    "View",
    "ViewController",
    "ViewLevel",
    "ViewPlan",
    "ViewRequest",
    "ViewState",
    "frame_histogram",
    "label_samples",
    "log_counts",
    "profile_chunks",
    "read_labels",
    "resolve",
    "roi_plan",
    "robust_range",
    "plan_view",
    "stream_profile",
    "stream_roi",
    "tile_requests",
    "to_uint8",
]
