"""One prepared request per target and protocol, sent again and again by the load generator.

Imported only by ``loadgen.process`` (its process is monkey-patched by gevent when Locust is
imported): the HTTP client is geventhttpclient's, and gRPC is switched to gevent's I/O before a
channel is made. The request is built once from the model's own metadata (``payload``), so
sending costs the load generator nothing but the transport. A target whose REST URL is
``https://`` is spoken to with TLS on both protocols (``pack.targets``), verified by its
``tls_ca_file`` and showing its client certificate where it has one.
"""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import Any

from geventhttpclient import HTTPClient
from geventhttpclient.url import URL

from sharedserve.bench.payload import (
    oip_rest_request,
    oip_tensors,
    random_inputs,
    rest_body,
    signature_inputs,
)
from sharedserve.pack import client_tls

__all__ = ["Sender"]


class Sender:
    """Sends a target's prepared request over ``protocol`` (``config.PROTOCOLS``)."""

    def __init__(
        self, target: dict[str, Any], protocol: str, concurrency: int, seed: int, timeout_s: float
    ) -> None:
        self.name = target["name"]
        self._timeout_s = timeout_s
        self._tls = _client_tls(target)
        tls: dict[str, Any] = {}
        if self._tls is not None:
            context = self._tls
            tls["ssl_context_factory"] = lambda **_: context
        metadata_client = HTTPClient.from_url(URL(target["rest"]), network_timeout=30, **tls)
        try:
            response = metadata_client.get(f"/v1/models/{target['model']}/metadata")
            metadata = json.loads(response.read())
        finally:
            metadata_client.close()
        arrays = random_inputs(signature_inputs(metadata), seed)
        self._grpc = protocol in ("grpc", "oip-grpc")
        if protocol == "grpc":
            self._init_grpc(target, arrays)
        elif protocol == "oip-grpc":
            self._init_oip_grpc(target, arrays)
        else:
            if protocol == "oip-rest":
                self._path = f"/v2/models/{target['model']}/infer"
                self._body, self._headers = oip_rest_request(arrays)
            else:
                self._path = f"/v1/models/{target['model']}:predict"
                self._body = rest_body(arrays)
                self._headers = {"Content-Type": "application/json"}
            self._http = HTTPClient.from_url(
                URL(target["rest"]),
                concurrency=concurrency,
                network_timeout=timeout_s,
                connection_timeout=timeout_s,
                **tls,
            )

    def _init_grpc(self, target: dict[str, Any], arrays: dict[str, Any]) -> None:
        from sharedserve.server import PREDICT_METHOD, to_tensor_proto
        from sharedserve.server import tfserving_pb2 as pb

        request = pb.PredictRequest()
        request.model_spec.name = target["model"]
        for name, array in arrays.items():
            to_tensor_proto(array, request.inputs[name])
        self._call(target, PREDICT_METHOD, request, pb.PredictResponse)

    def _init_oip_grpc(self, target: dict[str, Any], arrays: dict[str, Any]) -> None:
        from sharedserve.server import MODEL_INFER_METHOD
        from sharedserve.server import oip_pb2 as pb

        request = pb.ModelInferRequest(model_name=target["model"])
        for name, datatype, shape, raw in oip_tensors(arrays):  # raw, as Triton's client sends
            request.inputs.add(name=name, datatype=datatype, shape=shape)
            request.raw_input_contents.append(raw)
        self._call(target, MODEL_INFER_METHOD, request, pb.ModelInferResponse)

    def _call(self, target: dict[str, Any], method: str, request: Any, response: Any) -> None:
        import grpc
        import grpc.experimental.gevent

        # gRPC's own threads would block gevent's loop; this makes its I/O cooperative.
        grpc.experimental.gevent.init_gevent()
        self._request = request
        if self._tls is None:
            channel = grpc.insecure_channel(target["grpc"])
        else:
            files = [target.get(f"tls_{name}_file") for name in ("ca", "key", "cert")]
            pem = [None if f is None else Path(f).read_bytes() for f in files]
            channel = grpc.secure_channel(target["grpc"], grpc.ssl_channel_credentials(*pem))
        self._predict = channel.unary_unary(
            method,
            request_serializer=type(request).SerializeToString,
            response_deserializer=response.FromString,
        )

    def send(self) -> tuple[Exception | None, int]:
        """(None, bytes answered) on success, or (the error, bytes answered)."""
        try:
            if self._grpc:
                reply = self._predict(self._request, timeout=self._timeout_s)
                return None, reply.ByteSize()
            response = self._http.post(self._path, self._body, self._headers)
            body = response.read()
            if response.status_code != 200:
                return RuntimeError(f"HTTP {response.status_code}: {body[:200]!r}"), len(body)
            return None, len(body)
        except Exception as e:  # any transport failure is an error of this request, not ours
            return e, 0


def _client_tls(target: dict[str, Any]) -> ssl.SSLContext | None:
    """The TLS context of an https target (gevent's: this process is patched)."""
    if not target["rest"].startswith("https://"):
        return None
    files = (target.get(f"tls_{name}_file") for name in ("ca", "cert", "key"))
    return client_tls(*files)
