"""TensorFlow: a :class:`Batches` as a ``tf.data.Dataset`` with an exact output signature."""

from __future__ import annotations

from typing import Any

from ..errors import missing_dependency


def _tf() -> Any:
    try:
        import tensorflow as tf
    except ImportError:
        raise missing_dependency("tensorflow", "tf", "Batches.tf()") from None
    return tf


def output_signature(batches: Any, tf: Any) -> Any:
    """``tf.TensorSpec`` (or a dict of them) describing one batch."""
    lead = batches.batch_size if batches.drop_last else None
    specs = {
        v.name: tf.TensorSpec((lead, *batches._shape_of(v)), tf.as_dtype(v.dtype), name=v.name)
        for v in batches.variables
    }
    if batches.single:
        return next(iter(specs.values()))
    if batches.return_index:
        specs["index"] = tf.TensorSpec((lead, len(batches.dims)), tf.int64, name="index")
    return specs


def make_tf_dataset(batches: Any) -> Any:
    """``tf.data.Dataset.from_generator`` over the batches; every pass is a new epoch."""
    tf = _tf()
    if batches.backend != "numpy":
        from ..errors import ConfigError

        raise ConfigError("Batches.tf() needs backend='numpy' (TensorFlow copies to its devices)")

    def generator() -> Any:
        yield from batches

    dataset = tf.data.Dataset.from_generator(generator, output_signature=output_signature(batches, tf))
    # the number of batches is known: Keras then shows progress and never "runs out of data"
    return dataset.apply(tf.data.experimental.assert_cardinality(len(batches)))
