"""The Open Inference Protocol's gRPC messages (see README.md here).

The service keeps its OIP name, which is what clients call.
"""

SERVICE = "inference.GRPCInferenceService"
MODEL_INFER_METHOD = f"/{SERVICE}/ModelInfer"
