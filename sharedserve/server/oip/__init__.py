"""The Open Inference Protocol (KServe "V2"): REST with the binary tensor extension, and gRPC
(``inference.GRPCInferenceService``), over the shared inference path (``server/predictor``)."""
