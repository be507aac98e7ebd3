"""Patches benchmark (issue 5): shuffled 16x64x64 windows of the cube in batches of 32.

Systems (every one draws the same non-overlapping window grid, shuffled, cold page cache):

- ``tsexplore``: ``tse.batches(ds["temp"], sample={"time": 16, "y": 64, "x": 64},
  batch_size=32, shuffle=True, seed=0)``, iterated in this process.
- ``tsexplore-torch``: the same ``.torch()`` dataset in a ``DataLoader`` with 2 workers.
- ``torch``: a map-style ``Dataset`` reading one window per item with zarr, in a
  ``DataLoader(batch_size=32, shuffle=True, num_workers=2)``.
- ``xbatcher``: ``xbatcher.BatchGenerator(da, input_dims={...})`` over
  ``xr.open_zarr(path, chunks=None)``; 32 patches in random order stacked per batch.

Each system runs until it has delivered its batch count (200 for tsexplore; fewer for
the slower peers) or ``--max-seconds``, whichever comes first; the rate is samples/s from
creating the iterator to the last batch (worker start-up included), plus the time to the
first batch and the steady rate after it. Also the peak RSS of the process tree.
"""

from __future__ import annotations

import math
import time
from typing import Any

from . import common, report, runner
from .common import Metric

SYSTEMS = ("tsexplore", "tsexplore-torch", "torch", "xbatcher", "tensorstore")
TS_CACHE_BYTES = 1_000_000_000
SAMPLE = {"time": 16, "y": 64, "x": 64}
BATCH_SIZE = 32
WORKERS = 2
DEFAULT_BATCHES = {"tsexplore": 200, "tsexplore-torch": 200, "torch": 60, "xbatcher": 20,
                   "tensorstore": 200}

METRICS = [
    Metric("samples_per_s", "samples/s", "higher", "{:.0f}"),
    Metric("steady_samples_per_s", "steady samples/s", "higher", "{:.0f}"),
    Metric("first_batch_s", "first batch s", "lower", "{:.3f}"),
    Metric("batches", "batches", "higher", "{:.0f}"),
]


# -- child side ----------------------------------------------------------------------------------
def _n_samples(batch: Any) -> int:
    """Samples in one batch: a (batch, time, y, x) array or tensor, or a dict of them."""
    if isinstance(batch, dict):
        batch = next(iter(batch.values()))
    if isinstance(batch, (list, tuple)):
        batch = batch[0]
    shape = tuple(batch.shape)
    if shape[-3:] != tuple(SAMPLE.values()):
        raise ValueError(f"a batch of shape {shape} does not hold {tuple(SAMPLE.values())} windows")
    return int(shape[0]) if len(shape) == 4 else 1


def _windows(shape: list[int]) -> list[tuple[int, int, int]]:
    """Origins of the non-overlapping window grid (the same windows tse.batches draws)."""
    w = list(SAMPLE.values())
    counts = [s // n for s, n in zip(shape, w)]
    return [(a * w[0], b * w[1], c * w[2])
            for a in range(counts[0]) for b in range(counts[1]) for c in range(counts[2])]


class ZarrWindows:
    """Map-style torch Dataset: item ``i`` is window ``i`` of the grid, read with zarr.

    The array is opened lazily in each worker (zarr's event loop must not cross a fork).
    """

    def __init__(self, path: str, shape: list[int], options: dict | None = None) -> None:
        self.path = path
        self.options = options
        self.origins = _windows(shape)
        self._arr: Any = None

    def __len__(self) -> int:
        return len(self.origins)

    def __getitem__(self, i: int) -> Any:
        if self._arr is None:
            import zarr

            self._arr = zarr.open_array(self.path, path=common.VARIABLE, mode="r",
                                        storage_options=self.options)
        t, y, x = self.origins[i]
        return self._arr[t:t + SAMPLE["time"], y:y + SAMPLE["y"], x:x + SAMPLE["x"]]

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "options": self.options, "origins": self.origins,
                "_arr": None}


