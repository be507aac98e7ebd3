"""Headless view control: view state -> engine requests, with "latest wins" generations.

The Explorer widget (``tsexplore/ui``) is a thin face over :class:`ViewController`; the
controller never imports a widget library and is tested with a mock :class:`View`.

- :mod:`.planning` (pure): :class:`PlaneGeometry`, :class:`ViewState`, :func:`resolve` ->
  :class:`ViewRequest`, and the colour mapping (:func:`robust_range`, :func:`to_uint8`).
- :mod:`.view`: :class:`ViewController` and the :class:`View` it reports to.
- :mod:`.profile`: the profile through one pixel, streamed chunk by chunk (:class:`Profile`).
"""

from .planning import (
    Frame,
    PlaneGeometry,
    Range,
    ViewRequest,
    ViewState,
    resolve,
    robust_range,
    to_uint8,
)
from .profile import Profile, profile_chunks, stream_profile
from .view import View, ViewController

__all__ = [
    "Frame",
    "PlaneGeometry",
    "Profile",
    "Range",
    "View",
    "ViewController",
    "ViewRequest",
    "ViewState",
    "profile_chunks",
    "resolve",
    "robust_range",
    "stream_profile",
    "to_uint8",
]
