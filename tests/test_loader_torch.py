"""The PyTorch adapter: DataLoader workers read disjoint shards that cover every window."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import zarr

import tsexplore as tse
from tsexplore.errors import MissingDependencyError

torch = pytest.importorskip("torch")

SAMPLE = {"time": 4, "y": 32, "x": 32}


@pytest.fixture(scope="module")
def truth(small_cube) -> np.ndarray:
    return zarr.open_array(str(small_cube / "temp"), mode="r")[:]


def check_epoch(batches, truth, n_windows):
    starts = []
    for batch in batches:
        assert isinstance(batch["temp"], torch.Tensor) and batch["temp"].dtype == torch.float32
        for x, idx in zip(batch["temp"].numpy(), batch["index"].tolist()):
            t, y, xx = idx
            np.testing.assert_array_equal(x, truth[t : t + 4, y : y + 32, xx : xx + 32])
            starts.append(tuple(idx))
    assert len(starts) == len(set(starts)) == n_windows
    return starts


@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true:UserWarning")
def test_two_workers_cover_every_window_once_with_pinned_memory(small_cube, truth):
    ds = tse.open_dataset(small_cube)
    b = tse.batches(ds["temp"], sample=SAMPLE, batch_size=10, return_index=True)
    dataset = b.torch(num_workers=2)
    assert isinstance(dataset, torch.utils.data.IterableDataset)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2, pin_memory=True)
    got = list(loader)
    assert len(got) == len(dataset) == len(loader)
    if torch.cuda.is_available():
        assert all(batch["temp"].is_pinned() for batch in got)
    check_epoch(got, truth, 128)
    # the shards the workers read are disjoint sets of blocks (so no chunk is decoded twice)
    shards = [set(b.plan(0, s, 2).blocks.tolist()) for s in range(2)]
    assert not shards[0] & shards[1] and len(shards[0] | shards[1]) == b.grid.n_blocks


def test_in_process_iteration_matches_the_numpy_order(small_cube, truth):
    ds = tse.open_dataset(small_cube)
    kw = dict(sample=SAMPLE, batch_size=16, seed=5, return_index=True)
    numpy_order = [tuple(i) for batch in tse.batches(ds["temp"], **kw) for i in batch["index"].tolist()]
    loader = torch.utils.data.DataLoader(tse.batches(ds["temp"], **kw).torch(), batch_size=None)
    starts = check_epoch(loader, truth, 128)
    assert starts == numpy_order


@pytest.mark.slow
def test_spawned_worker_recreates_its_engine(small_cube, truth):
    ds = tse.open_dataset(small_cube)
    b = tse.batches(ds["temp"], sample={"time": 8, "y": 64, "x": 64}, batch_size=4, return_index=True)
    loader = torch.utils.data.DataLoader(
        b.torch(num_workers=1), batch_size=None, num_workers=1, multiprocessing_context="spawn"
    )
    starts = []
    for batch in loader:
        for x, idx in zip(batch["temp"].numpy(), batch["index"].tolist()):
            t, y, xx = idx
            np.testing.assert_array_equal(x, truth[t : t + 8, y : y + 64, xx : xx + 64])
            starts.append(tuple(idx))
    assert sorted(starts) == sorted({(t, y, x) for t in (0, 8, 16, 24) for y in (0, 64) for x in (0, 64)})


@pytest.mark.slow
def test_tiny_training_loop(small_cube):
    ds = tse.open_dataset(small_cube)
    b = tse.batches(ds["temp"], sample={"time": 1, "y": 32, "x": 32}, batch_size=16, squeeze=True)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(32 * 32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    losses = []
    for _ in range(2):
        for x in torch.utils.data.DataLoader(b.torch(), batch_size=None):
            target = x.mean(dim=(1, 2))[:, None]
            loss = torch.nn.functional.mse_loss(model((x - 15) / 10), (target - 15) / 10)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    assert len(losses) == 2 * len(b.torch()) and np.isfinite(losses).all()


def test_missing_torch_names_the_extra(small_cube, monkeypatch):
    ds = tse.open_dataset(small_cube)
    b = tse.batches(ds["temp"], sample=SAMPLE)
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingDependencyError, match=r"tsexplore\[torch\]"):
        b.torch()
