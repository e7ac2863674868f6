"""The Open Inference Protocol's gRPC API (``inference.GRPCInferenceService``) on grpc.aio.

Registered under the OIP's service name with sharedserve's wire-compatible messages
(``api/grpc_predict_v2.proto``), on the same server and port as TF Serving's services, so
Triton's and KServe's client stubs work unchanged. ModelInfer goes through the shared predictor
(validator, batcher, caps) and is counted under protocol ``oip-grpc``. Inputs may come typed
(``contents``) or raw (``raw_input_contents``, one per input, all or none); outputs always go
raw, as Triton sends them and its client reads them.
"""

from __future__ import annotations

import math
from typing import Any

import grpc
import numpy as np

from sharedserve.errors import InvalidInput, quoted
from sharedserve.server.inference import InferencePath, SignatureOf, check_rank
from sharedserve.server.metrics import RequestTally
from sharedserve.server.protos.oip import SERVICE
from sharedserve.server.protos.oip import grpc_predict_v2_pb2 as pb
from sharedserve.server.repository import ModelManager, ModelRegistry
from sharedserve.server.version import ModelVersion, Signature, parse_version
from sharedserve.server.wire.body_bytes import DecodingBytes
from sharedserve.server.wire.grpc_calls import (
    OFF_LOOP_BYTES,
    ElementCount,
    guard,
    predict,
    unary,
)
from sharedserve.server.wire.oip import tensors
from sharedserve.server.wire.oip.grpc_split import Input, Split, split_infer
from sharedserve.server.wire.oip.metadata import index_rows, model_metadata, server_metadata

__all__ = ["handlers"]


def _parameter(parameters: Any, key: str) -> str | None:
    if key not in parameters:
        return None
    parameter = parameters[key]
    if parameter.WhichOneof("parameter_choice") != "string_param":
        raise InvalidInput(f"parameter {key!r} must be a string_param")
    return str(parameter.string_param)


class _Infer:
    """A ModelInfer for the inference path. Protobuf decodes a small message in microseconds, on
    the loop; a large one (``heavy``) is decoded in a worker thread."""

    def __init__(
        self,
        model: ModelVersion,
        split: Split,
        size: int,
        max_elements: int | None,
    ) -> None:
        self._name, self._version = model.name, model.version
        self._request, self._inputs = split
        self.heavy = size > OFF_LOOP_BYTES
        self._count = ElementCount(max_elements).add

    def decode(self, signature_of: SignatureOf) -> tuple[Signature, dict[str, np.ndarray]]:
        request = self._request
        signature = signature_of(_parameter(request.parameters, "signature_name"))
        unknown = sorted({o.name for o in request.outputs} - set(signature.outputs))
        if unknown:
            raise InvalidInput(
                f"unknown requested output {quoted(unknown[0])}; the model's outputs are "
                f"{', '.join(sorted(signature.outputs))}"
            )
        raw = request.raw_input_contents
        if raw and len(raw) != len(self._inputs):
            raise InvalidInput(
                f"raw_input_contents has {len(raw)} entries for {len(self._inputs)} inputs: "
                "send every input raw, or none"
            )
        arrays: dict[str, np.ndarray] = {}
        for i, (tensor, contents) in enumerate(self._inputs):
            # The rank before the list: decoding runs on the event loop, and a 4 MB message of
            # a million dimensions took 0.3 s of it to list and check.
            check_rank(f"input {quoted(tensor.name)}: 'shape'", len(tensor.shape))
            name, datatype, shape = tensors.declared_input(
                signature, arrays, tensor.name, tensor.datatype, list(tensor.shape)
            )
            self._count(math.prod(shape))
            if raw:
                if contents is not None:
                    raise InvalidInput(f"input {name!r} has both contents and raw_input_contents")
                arrays[name] = tensors.from_raw(name, datatype, shape, raw[i])
            else:
                typed = pb.InferTensorContents() if contents is None else contents
                _count_contents(name, datatype, shape, typed)
                arrays[name] = tensors.from_contents(name, datatype, shape, typed)
        return signature, arrays

    def encode(self, outputs: dict[str, np.ndarray]) -> Any:
        request = self._request
        response = pb.ModelInferResponse(
            model_name=self._name, model_version=str(self._version), id=request.id
        )
        names = [o.name for o in request.outputs] or list(outputs)
        for name in names:
            array = outputs[name]
            response.outputs.add(
                name=name, datatype=tensors.datatype_of(array), shape=list(array.shape)
            )
            response.raw_output_contents.append(tensors.to_raw(array))
        return response


def _count_contents(name: str, datatype: str, shape: tuple[int, ...], contents: Any) -> None:
    """InvalidInput, as ``tensors.from_contents`` words it, when the typed contents hold other
    than the shape's elements: counted (len is the field's own count) before one is read, since
    8 MiB of empty ``bytes_contents`` are 4M Python objects to make."""
    field = tensors.CONTENTS_FIELD.get(datatype)
    if field is None:
        return  # from_contents says why it is not sent typed
    count, size = len(getattr(contents, field)), math.prod(shape)
    if count != size:
        raise InvalidInput(
            f"input {name!r}: {count} values in {field} for shape {list(shape)} ({size} elements)"
        )


