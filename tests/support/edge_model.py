"""Builds the test-only "edge" SavedModel: the request shapes ``tiny`` cannot exercise.

Run as a script (``python edge_model.py OUT``) so TensorFlow never loads into the pytest process.
Signatures:
- ``serving_default``: two inputs (``a`` float32 [-1, 3], ``b`` int64 [-1]) and two outputs
  (``total`` = row sums of a, ``doubled_b`` = 2 b): named row and columnar formats;
- ``strings``: ``text`` string [-1] -> ``length`` int32 [-1] and ``echo_bytes`` string [-1]:
  ``{"b64": ...}`` decoding and encoding;
- ``alloc``: ``n`` int64 [-1] -> ``total`` float32 [-1]: allocates ``n[0]`` floats, so a huge
  ``n`` raises TensorFlow's real ResourceExhaustedError (and a large one takes a while).
"""

import sys

import tensorflow as tf


class Edge(tf.Module):
    @tf.function(
        input_signature=[
            tf.TensorSpec([None, 3], tf.float32, name="a"),
            tf.TensorSpec([None], tf.int64, name="b"),
        ]
    )
    def default(self, a, b):
        return {"total": tf.reduce_sum(a, axis=1), "doubled_b": b * 2}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def strings(self, text):
        return {"length": tf.strings.length(text), "echo_bytes": tf.identity(text)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int64, name="n")])
    def alloc(self, n):
        total = tf.reduce_sum(tf.ones(tf.reshape(n[0], [1]), tf.float32))
        return {"total": tf.fill(tf.shape(n), total)}  # one row per input row: batchable


if __name__ == "__main__":
    module = Edge()
    tf.saved_model.save(
        module,
        sys.argv[1],
        signatures={
            "serving_default": module.default,
            "strings": module.strings,
            "alloc": module.alloc,
        },
    )
