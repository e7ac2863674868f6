"""The model server (``sharedserve serve``): what other packages may use of it.

Inside, one room a job, from the top down (``.importlinter`` keeps the order):

- ``process/``    the process: ``ModelServer`` owns the listeners, the repository manager,
                  metrics and graceful shutdown; ``run`` is ``serve`` below its flags.
- ``wire/``       the wire formats, each translating only: TF Serving's REST and gRPC
                  (``wire/tfserving/``), the Open Inference Protocol's (``wire/oip/``).
- ``repository/`` what the process serves: catalogs of models on disk, the one load path,
                  the registry every request's model is looked up in.
- ``inference/``  the one path of a request: validation, scheduling, batching.
- ``memory/``     model memory: budgets, and paging by least recent use.
- ``version/``    one model version (its source, backend, footprint and state) and the
                  framework backends.
- ``metrics/``, ``settings.py`` and ``protos/`` (generated messages) at the bottom.

This face is pure: settings, a model directory read, a model file's schema, and what a client
needs to build requests. The process (uvicorn, grpc) has a face of its own,
``sharedserve.server.process`` (``ModelServer``, ``run``), which only the CLI imports, so that
``size`` or ``bench`` importing this one pulls in no web server or gRPC.
"""

from __future__ import annotations

from sharedserve.server.inference.batching_policy import parse_batching_parameters
from sharedserve.server.inference.scheduler import (
    SPARE_THREADS,
    model_call_slots,
    model_call_threads,
)
from sharedserve.server.protos.oip import MODEL_INFER_METHOD
from sharedserve.server.protos.oip import grpc_predict_v2_pb2 as oip_pb2
from sharedserve.server.protos.tfserving import PREDICT_METHOD
from sharedserve.server.protos.tfserving import tf_serving_pb2 as tfserving_pb2
from sharedserve.server.repository.directory import (
    MODEL_FILE,
    ModelFile,
    model_schema,
    read_model_file,
)
from sharedserve.server.settings import (
    ADMIN_HEADER,
    ADMIN_KEY_VARIABLE,
    AdminSettings,
    ConnectionSettings,
    GrpcSettings,
    RestSettings,
    ServerSettings,
    ShutdownSettings,
    TlsSettings,
)
from sharedserve.server.version.settings import ModelSettings
from sharedserve.server.version.source import ModelSource, find_model
from sharedserve.server.wire.oip import HEADER_LENGTH
from sharedserve.server.wire.oip.tensors import datatype_of, to_raw
from sharedserve.server.wire.tfserving.tensor_proto import to_tensor_proto

__all__ = [
    "ADMIN_HEADER",
    "ADMIN_KEY_VARIABLE",
    "HEADER_LENGTH",
    "MODEL_FILE",
    "MODEL_INFER_METHOD",
    "PREDICT_METHOD",
    "SPARE_THREADS",
    "AdminSettings",
    "ConnectionSettings",
    "GrpcSettings",
    "ModelFile",
    "ModelSettings",
    "ModelSource",
    "RestSettings",
    "ServerSettings",
    "ShutdownSettings",
    "TlsSettings",
    "datatype_of",
    "find_model",
    "model_call_slots",
    "model_call_threads",
    "model_schema",
    "oip_pb2",
    "parse_batching_parameters",
    "read_model_file",
    "tfserving_pb2",
    "to_raw",
    "to_tensor_proto",
]
