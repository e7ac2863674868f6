"""Large gRPC messages against a real server: decoded within the decoding budget, refused before
their typed values become Python objects, and let go of when refused.

One ``edge`` server with small limits: 8 MiB messages, a 1 MiB decoding budget (so every large
message holds all of it), and batches that wait 2 s for company (so a predict holds the budget
for a while, in plain sight of the batch metrics).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from sharedserve.server.protos.oip import grpc_predict_v2_pb2 as oip
from sharedserve.server.protos.tfserving import tf_serving_pb2 as tf
from tests.support.servers import Server, serving

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow]

MIB = 1 << 20
PREDICT = "/tensorflow.serving.PredictionService/Predict"
INFER = "/inference.GRPCInferenceService/ModelInfer"
LIVE = "/inference.GRPCInferenceService/ServerLive"
STRINGS = 4_000_000  # empty strings: 2 bytes each on the wire, a 8 MB message
ROWS = 100_000  # rows of edge's default signature: a 2 MB message, twice the budget


@pytest.fixture(scope="module")
def server(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    limits = ["--max-body-bytes", str(8 * MIB), "--max-decoding-bytes", str(MIB)]
    batching = ["--enable-batching", "--batch-timeout-micros", "2000000"]
    log = tmp_path_factory.mktemp("logs") / "grpc-decoding.log"
    args = [*limits, *batching, "--max-batch-size", str(4 * ROWS)]
    yield from serving(models_dir / "edge", log, args)


def tf_strings() -> bytes:
    """A Predict of edge's ``strings`` signature: 4M empty ``string_val`` for 8 declared."""
    request = tf.PredictRequest()
    request.model_spec.name, request.model_spec.signature_name = "edge", "strings"
    text = request.inputs["text"]
    text.dtype = tf.DT_STRING
    text.tensor_shape.dim.add(size=8)
    text.string_val.extend([b""] * STRINGS)
    return bytes(request.SerializeToString())


def oip_bytes() -> bytes:
    """The same through the Open Inference Protocol: 4M empty ``bytes_contents``."""
    request = oip.ModelInferRequest(model_name="edge")
    request.parameters["signature_name"].string_param = "strings"
    text = request.inputs.add(name="text", datatype="BYTES", shape=[8])
    text.contents.bytes_contents.extend([b""] * STRINGS)
    return bytes(request.SerializeToString())


def rows(n: int) -> bytes:
    """A valid Predict of edge's default signature with ``n`` rows, sent as tensor_content."""
    request = tf.PredictRequest()
    request.model_spec.name = "edge"
    for name, array in (("a", np.ones((n, 3), np.float32)), ("b", np.arange(n))):
        proto = request.inputs[name]
        proto.dtype = tf.DT_FLOAT if name == "a" else tf.DT_INT64
        proto.tensor_content = array.tobytes()
        for size in array.shape:
            proto.tensor_shape.dim.add(size=size)
    return bytes(request.SerializeToString())


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status)[1]) / 1024  # type: ignore[index]


def metric(server: Server, name: str) -> float:
    """A metric's value; 0 for one not yet shown (a histogram before its first batch)."""
    text = server.client.get("/metrics").text
    match = re.search(rf'^{name}{{model="edge"}} (\S+)$', text, re.M)
    return float(match[1]) if match else 0.0


def code(future: grpc.Future) -> grpc.StatusCode:
    error = future.exception(timeout=120)
    return grpc.StatusCode.OK if error is None else error.code()


