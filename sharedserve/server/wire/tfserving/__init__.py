"""TensorFlow Serving's REST and gRPC APIs over the shared inference path (``server/predictor``)."""
