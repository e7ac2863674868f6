"""TensorFlow Serving's gRPC API (PredictionService, ModelService) on grpc.aio.

The services are registered under TF Serving's own names (``tensorflow.serving.PredictionService``
and so on) with sharedserve's wire-compatible messages (``api/tf_serving.proto``), so TF Serving's
client stubs work unchanged and no TensorFlow is needed to serve a TorchScript model. They share
the model, the predict path (batching included) and the error table (``errors.py``'s
``grpc_code``) with REST; nothing here decides a status on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import grpc
import numpy as np

from sharedserve.errors import (
    ConfigError,
    InvalidInput,
    PermissionDenied,
    SharedServeError,
    quoted,
)
from sharedserve.server.inference import InferencePath, SignatureOf
from sharedserve.server.metrics import RequestTally
from sharedserve.server.protos.tfserving import MODEL_SERVICE, PREDICTION_SERVICE
from sharedserve.server.protos.tfserving import model_management_pb2 as management
from sharedserve.server.protos.tfserving import tf_serving_pb2 as pb
from sharedserve.server.repository import ModelManager, ModelRegistry, model_config_entries
from sharedserve.server.version import ModelVersion, Signature, TensorSpec, VersionState
from sharedserve.server.wire import proto_slices as wire
from sharedserve.server.wire.body_bytes import DecodingBytes
from sharedserve.server.wire.grpc_calls import (
    OFF_LOOP_BYTES,
    ElementCount,
    guard,
    predict,
    unary,
    unimplemented,
)
from sharedserve.server.wire.tfserving.status import state_of
from sharedserve.server.wire.tfserving.tensor_proto import (
    DTYPE_ENUM,
    from_tensor_proto,
    read_tensor_proto,
    to_tensor_proto,
)

__all__ = ["handlers"]

# GetModelMetadata packs the signatures into an Any named for TF Serving's message, which is what
# clients unpack it as.
_SIGNATURE_DEF_MAP_URL = "type.googleapis.com/tensorflow.serving.SignatureDefMap"


def _version(spec: Any) -> int | None:
    return int(spec.version.value) if spec.HasField("version") else None


def _fill_tensor_info(info: Any, spec: TensorSpec) -> None:
    info.name, info.dtype = spec.tensor_name, DTYPE_ENUM[spec.dtype]
    info.tensor_shape.unknown_rank = spec.shape is None
    for d in spec.shape or ():
        info.tensor_shape.dim.add(size=d)


# A Predict as a large one is read (``split_predict``): the request without its inputs, and
# the inputs by name.
Split = tuple[Any, Mapping[str, Any]]


def split_predict(limit: int | None) -> Callable[[bytes], Split]:
    """Reads a large PredictRequest in slices (``server.wire``), its input tensors apart: a map
    entry cannot be merged a slice at a time (a later entry of the same key replaces it), and
    a parsed 30M-value tensor copied into its request would be one long C call again. Each
    tensor's values are counted as they are walked (``read_tensor_proto``, ``limit``: the
    element limit); a key sent twice: the last entry wins, as protobuf has it."""

    def split(data: bytes) -> Split:
        outer = wire.Slicer(pb.PredictRequest(), data, "PredictRequest")
        inputs: dict[str, Any] = {}
        for field in wire.fields(data, 0, len(data), "PredictRequest"):
            if field.number == 2 and field.wire == 2:
                for value, end in wire.each(field):
                    key, tensor = _entry(data, value, end, limit)
                    inputs[key] = tensor
            else:
                outer.add(field.begin, field.end, field.repeats)
        outer.flush()
        return outer.message, inputs

    return split


def _entry(data: bytes, start: int, end: int, limit: int | None) -> tuple[str, Any]:
    """One ``inputs`` map entry: its key (field 1) and its TensorProto (field 2, merged if
    sent more than once); fields of another number or wire type are dropped, as upb does."""
    what = "PredictRequest.InputsEntry"
    key, values = b"", []
    for field in wire.fields(data, start, end, what):
        if field.number == 1 and field.wire == 2:
            key = data[field.value : field.end]  # the last, when sent more than once
        elif field.number == 2 and field.wire == 2:
            values.extend(wire.each(field))
    try:
        name = key.decode()
    except UnicodeDecodeError:
        raise InvalidInput(f"the request is not a valid {what}: its key is not UTF-8") from None
    tensor = pb.TensorProto()
    for value, stop in values:
        read_tensor_proto(data, value, stop, f"input {quoted(name)}", limit=limit, into=tensor)
    return name, tensor


class _ProtoPredict:
    """A gRPC Predict for the predictor. Protobuf decodes a small message in microseconds, on
    the loop; a large one (``heavy``) is decoded in a worker thread."""

    def __init__(
        self,
        model: ModelVersion,
        max_elements: int | None,
        request: Any,
        inputs: Mapping[str, Any],
        size: int,
    ) -> None:
        self._name, self._version, self._max_elements = model.name, model.version, max_elements
        self._request, self._inputs = request, inputs
        self.heavy = size > OFF_LOOP_BYTES
        self._signature_name = ""

    def decode(self, signature_of: SignatureOf) -> tuple[Signature, dict[str, np.ndarray]]:
        request = self._request
        signature = signature_of(request.model_spec.signature_name or None)
        unknown = set(request.output_filter) - set(signature.outputs)
        if unknown:
            raise InvalidInput(f"output_filter names unknown outputs {quoted(sorted(unknown))}")
        self._signature_name = signature.name
        # Names and sizes before values (check_inputs judges them again, after): a map of a
        # million unknown inputs, or values past the element limit, are refused unread.
        unknown = set(self._inputs) - set(signature.inputs)
        if unknown:
            raise InvalidInput(
                f"unknown input {quoted(min(unknown))}; the signature's inputs are "
                f"{', '.join(sorted(signature.inputs))}"
            )
        count = ElementCount(self._max_elements).add
        inputs = {
            k: from_tensor_proto(v, f"input {quoted(k)}", count) for k, v in self._inputs.items()
        }
        return signature, inputs

    def encode(self, outputs: dict[str, np.ndarray]) -> Any:
        response = pb.PredictResponse()
        _fill_spec(response.model_spec, self._name, self._version, self._signature_name)
        wanted = self._request.output_filter
        for key, value in outputs.items():
            if not wanted or key in wanted:
                to_tensor_proto(value, response.outputs[key])
        return response


def _lookup(registry: ModelRegistry, spec: Any) -> ModelVersion:
    """The version a ModelSpec names: by number, by label (a oneof with it), else the latest."""
    return registry.lookup(spec.name, _version(spec), spec.version_label or None)


def _fill_spec(spec: Any, name: str, version: int, signature_name: str) -> None:
    spec.name = name
    spec.version.value = version
    spec.signature_name = signature_name


class PredictionServicer:
    def __init__(self, registry: ModelRegistry, path: InferencePath) -> None:
        self._registry, self._path = registry, path

    async def Predict(  # noqa: N802
        self, message: Any | Split, size: int, context: grpc.aio.ServicerContext
    ) -> Any:
        # A small message is parsed whole (FromString), a large one split (split_predict).
        request, inputs = message if isinstance(message, tuple) else (message, message.inputs)
        tally = RequestTally(self._registry.metrics)

        async def call() -> Any:
            model = _lookup(self._registry, request.model_spec)
            tally.routed(self._registry.metrics.for_model(model.name))
            limit = self._path.max_elements
            return await self._path.infer(model, _ProtoPredict(model, limit, request, inputs, size))

        return await guard(context, "Predict", call, (tally, "grpc"))

    async def GetModelMetadata(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        async def call() -> Any:
            model = _lookup(self._registry, request.model_spec)
            fields = list(request.metadata_field)
            if fields != ["signature_def"]:
                raise InvalidInput(
                    "metadata_field must be ['signature_def'] (the only one offered), got "
                    f"{quoted(fields)}"
                )
            signature_map = pb.SignatureDefMap()
            for name, sig in model.signatures().items():  # NotReady until it serves
                signature_def = signature_map.signature_def[name]
                signature_def.method_name = sig.method_name
                for key, spec in sig.inputs.items():
                    _fill_tensor_info(signature_def.inputs[key], spec)
                for key, spec in sig.outputs.items():
                    _fill_tensor_info(signature_def.outputs[key], spec)
            response = pb.GetModelMetadataResponse()
            _fill_spec(response.model_spec, model.name, model.version, "")
            packed = response.metadata["signature_def"]
            packed.type_url = _SIGNATURE_DEF_MAP_URL
            packed.value = signature_map.SerializeToString()
            return response

        return await guard(context, "GetModelMetadata", call)


# tensorflow.error.Code, as TF Serving's StatusProto carries it.
_ERROR_CODE = {"INVALID_ARGUMENT": 3, "NOT_FOUND": 5, "RESOURCE_EXHAUSTED": 8, "UNAVAILABLE": 14}


class ModelServicer:
    def __init__(self, registry: ModelRegistry, manager: ModelManager) -> None:
        self._registry, self._manager = registry, manager

    async def HandleReloadConfigRequest(  # noqa: N802
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> Any:
        """Serve what the request's ModelServerConfig names, and nothing else. As TF Serving
        does, a config that cannot be served is an error status, a model that fails to load
        is the response's status (the others converge all the same). A base path outside the
        roots is PERMISSION_DENIED, and nothing changes."""

        async def call() -> Any:
            self._manager.require_changeable()
            try:
                entries = model_config_entries(request.config, "the reload request's config")
            except ConfigError as e:  # the client's config, not the server's: its error
                raise InvalidInput(e.message) from None
            response = management.ReloadConfigResponse()
            try:
                await self._manager.converge(entries)
            except PermissionDenied:
                raise  # refused whole, nothing changed: the call's status, not a model's
            except SharedServeError as e:
                code = _ERROR_CODE.get(e.grpc_code, 2)  # 2: UNKNOWN
                response.status.error_code = code  # type: ignore[assignment]
                response.status.error_message = e.message
            return response

        return await guard(context, "HandleReloadConfigRequest", call)

    async def GetModelStatus(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        async def call() -> Any:
            spec = request.model_spec
            response = pb.GetModelStatusResponse()
            # Without a version or label: every version of the model, as TF Serving lists them.
            versions = self._registry.statuses(spec.name, _version(spec), spec.version_label)
            stopping = self._registry.stopping
            for model in versions:
                state = pb.ModelVersionStatus.State.Value(state_of(model, stopping))
                entry = response.model_version_status.add(version=model.version, state=state)
                if model.state is VersionState.FAILED:
                    entry.status.error_message = model.error or ""
                    entry.status.error_code = 2  # tensorflow.error.Code: OK is 0, UNKNOWN 2
                else:
                    entry.status.error_code = 0
            return response

        return await guard(context, "GetModelStatus", call)


def handlers(
    registry: ModelRegistry, path: InferencePath, decoding: DecodingBytes, manager: ModelManager
) -> tuple[grpc.GenericRpcHandler, ...]:
    """Both services under TF Serving's names; the path's element limit bounds a large
    message's tensors as it is read, before its model is known; ``manager`` applies a reloaded
    model config.

    Methods sharedserve does not offer answer UNIMPLEMENTED without parsing their requests.
    """
    prediction, models = PredictionServicer(registry, path), ModelServicer(registry, manager)
    max_elements = path.max_elements
    return (
        grpc.method_handlers_generic_handler(
            PREDICTION_SERVICE,
            {
                "Predict": predict(
                    "Predict",
                    prediction.Predict,
                    pb.PredictRequest,
                    pb.PredictResponse,
                    counted=(registry.metrics, "grpc"),
                    decoding=decoding,
                    parse_large=split_predict(max_elements),
                ),
                "GetModelMetadata": unary(
                    "GetModelMetadata",
                    prediction.GetModelMetadata,
                    pb.GetModelMetadataRequest,
                    pb.GetModelMetadataResponse,
                ),
                **{
                    m: unimplemented(m, "use Predict")
                    for m in ("Classify", "Regress", "MultiInference")
                },
            },
        ),
        grpc.method_handlers_generic_handler(
            MODEL_SERVICE,
            {
                "GetModelStatus": unary(
                    "GetModelStatus",
                    models.GetModelStatus,
                    pb.GetModelStatusRequest,
                    pb.GetModelStatusResponse,
                ),
                "HandleReloadConfigRequest": unary(
                    "HandleReloadConfigRequest",
                    models.HandleReloadConfigRequest,
                    management.ReloadConfigRequest,
                    management.ReloadConfigResponse,
                ),
            },
        ),
    )
