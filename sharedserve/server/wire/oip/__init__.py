"""The Open Inference Protocol (KServe "V2"): REST with the binary tensor extension, and gRPC
(``inference.GRPCInferenceService``), over the shared inference path (``server/predictor``)."""

#: The binary tensor extension's header: how many leading bytes of a body are its JSON.
HEADER_LENGTH = "inference-header-content-length"  # HTTP header names are case-insensitive