def _iter_tsexplore(path: str, need: int, torch: bool, options: dict | None = None) -> Any:
    import tsexplore as tse

    da = tse.open_dataset(path, storage_options=options)[common.VARIABLE]
    probe = tse.batches(da, sample=SAMPLE, batch_size=BATCH_SIZE, shuffle=True, seed=0)
    per_epoch = max(1, len(probe))
    epochs = max(1, math.ceil(need / per_epoch))
    b = tse.batches(da, sample=SAMPLE, batch_size=BATCH_SIZE, shuffle=True, seed=0,
                    epochs=epochs)
    if not torch:
        return iter(b)
    from torch.utils.data import DataLoader

    return iter(DataLoader(b.torch(num_workers=WORKERS), batch_size=None, num_workers=WORKERS))


def _iter_torch(path: str, shape: list[int], need: int, options: dict | None = None) -> Any:
    import torch
    from torch.utils.data import DataLoader

    ds = ZarrWindows(path, shape, options)
    gen = torch.Generator().manual_seed(0)
    loader: Any = DataLoader(ds, batch_size=BATCH_SIZE, shuffle=True,  # type: ignore[arg-type]
                             num_workers=WORKERS, generator=gen, persistent_workers=True)

    def forever() -> Any:
        while True:
            yield from loader

    return forever()


def _iter_tensorstore(path: str, shape: list[int], options: dict | None) -> Any:
    """The same shuffled windows through TensorStore (1 GB cache pool), a batch's 32 reads
    issued at once."""
    import numpy as np

    from .play_scrub import open_tensorstore

    arr = open_tensorstore(path, TS_CACHE_BYTES, options)
    origins = _windows(shape)
    rng = np.random.default_rng(0)
    w = SAMPLE

    def batches() -> Any:
        while True:
            order = rng.permutation(len(origins))
            for k in range(0, len(order), BATCH_SIZE):
                futures = [arr[t:t + w["time"], y:y + w["y"], x:x + w["x"]].read()
                           for t, y, x in (origins[int(i)] for i in order[k:k + BATCH_SIZE])]
                yield np.stack([f.result() for f in futures])

    return batches()


def _iter_xbatcher(path: str, need: int, options: dict | None = None) -> Any:
    import numpy as np
    import xarray as xr
    import xbatcher

    da = xr.open_zarr(path, chunks=None, storage_options=options)[common.VARIABLE]
    gen = xbatcher.BatchGenerator(da, input_dims=dict(SAMPLE))
    rng = np.random.default_rng(0)

    def batches() -> Any:
        while True:
            order = rng.permutation(len(gen))
            for k in range(0, len(order), BATCH_SIZE):
                yield np.stack([gen[int(i)].values for i in order[k:k + BATCH_SIZE]])

    return batches()


def run_system(system: str, params: dict[str, Any], sampler: runner.RssSampler) -> dict[str, Any]:
    """Pull batches from ``system`` until the count or the time limit; rates and RSS."""
    import importlib

    imports = {"tsexplore": ("tsexplore", "zarr", "dask.array"),
               "tsexplore-torch": ("tsexplore", "zarr", "dask.array", "torch"),
               "torch": ("torch", "zarr"), "xbatcher": ("xbatcher", "xarray", "zarr", "dask.array"),
               "tensorstore": ("tensorstore",)}
    if system not in imports:
        raise ValueError(f"unknown system {system!r}; known: {SYSTEMS}")
    for name in imports[system]:
        importlib.import_module(name)
    sampler.mark_baseline()
    path, need, limit = params["path"], int(params["batches"]), float(params["max_seconds"])
    options = params.get("storage_options")
    t0 = time.perf_counter()
    if system in ("tsexplore", "tsexplore-torch"):
        it = _iter_tsexplore(path, need, system == "tsexplore-torch", options)
    elif system == "torch":
        it = _iter_torch(path, params["shape"], need, options)
    elif system == "tensorstore":
        it = _iter_tensorstore(path, params["shape"], options)
    else:
        it = _iter_xbatcher(path, need, options)
    samples = batches = 0
    first = None
    shape = None
    for batch in it:
        n = _n_samples(batch)
        if first is None:
            first = time.perf_counter() - t0
            shape = list(batch.shape) if hasattr(batch, "shape") else None
            first_samples = n
        samples += n
        batches += 1
        if batches >= need or time.perf_counter() - t0 > limit:
            break
    elapsed = time.perf_counter() - t0
    if first is None:
        raise RuntimeError("the loader yielded no batch")
    steady = ((samples - first_samples) / (elapsed - first)
              if batches > 1 and elapsed > first else None)
    out: dict[str, Any] = {"batches": batches, "samples": samples, "elapsed_s": elapsed,
           "samples_per_s": samples / elapsed, "first_batch_s": first,
           "steady_samples_per_s": steady, "batch_shape": shape,
           "stopped_by": "count" if batches >= need else "time"}
    if system == "tsexplore":
        out.update(common.engine_counters())
    return out


