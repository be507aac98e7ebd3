"""The dask.distributed path: chunk ranges run on workers, partials merge on the client.

Every task carries the (picklable) source and a range of positions in the plan's order; the
worker streams those chunks through *its own* engine (reading the store directly, with its
own cache and prefetch), folds them into one state per output block, and returns the states
with a snapshot of its engine's statistics. The client merges the states into the result and
folds each worker's newest snapshot into ``tse.stats()`` (``Stats.merge_remote``).
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from ..engine import current_engine, get_engine
from ..engine.stats import StatsSnapshot
from ..errors import ConfigError, missing_dependency
from .feed import Feed
from .job import Progress, ReductionCancelledError
from .ops import Op, State
from .plan import ReducePlan

#: how often the client checks for cancellation, and refreshes the workers' statistics
POLL_SECONDS = 0.1
STATS_SECONDS = 1.0


def _worker_task(
    feed: Feed, plan: ReducePlan, op: Op, backend: str, start: int, stop: int
) -> tuple[dict[Any, State], int, int, str, StatsSnapshot]:
    """Runs on a dask worker: reduce positions ``start..stop`` through the worker's engine."""
    from .feed import read_locally
    from .gpu import make_backend
    from .stream import accumulate_blocks

    source = feed.source
    chunks = None if feed.through_engine else read_locally(source, plan.order(start, stop))
    be = make_backend(backend, source.chunk_nbytes())
    try:
        blocks, nchunks, nbytes = accumulate_blocks(
            source, plan, op, be, start=start, stop=stop, chunks=chunks
        )
    finally:
        be.close()
    return blocks, nchunks, nbytes, _worker_name(), get_engine().snapshot()


def _worker_name() -> str:
    try:
        from distributed import get_worker

        worker = get_worker()
        return f"dask-worker-{worker.name}"
    except (ImportError, ValueError):  # not inside a worker (e.g. the synchronous scheduler)
        import os

        return f"pid-{os.getpid()}"


def _worker_snapshot() -> StatsSnapshot | None:
    """This worker's engine statistics (None when no engine ever started here)."""
    engine = current_engine()
    return None if engine is None else engine.snapshot()


def _worker_names(client: Any) -> dict[str, str]:
    try:
        info = client.scheduler_info(n_workers=-1)
    except TypeError:  # older distributed: no n_workers argument
        info = client.scheduler_info()
    return {addr: str(w.get("name", addr)) for addr, w in info.get("workers", {}).items()}


class RemoteStats:
    """Folds worker snapshots into the local engine's statistics, newest per worker."""

    def __init__(self) -> None:
        self._seen: dict[str, float] = {}

    def merge(self, name: str, snap: StatsSnapshot) -> None:
        if snap.time < self._seen.get(name, float("-inf")):
            return  # an older snapshot that arrived late
        self._seen[name] = snap.time
        get_engine().stats.merge_remote(name, snap)


def check_client(client: Any) -> Any:
    try:
        from distributed import Client
    except ImportError as exc:
        raise missing_dependency("distributed", "distributed", "client=") from exc
    if not isinstance(client, Client):
        raise ConfigError(
            f"client must be a dask.distributed.Client, got {type(client).__name__}; "
            "leave client=None to reduce in this process"
        )
    if client.status not in ("running", "newly-created"):
        raise ConfigError(f"the dask client is {client.status!r}, not running")
    return client


def run_distributed(
    client: Any,
    feed: Feed,
    plan: ReducePlan,
    op: Op,
    backend: str,
    *,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    tasks_per_worker: int = 4,
) -> State:
    """Reduce ``plan`` on ``client``'s workers and return the merged state (on the host)."""
    import numpy as np

    check_client(client)
    nworkers = max(1, len(client.nthreads()))
    ranges = plan.split(nworkers * tasks_per_worker)
    tag = uuid.uuid4().hex[:8]
    [src] = client.scatter([feed], broadcast=True, hash=False)
    futures = [
        client.submit(
            _worker_task,
            src,
            plan,
            op,
            backend,
            a,
            b,
            key=f"tsexplore-reduce-{tag}-{i}",
            pure=False,
        )
        for i, (a, b) in enumerate(ranges)
    ]
    acc = op.empty(plan.out_shape, np)
    remote = RemoteStats()
    pending = set(futures)
    arrived = threading.Event()
    for fut in futures:
        fut.add_done_callback(lambda _f: arrived.set())
    polled = time.monotonic()
    try:
        while pending:
            done = {f for f in pending if f.done()}
            if not done:
                arrived.wait(POLL_SECONDS)
                arrived.clear()
            pending -= done
            if cancel is not None and cancel.is_set():
                raise ReductionCancelledError("the reduction was cancelled; no result was produced")
            for fut in done:
                blocks, nchunks, nbytes, worker, snap = fut.result()
                for kb, state in blocks.items():
                    op.merge_into(acc, plan.region(kb), state, np)
                remote.merge(worker, snap)
                if progress is not None:
                    progress.advance(nchunks, nbytes)
            if pending and time.monotonic() - polled > STATS_SECONDS:
                _gather_stats(client, remote)  # keep tse.stats() (and the panel) moving
                polled = time.monotonic()
        _gather_stats(client, remote)
    finally:
        client.cancel(futures + [src])
    return acc


def _gather_stats(client: Any, remote: RemoteStats) -> None:
    """The newest snapshot of every worker's engine, folded into ``tse.stats()``."""
    try:
        snaps = client.run(_worker_snapshot, wait=True)
    except Exception:  # noqa: BLE001 - statistics never fail a reduction
        return
    names = _worker_names(client)
    for address, snap in snaps.items():
        if snap is not None:
            remote.merge(f"dask-worker-{names.get(address, address)}", snap)
