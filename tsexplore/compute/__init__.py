"""Streaming reductions through the engine: CPU (NumPy), GPU (CuPy) or a dask cluster.

>>> import tsexplore as tse
>>> ds = tse.open_dataset("data/cube.zarr")
>>> tse.reduce(ds["temp"], "mean", dim="time")         # or ds["temp"].tse.mean("time")
>>> job = ds["temp"].tse.std("time", background=True)  # job.progress, job.cancel(), job.result()

Chunks stream in the order that keeps each output block's updates together, with the whole
plan announced to the engine (PLANNED reads kept in flight). Partials are float64 and merge
associatively (Chan's formula for var and std), so a dask cluster can reduce chunk ranges on
its workers and merge on the client. See :mod:`tsexplore.compute.ops`.
"""

from .api import reduce
from .gpu import gpu_available
from .job import JobTimeoutError, Progress, ReductionCancelledError, ReductionJob
from .ops import OPS, make_op
from .plan import ReducePlan

__all__ = [
    "OPS",
    "JobTimeoutError",
    "Progress",
    "ReducePlan",
    "ReductionCancelledError",
    "ReductionJob",
    "gpu_available",
    "make_op",
    "reduce",
]