# -- parent side ---------------------------------------------------------------------------------
def main(argv: list[str]) -> int:
    """``python -m benchmarks patches``."""
    p = common.parser("patches", "shuffled 16x64x64 windows in batches of 32", SYSTEMS)
    p.add_argument("--batches", type=int, default=None,
                   help="batches per system (default: tsexplore 200, torch 60, xbatcher 20)")
    p.add_argument("--max-seconds", type=float, default=120.0,
                   help="stop a system after this long and report its rate so far")
    args = common.parse(p, argv)
    systems = common.pick_systems(args.systems, SYSTEMS, args.from_all)
    spec = common.data_spec(args)
    shape = list(spec.shape)
    counts = {s: args.batches or DEFAULT_BATCHES[s] for s in systems}
    served = common.serve(spec.path, args)
    metrics = [*METRICS, *common.ENGINE_METRICS, *common.remote_metrics(served, throughput=True)]
    with served as (url, _server):
        common.log(f"patches: {systems} x {args.repeat} on {url}, batches {counts}, "
                   f"at most {args.max_seconds:.0f} s each")
        runs = runner.run_matrix(
            "patches", systems,
            lambda s, r: {"path": url, "shape": shape, "batches": counts[s],
                          "max_seconds": args.max_seconds,
                          "storage_options": served.storage_options},
            repeat=args.repeat, timeout=max(args.timeout, args.max_seconds + 120),
            store=spec.path, drop_caches=not args.no_drop_caches,
            env_for=lambda s: served.env, before=served.before, after=served.after,
            describe=lambda r: (f"{r['samples_per_s']:.0f} samples/s over {r['batches']} "
                                f"batches, peak RSS {r['peak_rss_mb']:.0f} MB"))
    doc = report.document("patches", args, spec, systems, runs, metrics,
                          primary="samples_per_s", sample=SAMPLE, batch_size=BATCH_SIZE,
                          workers=WORKERS, batch_counts=counts,
                          windows_per_epoch=len(_windows(shape)),
                          headline=["samples_per_s", "steady_samples_per_s", "first_batch_s",
                                    "decoded_ratio", "peak_rss_mb"])
    medians = [report.median_of(doc["summary"], s, "samples_per_s") for s in ("torch", "xbatcher")]
    peers = [v for v in medians if v]
    best = max(peers) if peers else None
    ref = report.median_of(doc["summary"], "tsexplore", "samples_per_s")
    doc["vs_best_peer"] = None if not (best and ref) else ref / best
    if doc["vs_best_peer"] is not None:
        doc["notes"] = [f"tsexplore vs the better peer (torch / xbatcher): "
                        f"{doc['vs_best_peer']:.2f}x the samples/s"]
    doc["targets"] = _link_targets(doc, args) if served.remote else []
    title = (f"patches ({SAMPLE['time']}x{SAMPLE['y']}x{SAMPLE['x']} windows, batches of "
             f"{BATCH_SIZE}, shuffled; {served.describe()}; median of {args.repeat} runs)")
    report.report(doc, metrics, title, args.json_only)
    return report.exit_status(doc, args.check)


def _link_targets(doc: dict[str, Any], args: Any) -> list[dict[str, Any]]:
    """Remote: tsexplore's share of the link, and ahead of TensorStore."""
    return common.link_targets(doc, args, "samples_per_s")