def _inputs(request: Any) -> list[Input]:
    return [(t, t.contents if t.HasField("contents") else None) for t in request.inputs]


def _repository_parameters(request: Any) -> None:
    """Triton's load parameters (a config or files to load instead of the repository's) are
    not offered: InvalidInput, not a load that silently ignores them. Unload's
    ``unload_dependents`` is accepted: no model here has dependents."""
    for key in request.parameters:
        if key != "unload_dependents":
            raise InvalidInput(
                f"load parameter {quoted(key)} is not supported: models load as the model "
                "config or repository has them"
            )


class _Servicer:
    def __init__(self, registry: ModelRegistry, path: InferencePath, manager: ModelManager) -> None:
        self._registry, self._path, self._manager = registry, path, manager

    async def repository_index(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async def call() -> Any:
            entries = await self._manager.index()
            rows = index_rows(entries, self._registry.stopping, ready_only=request.ready)
            return pb.RepositoryIndexResponse(
                models=[pb.RepositoryIndexResponse.ModelIndex(**row) for row in rows]
            )

        return await guard(context, "RepositoryIndex", call)

    async def repository_load(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async def call() -> Any:
            _repository_parameters(request)
            await self._manager.load(request.model_name)
            return pb.RepositoryModelLoadResponse()

        return await guard(context, "RepositoryModelLoad", call)

    async def repository_unload(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async def call() -> Any:
            _repository_parameters(request)
            await self._manager.unload(request.model_name)
            return pb.RepositoryModelUnloadResponse()

        return await guard(context, "RepositoryModelUnload", call)

    async def server_live(self, _request: Any, context: grpc.aio.ServicerContext) -> Any:
        return pb.ServerLiveResponse(live=True)

    async def server_ready(self, _request: Any, context: grpc.aio.ServicerContext) -> Any:
        return pb.ServerReadyResponse(ready=self._registry.ready)

    async def model_ready(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async def call() -> Any:
            model = self._registry.lookup(request.name, parse_version(request.version))
            return pb.ModelReadyResponse(ready=self._registry.is_ready(model))

        return await guard(context, "ModelReady", call)

    async def server_metadata(self, _request: Any, context: grpc.aio.ServicerContext) -> Any:
        return pb.ServerMetadataResponse(**server_metadata())

    async def model_metadata(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async def call() -> Any:
            model = self._registry.lookup(request.name, parse_version(request.version))
            versions = self._registry.served().get(request.name, [])
            return pb.ModelMetadataResponse(**model_metadata(model, versions))

        return await guard(context, "ModelMetadata", call)

    async def model_infer(
        self, message: Any | Split, size: int, context: grpc.aio.ServicerContext
    ) -> Any:
        # A small message is parsed whole (FromString), a large one split (split_infer).
        split = message if isinstance(message, tuple) else (message, _inputs(message))
        request = split[0]
        tally = RequestTally(self._registry.metrics)

        async def call() -> Any:
            version = parse_version(request.model_version)
            model = self._registry.lookup(request.model_name, version)
            tally.routed(self._registry.metrics.for_model(model.name))
            infer = _Infer(model, split, size, self._path.max_elements)
            return await self._path.infer(model, infer)

        return await guard(context, "ModelInfer", call, (tally, "oip-grpc"))


def handlers(
    registry: ModelRegistry, path: InferencePath, decoding: DecodingBytes, manager: ModelManager
) -> tuple[grpc.GenericRpcHandler, ...]:
    """The service under its OIP name, with Triton's model repository calls (``manager``);
    the path's element limit bounds a large message's tensors as it is read, before its model
    is known."""
    servicer = _Servicer(registry, path, manager)
    max_elements = path.max_elements
    methods = {
        "ServerLive": (servicer.server_live, pb.ServerLiveRequest, pb.ServerLiveResponse),
        "ServerReady": (servicer.server_ready, pb.ServerReadyRequest, pb.ServerReadyResponse),
        "ModelReady": (servicer.model_ready, pb.ModelReadyRequest, pb.ModelReadyResponse),
        "ServerMetadata": (
            servicer.server_metadata,
            pb.ServerMetadataRequest,
            pb.ServerMetadataResponse,
        ),
        "ModelMetadata": (
            servicer.model_metadata,
            pb.ModelMetadataRequest,
            pb.ModelMetadataResponse,
        ),
        "RepositoryIndex": (
            servicer.repository_index,
            pb.RepositoryIndexRequest,
            pb.RepositoryIndexResponse,
        ),
        "RepositoryModelLoad": (
            servicer.repository_load,
            pb.RepositoryModelLoadRequest,
            pb.RepositoryModelLoadResponse,
        ),
        "RepositoryModelUnload": (
            servicer.repository_unload,
            pb.RepositoryModelUnloadRequest,
            pb.RepositoryModelUnloadResponse,
        ),
    }
    table = {name: unary(name, *spec) for name, spec in methods.items()}
    table["ModelInfer"] = predict(
        "ModelInfer",
        servicer.model_infer,
        pb.ModelInferRequest,
        pb.ModelInferResponse,
        counted=(registry.metrics, "oip-grpc"),
        decoding=decoding,
        parse_large=split_infer(max_elements),
    )
    return (grpc.method_handlers_generic_handler(SERVICE, table),)