def test_huge_typed_fields_are_refused_while_others_answer_and_let_go_of(server: Server) -> None:
    messages = {PREDICT: tf_strings(), INFER: oip_bytes()}
    assert all(len(m) < 8 * MIB for m in messages.values())
    with (
        grpc.insecure_channel(server.grpc_target) as channel,
        grpc.insecure_channel(server.grpc_target) as other,
    ):
        live = other.unary_unary(LIVE)  # raw bytes both ways: b"" is an empty message

        def refuse_each() -> None:
            for path, message in messages.items():
                future = channel.unary_unary(path).future(message, timeout=120)
                # While it is in flight, REST and another channel are still served.
                assert server.client.get("/v2/health/live").status_code == 200
                assert oip.ServerLiveResponse.FromString(live(b"", timeout=120)).live
                assert code(future) is grpc.StatusCode.INVALID_ARGUMENT, future.exception()
                assert "values" in future.exception().details()  # counted, not a parse error

        refuse_each()  # the allocator's arenas and grpc's buffers grow to their working size
        baseline = rss_mib(server.process.pid)
        for _ in range(4):
            refuse_each()
            # Each refusal kept ~150 MiB (its message and 4M-object arrays) until a full garbage
            # collection, which a served model's frozen heap makes rare: +330 MiB a round.
            grown = rss_mib(server.process.pid) - baseline
            assert grown < 150, f"RSS grew {grown:.0f} MiB over refused 8 MB messages"
    assert server.process.poll() is None


def test_predicts_over_the_decoding_budget_take_turns(server: Server) -> None:
    """A 2 MB predict holds the whole 1 MiB budget until answered, so a second one waits (or is
    refused RESOURCE_EXHAUSTED if its wait is too long) and cannot join the first one's batch."""
    batches = metric(server, "sharedserve_batch_size_count")
    with grpc.insecure_channel(server.grpc_target) as channel:
        predict = channel.unary_unary(PREDICT)
        first = predict.future(rows(ROWS), timeout=120)
        deadline = time.monotonic() + 60
        while metric(server, "sharedserve_queue_depth") < 1:  # the first waits for company
            assert time.monotonic() < deadline and not first.done(), first.exception()
            time.sleep(0.02)
        second = predict.future(rows(ROWS), timeout=120)
        assert code(first) is grpc.StatusCode.OK
        second_code = code(second)
    assert second_code in {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}
    # Both in one batch of 2 x ROWS rows is what ignoring the budget gives.
    ran = metric(server, "sharedserve_batch_size_count") - batches
    assert ran == (2 if second_code is grpc.StatusCode.OK else 1)


def test_huge_typed_fields_are_refused_as_they_are_read_and_large_ones_answered(
    server: Server,
) -> None:
    """Values past the declared shape are refused as the message is walked, the rest unread:
    the truncated tail these messages end with is never met (it was, when the whole message was
    parsed before a value was counted: a parse error). A large message the walk reads whole is
    answered as a small one is."""
    cut = b"\x0a\xff"  # a field whose length never ends
    with grpc.insecure_channel(server.grpc_target) as channel:
        for path, message in ((PREDICT, tf_strings()), (INFER, oip_bytes())):
            with pytest.raises(grpc.RpcError) as refused:
                channel.unary_unary(path)(message + cut, timeout=120)
            assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert "at least" in refused.value.details(), refused.value.details()

        words = [b"ab", b"", b"xyz"] * 30_000  # 270 KB: over OFF_LOOP_BYTES
        request = tf.PredictRequest()
        request.model_spec.name, request.model_spec.signature_name = "edge", "strings"
        text = request.inputs["text"]
        text.dtype = tf.DT_STRING
        text.tensor_shape.dim.add(size=len(words))
        text.string_val.extend(words)
        reply = tf.PredictResponse.FromString(
            channel.unary_unary(PREDICT)(request.SerializeToString(), timeout=120)
        )
        lengths = np.frombuffer(reply.outputs["length"].tensor_content, np.int32)
        assert lengths.tolist() == [len(w) for w in words]

        infer = oip.ModelInferRequest(model_name="edge")
        infer.parameters["signature_name"].string_param = "strings"
        infer.inputs.add(name="text", datatype="BYTES", shape=[len(words)])
        infer.inputs[0].contents.bytes_contents.extend(words)
        infer.outputs.add(name="length")
        answer = oip.ModelInferResponse.FromString(
            channel.unary_unary(INFER)(infer.SerializeToString(), timeout=120)
        )
        assert np.frombuffer(answer.raw_output_contents[0], np.int32).tolist() == lengths.tolist()
