"""PyTorch: a :class:`Batches` as an ``IterableDataset`` whose workers read disjoint shards.

Use it with ``DataLoader(ds, batch_size=None, num_workers=N, pin_memory=...)``: the dataset
already yields whole batches. Each worker process gets its own engine (``get_engine`` starts
a fresh one after a fork, and a spawned worker starts from scratch) with ``1/N`` of the cache
budget, and reads only the blocks of its shard, so decode work is not multiplied by N.
"""

from __future__ import annotations

from typing import Any

from ..errors import missing_dependency


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise missing_dependency("torch", "torch", "Batches.torch()") from None
    return torch


def _to_tensor(torch: Any, value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _to_tensor(torch, v) for k, v in value.items()}
    if type(value).__module__.startswith("cupy"):
        return torch.as_tensor(value, device="cuda")
    return torch.from_numpy(value)


def make_torch_dataset(batches: Any, num_workers: int | None = None) -> Any:
    """Build the ``IterableDataset`` (the class is defined once torch is imported)."""
    torch = _torch()
    cls = _dataset_class(torch)
    return cls(batches, num_workers)


_CLASS: Any = None


def _dataset_class(torch: Any) -> Any:
    global _CLASS
    if _CLASS is not None:
        return _CLASS

    class TorchBatches(torch.utils.data.IterableDataset):  # type: ignore[name-defined,misc]
        """Batches of a :class:`~tsexplore.loader.Batches` as torch tensors."""

        def __init__(self, batches: Any, num_workers: int | None = None) -> None:
            super().__init__()
            self.batches = batches
            self.num_workers = num_workers

        def __iter__(self) -> Any:
            from .. import config
            from ..engine import get_engine, set_cache_bytes

            info = torch.utils.data.get_worker_info()
            b = self.batches
            start, b.epoch = b.epoch, b.epoch + b.epochs
            epochs = range(start, start + b.epochs)
            if info is None:
                shard, nshards = 0, 1
            else:
                shard, nshards = info.id, info.num_workers
                # this worker's share of the budget, so all workers together stay within it
                set_cache_bytes(max(1, config.get().cache_bytes // nshards))
                get_engine()
            for batch in b.iter_shard(shard, nshards, epochs):
                yield _to_tensor(torch, batch)

        def __len__(self) -> int:
            b = self.batches
            return b.epochs * b.batches_per_epoch(max(1, self.num_workers or 1))

        def set_epoch(self, epoch: int) -> None:
            """Start the next pass at ``epoch`` (call before each epoch with worker processes)."""
            self.batches.set_epoch(epoch)

        def __repr__(self) -> str:
            return f"TorchBatches({self.batches!r})"

    TorchBatches.__module__ = __name__
    TorchBatches.__qualname__ = "TorchBatches"
    globals()["TorchBatches"] = TorchBatches
    _CLASS = TorchBatches
    return TorchBatches


def __getattr__(name: str) -> Any:
    # lets pickle (spawned workers) find TorchBatches: defining it imports torch
    if name == "TorchBatches":
        return _dataset_class(_torch())
    raise AttributeError(name)
