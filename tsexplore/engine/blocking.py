"""Waiting for chunk reads from an ordinary thread, always with a timeout.

:func:`wait_all` waits for futures the scheduler handed out (``Engine.fetch``,
``Engine.stream``, ``read_selection``).
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Sequence

import numpy as np

from ..errors import ReadTimeoutError


def wait_all(futures: Sequence[cf.Future], timeout: float) -> list[np.ndarray]:
    """Wait for every future (at most ``timeout`` seconds) and return their results in order."""
    if len(futures) == 1 and futures[0].done():
        return [futures[0].result()]
    if len(futures) == 1:  # the future's own wait: cheaper than cf.wait's waiters
        try:
            return [futures[0].result(timeout)]
        except cf.TimeoutError:
            if futures[0].done():  # the read itself failed with a timeout: its own error
                raise
            raise ReadTimeoutError(
                f"a chunk read did not finish within {timeout} s; "
                "raise tse.config.set(wait_timeout=...) or check the store"
            ) from None
    done, not_done = cf.wait(futures, timeout, return_when=cf.FIRST_EXCEPTION)
    for fut in futures:
        if fut in done and not fut.cancelled() and fut.exception() is not None:
            raise fut.exception()  # type: ignore[misc]
    if not_done:
        raise ReadTimeoutError(
            f"{len(not_done)} of {len(futures)} chunk reads did not finish within {timeout} s; "
            "raise tse.config.set(wait_timeout=...) or check the store"
        )
    return [f.result() for f in futures]
