"""The TensorFlow adapter: a tf.data.Dataset with the right signature, same windows as NumPy."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import tsexplore as tse
from tsexplore.errors import MissingDependencyError


@pytest.fixture(scope="module")
def tf():
    """TensorFlow, imported by the tests that use it (not at collection: importing it costs
    every pytest-xdist worker ~17 s of CPU); those tests share one worker's group."""
    return pytest.importorskip("tensorflow")


uses_tf = pytest.mark.xdist_group("tf")


@pytest.mark.slow
@uses_tf
def test_tf_dataset_with_prefetch_yields_the_numpy_windows(small_cube, tf):
    ds = tse.open_dataset(small_cube)
    kw = dict(sample={"time": 4, "y": 32, "x": 32}, batch_size=12, seed=7, return_index=True)
    expected = [(tuple(i), x) for b in tse.batches(ds["temp"], **kw) for i, x in zip(b["index"].tolist(), b["temp"])]
    tfds = tse.batches(ds["temp"], **kw).tf()
    spec = tfds.element_spec
    assert spec["temp"].shape.as_list() == [None, 4, 32, 32] and spec["temp"].dtype == tf.float32
    assert spec["index"].shape.as_list() == [None, 3] and spec["index"].dtype == tf.int64
    got = []
    for batch in tfds.prefetch(tf.data.AUTOTUNE):
        for i, x in zip(batch["index"].numpy().tolist(), batch["temp"].numpy()):
            got.append((tuple(i), x))
    assert [i for i, _ in got] == [i for i, _ in expected] and len(got) == 128
    for (_, a), (_, b) in zip(got, expected):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:`shuffle=True` was passed:UserWarning")
@uses_tf
def test_tf_single_array_drop_last_signature_and_fit(small_cube, tf):
    ds = tse.open_dataset(small_cube)
    b = tse.batches(ds["temp"], sample={"time": 1, "y": 16, "x": 16}, batch_size=32, drop_last=True, squeeze=True)
    tfds = b.tf()
    assert tfds.element_spec.shape.as_list() == [32, 16, 16]
    assert int(tfds.cardinality()) == len(b) == 2048 // 32
    pairs = tfds.map(lambda x: ((x - 15.0) / 10.0, tf.reduce_mean((x - 15.0) / 10.0, axis=(1, 2))))
    model = tf.keras.Sequential([tf.keras.Input((16, 16)), tf.keras.layers.Flatten(), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.Adam(1e-3), loss="mse")
    history = model.fit(pairs.prefetch(tf.data.AUTOTUNE), epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["loss"]).all()


def test_missing_tensorflow_names_the_extra(small_cube, monkeypatch):
    ds = tse.open_dataset(small_cube)
    b = tse.batches(ds["temp"], sample={"time": 4})
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    with pytest.raises(MissingDependencyError, match=r"tsexplore\[tf\]"):
        b.tf()
