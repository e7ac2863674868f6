"""Keras architectures with random weights (``weights=None``), saved as TF Serving SavedModels.

Saved through a ``tf.Module`` with an explicit ``serving_default`` so the input and output
names are ours (``images`` / ``probabilities``), not Keras' auto-generated ones, and stay stable
across Keras versions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sharedserve.framework_output import framework_needed, framework_startup
from sharedserve.models.spec import ExampleModelSpec

__all__ = ["save_saved_model"]


def _keras_model(spec: ExampleModelSpec) -> Any:
    import keras

    if spec.name == "tiny":
        inputs = keras.Input(shape=spec.input_shape, name=spec.input_name)
        hidden = keras.layers.Dense(16, activation="relu")(inputs)
        outputs = keras.layers.Dense(4, activation="softmax")(hidden)
        return keras.Model(inputs, outputs, name="tiny")
    applications = {
        "mobilenet_v2": keras.applications.MobileNetV2,
        "resnet50": keras.applications.ResNet50,
        "inception_v3": keras.applications.InceptionV3,
    }
    return applications[spec.name](weights=None, input_shape=spec.input_shape, classes=1000)


def save_saved_model(spec: ExampleModelSpec, path: Path, *, seed: int = 0) -> None:
    with framework_needed("tensorflow"), framework_startup():
        import keras
        import tensorflow as tf

        # Device discovery, where a host without a GPU gets cuInit's failure, goes here too.
        tf.config.list_physical_devices("GPU")
    keras.utils.set_random_seed(seed)
    model = _keras_model(spec)
    signature = tf.TensorSpec((None, *spec.input_shape), tf.float32, name=spec.input_name)

    class Serving(tf.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        @tf.function(input_signature=[signature])  # type: ignore[untyped-decorator]
        def serve(self, x: Any) -> dict[str, Any]:
            return {spec.output_name: self.model(x, training=False)}

    module = Serving()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
