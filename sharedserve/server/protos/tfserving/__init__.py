"""TF Serving's gRPC API: sharedserve's wire-compatible messages (see README.md here).

The services keep TF Serving's names, which are what clients call.
"""

PREDICTION_SERVICE = "tensorflow.serving.PredictionService"
MODEL_SERVICE = "tensorflow.serving.ModelService"
PREDICT_METHOD = f"/{PREDICTION_SERVICE}/Predict"
