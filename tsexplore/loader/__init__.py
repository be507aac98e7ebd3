"""ML loading: chunk-aware shuffled batches for NumPy, CuPy, PyTorch and TensorFlow.

``tse.batches(da, sample={"time": 16, "y": 64, "x": 64}, batch_size=32)`` returns a
:class:`Batches`; ``.torch()`` and ``.tf()`` adapt it. Neither torch nor tensorflow is
imported until an adapter is asked for.
"""

from .batches import Batches, LoaderStats, batches
from .plan import EpochPlan, WindowGrid, epoch_plan, lag1_correlation, shuffle_quality

__all__ = [
    "Batches",
    "EpochPlan",
    "LoaderStats",
    "WindowGrid",
    "batches",
    "epoch_plan",
    "lag1_correlation",
    "shuffle_quality",
]
