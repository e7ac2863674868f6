"""The wire formats, each translating between its bytes and the one inference path, and
nothing else: TF Serving's REST and gRPC APIs (``tfserving/``), the Open Inference Protocol's
(``oip/``), and what they share: request bodies' bytes (``body_bytes.py``), HTTP and gRPC
plumbing (``http_io.py``, ``grpc_calls.py``), JSON arrays (``json_values.py``,
``json_arrays.py``; a large body's parsed in a worker process, ``decode_pool.py``), large
protobuf messages read in slices (``proto_slices.py``) and the OpenAPI document's parts
(``openapi_parts.py``)."""

from sharedserve.server.wire.body_bytes import DECODE_WAIT_S, ArrivingBytes, DecodingBytes
from sharedserve.server.wire.decode_pool import DecodePool, decode_workers

__all__ = ["DECODE_WAIT_S", "ArrivingBytes", "DecodePool", "DecodingBytes", "decode_workers"]
