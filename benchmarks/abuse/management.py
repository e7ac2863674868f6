"""Scenarios f, g, i and j of ``run.py``: the management surfaces.

f. the management APIs called without the key, with a wrong one and with it, beside inference;
g. loads and reloads pointing outside the repository (absolute paths, ``..``, symlinks of a
   model, a version and a file), with the key, so that only the roots stand in the way; every
   path the server logged loading from is checked to be inside the repository;
i. load, unload and reload-config churn beside inference on three models that page (a memory
   cap holding two of them);
j. the event loop's gap while grpcio copies a gRPC message at the default limit, and at 60 MB
   with the limit raised.

Each against a fresh ``sharedserve serve --model-repository`` (j: ``--model``) on loopback, its
log kept at INFO (which model it loads from where).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from sharedserve.pack.probe import free_port, model_state
from sharedserve.server.protos.oip import grpc_predict_v2_pb2 as oip
from sharedserve.server.protos.tfserving import PREDICT_METHOD
from sharedserve.server.protos.tfserving import model_management_pb2 as management
from sharedserve.server.protos.tfserving import model_server_config_pb2 as config_pb
from sharedserve.server.protos.tfserving import tf_serving_pb2 as tfs

MIB = 1024 * 1024
ROW = b'{"instances": [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]]}'
HEADER = "sharedserve-admin-key"
KEY = os.urandom(32).hex()
WRONG = os.urandom(32).hex()
RELOAD = "/tensorflow.serving.ModelService/HandleReloadConfigRequest"
OIP_LOAD = "/inference.GRPCInferenceService/RepositoryModelLoad"
OIP_UNLOAD = "/inference.GRPCInferenceService/RepositoryModelUnload"
OIP_INDEX = "/inference.GRPCInferenceService/RepositoryIndex"
# What the server logs as it makes a model version: the directory it reads.
SERVING_FROM = re.compile(r"serving model '([^']*)' version \d+ \(\w+\) from (\S+)")


@dataclass
class Repo:
    process: subprocess.Popen[bytes]
    rest: int
    grpc: int
    log: Path
    root: Path


@contextlib.contextmanager
def repository_server(
    root: Path, work: Path, *flags: str, names: tuple[str, ...]
) -> Iterator[Repo]:
    """``serve --model-repository root`` with the key (a file in ``work``), every model in
    ``names`` AVAILABLE."""
    key_file = work / "admin.key"
    key_file.write_text(KEY + "\n")
    rest, grpc_port = free_port(), free_port()
    command = [sys.executable, "-m", "sharedserve", "serve", "--model-repository", str(root)]
    command += ["--host", "127.0.0.1", "--rest-port", str(rest), "--grpc-port", str(grpc_port)]
    command += ["--admin-key-file", str(key_file), *flags]
    log = work / f"serve-{rest}.log"
    env = os.environ | {"SHAREDSERVE_LOG_LEVEL": "info"}
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=out, cwd=work, env=env)
    served = Repo(process, rest, grpc_port, log, root)
    try:
        deadline = time.monotonic() + 180
        for name in names:
            while model_state(f"http://127.0.0.1:{rest}", name) != "AVAILABLE":
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(f"{name} did not become available:\n{log.read_text()}")
                time.sleep(0.2)
        yield served
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(30)


def rest_call(
    port: int,
    method: str,
    path: str,
    key: str | None,
    body: bytes = b"{}",
    *,
    tls: ssl.SSLContext | None = None,
) -> str:
    """The status of one REST call (https with ``tls``), or the exception's name."""
    headers = {"Content-Type": "application/json"} | ({HEADER: key} if key is not None else {})
    conn = (
        http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        if tls is None
        else http.client.HTTPSConnection("127.0.0.1", port, timeout=120, context=tls)
    )
    try:
        conn.request(method, path, body, headers)
        response = conn.getresponse()
        response.read()
        return str(response.status)
    except OSError as e:
        return type(e).__name__
    finally:
        conn.close()


def grpc_call(channel: grpc.Channel, method: str, request: bytes, key: str | None) -> str:
    metadata = [(HEADER, key)] if key is not None else []
    try:
        channel.unary_unary(method)(request, metadata=metadata, timeout=120)
        return "OK"
    except grpc.RpcError as e:
        return str(e.code().name)


def reload_request(models: dict[str, Path | str]) -> bytes:
    configs = [
        config_pb.ModelConfig(name=name, base_path=str(path), model_platform="tensorflow")
        for name, path in models.items()
    ]
    config = config_pb.ModelServerConfig(
        model_config_list=config_pb.ModelConfigList(config=configs)
    )
    return bytes(management.ReloadConfigRequest(config=config).SerializeToString())


def served(port: int) -> list[str]:
    """The models the repository index lists READY (with the key)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/v2/repository/index", b"{}", {HEADER: KEY})
    rows = json.loads(conn.getresponse().read())
    conn.close()
    return sorted({row["name"] for row in rows if row.get("state") == "READY"})


def inference_loop(port: int, names: list[str], stop: threading.Event, got: Counter[str]) -> None:
    i = 0
    while not stop.is_set():
        name = names[i % len(names)]
        got[rest_call(port, "POST", f"/v1/models/{name}:predict", None, ROW)] += 1
        i += 1


def tally(counts: Counter[str]) -> str:
    return ", ".join(f"{k} x{n}" for k, n in sorted(counts.items()))


def fives(counts: Counter[str]) -> int:
    return sum(n for k, n in counts.items() if k.startswith("5") or k in ("INTERNAL", "UNKNOWN"))


def copy_model(source: Path, to: Path, budget_mib: int | None = None) -> None:
    shutil.copytree(source, to)
    if budget_mib is not None:
        (to / "sharedserve.yaml").write_text(f"gpu_memory_mib: {budget_mib}\n")


Row = tuple[str, str, str, bool | None, str]


def management_access(model: Path, work: Path, seconds: float = 10) -> Row:
    root = work / "f" / "repo"
    copy_model(model, root / "tiny")
    copy_model(model, root / "spare")
    keyless: Counter[str] = Counter()
    keyed: Counter[str] = Counter()
    inference: Counter[str] = Counter()
    with repository_server(root, work / "f", names=("tiny", "spare")) as server:
        before = served(server.rest)
        stop = threading.Event()
        loops = [
            threading.Thread(target=inference_loop, args=(server.rest, ["tiny"], stop, inference))
            for _ in range(2)
        ]
        for loop in loops:
            loop.start()
        empty = reload_request({})  # with the key it would unload every model
        unload = oip.RepositoryModelUnloadRequest(model_name="spare").SerializeToString()
        index = oip.RepositoryIndexRequest().SerializeToString()
        deadline = time.monotonic() + seconds
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc}") as channel:
            while time.monotonic() < deadline:
                for key in (None, WRONG, ""):
                    keyless[rest_call(server.rest, "POST", "/v2/repository/index", key)] += 1
                    path = "/v2/repository/models/spare/unload"
                    keyless[rest_call(server.rest, "POST", path, key)] += 1
                    keyless[
                        rest_call(server.rest, "POST", "/v2/repository/models/x/load", key)
                    ] += 1
                    keyless[grpc_call(channel, RELOAD, empty, key)] += 1
                    keyless[grpc_call(channel, OIP_UNLOAD, unload, key)] += 1
                keyed[rest_call(server.rest, "POST", "/v2/repository/index", KEY)] += 1
                keyed[grpc_call(channel, OIP_INDEX, index, KEY)] += 1
        stop.set()
        for loop in loops:
            loop.join()
        after = served(server.rest)
    refused = keyless["401"] + keyless["UNAUTHENTICATED"]
    answered = keyed["200"] + keyed["OK"]
    calls, ok = sum(keyless.values()), sum(keyed.values())
    failed = sum(inference.values()) - inference["200"]
    met = refused == calls and answered == ok and failed == 0 and before == after
    return (
        f"f. management APIs for {seconds:g} s: REST index/load/unload and gRPC reload-config/"
        "unload with no key, a wrong key and an empty one; index with the key; 2 REST predict "
        "loops beside",
        f"**{refused} of {calls}** keyless calls refused (401 / UNAUTHENTICATED); {answered} of "
        f"{ok} keyed calls answered; inference {sum(inference.values())} requests, "
        f"**{failed} failed**; models READY before {before}, after {after}",
        "every keyless call refused, every keyed one answered, no model changed, 0 failed",
        met,
        f"keyless: {tally(keyless)}; keyed: {tally(keyed)}; inference: {tally(inference)}",
    )


def _symlink(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target, target_is_directory=target.is_dir())


def loaded_from(log: Path) -> list[str]:
    """Every directory the server's log says it made a model version from."""
    return [path for _, path in SERVING_FROM.findall(log.read_text(errors="replace"))]


def outside_roots(model: Path, work: Path, rounds: int = 10) -> Row:
    top = work / "g"
    root, elsewhere = top / "repo", top / "elsewhere" / "tiny"
    copy_model(model, root / "tiny")
    copy_model(model, elsewhere)
    _symlink(root / "out", elsewhere)
    _symlink(root / "vout" / "1", elsewhere / "1")
    copy_model(model, root / "fout")
    (root / "fout" / "1" / "saved_model.pb").unlink()
    _symlink(root / "fout" / "1" / "saved_model.pb", elsewhere / "1" / "saved_model.pb")
    (root / "dots").symlink_to(Path("..") / "elsewhere" / "tiny")
    outcomes: Counter[str] = Counter()
    with repository_server(root, top, names=("tiny",)) as server:
        before = served(server.rest)
        tiny = root / "tiny"
        configs: dict[str, dict[str, Path | str]] = {
            "absolute": {"tiny": tiny, "x": elsewhere},
            "dotdot": {"tiny": tiny, "x": f"{root}/../elsewhere/tiny"},
            "symlink": {"tiny": tiny, "x": root / "out"},
            "parent": {"tiny": tiny, "x": root / ".."},
        }
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc}") as channel:
            for _ in range(rounds):
                for name in ("out", "vout", "fout", "dots"):
                    path = f"/v2/repository/models/{name}/load"
                    outcomes[f"REST load {rest_call(server.rest, 'POST', path, KEY)}"] += 1
                    load = oip.RepositoryModelLoadRequest(model_name=name).SerializeToString()
                    outcomes[f"gRPC load {grpc_call(channel, OIP_LOAD, load, KEY)}"] += 1
                for config in configs.values():
                    status = grpc_call(channel, RELOAD, reload_request(config), KEY)
                    outcomes[f"reload {status}"] += 1
        after = served(server.rest)
        loads = loaded_from(server.log)
        outside = [p for p in loads if not Path(p).resolve().is_relative_to(root.resolve())]
    calls = sum(outcomes.values())
    refused = sum(n for k, n in outcomes.items() if k.endswith(("403", "PERMISSION_DENIED")))
    met = refused == calls and not outside and before == after
    return (
        f"g. loads outside the repository, {rounds} rounds with the key: REST and gRPC loads of "
        "a symlinked model, version and file and a `..` symlink; reload-config to an absolute "
        "path, `..`, a symlink and the repository's parent",
        f"**{refused} of {calls}** refused (403 / PERMISSION_DENIED); of the {len(loads)} model "
        f"versions the server's log shows it loading, from outside the repository: "
        f"**{len(outside)}**; READY before {before}, after {after}",
        "every one refused, 0 loaded from outside, nothing unloaded",
        met,
        tally(outcomes),
    )


def churn(model: Path, work: Path, seconds: float = 40) -> Row:
    top = work / "i"
    root = top / "repo"
    for name in ("a", "b", "c", "spare"):
        copy_model(model, root / name, budget_mib=1)
    inference: Counter[str] = Counter()
    changes: Counter[str] = Counter()
    flags = ("--paging", "lru", "--gpu-memory-mib", "2")
    with repository_server(root, top, *flags, names=("a", "b")) as server:
        stop = threading.Event()
        loops = [
            threading.Thread(
                target=inference_loop, args=(server.rest, ["a", "b", "c"], stop, inference)
            )
            for _ in range(3)
        ]
        for loop in loops:
            loop.start()
        abc: dict[str, Path | str] = {n: root / n for n in ("a", "b", "c")}
        with_spare = reload_request({**abc, "spare": root / "spare"})
        without = reload_request(abc)
        spare = "/v2/repository/models/spare"
        deadline = time.monotonic() + seconds
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc}") as channel:
            while time.monotonic() < deadline:
                changes[f"reload +spare {grpc_call(channel, RELOAD, with_spare, KEY)}"] += 1
                changes[f"unload {rest_call(server.rest, 'POST', f'{spare}/unload', KEY)}"] += 1
                changes[f"load {rest_call(server.rest, 'POST', f'{spare}/load', KEY)}"] += 1
                changes[f"reload -spare {grpc_call(channel, RELOAD, without, KEY)}"] += 1
        stop.set()
        for loop in loops:
            loop.join()
        page_ins = _metric(server.rest, "sharedserve_model_page_ins_total")
    failed = sum(inference.values()) - inference["200"]
    changed_ok = all(k.endswith((" OK", " 200")) for k in changes)
    return (
        f"i. {seconds:g} s of churn (reload-config adding and dropping a model, unload, load) "
        "beside 3 REST predict loops over 3 models that page (each budgeted 1 MiB under a "
        "2 MiB cap, --paging lru)",
        f"inference {sum(inference.values())} requests, **{failed} failed**, 5xx "
        f"{fives(inference) + fives(changes)}; {sum(changes.values())} changes; {page_ins:g} "
        "page-ins",
        "0 failed inference requests, every change answered OK",
        failed == 0 and changed_ok,
        f"inference: {tally(inference)}; changes: {tally(changes)}",
    )


def _metric(port: int, name: str) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


def predict_of(size: int) -> bytes:
    """A PredictRequest of one ``size``-byte tensor_content for a model no server has: grpcio
    receives and copies it whole, the server parses it and answers NOT_FOUND."""
    tensor = tfs.TensorProto(dtype=tfs.DT_FLOAT, tensor_content=bytes(size))
    tensor.tensor_shape.dim.add(size=size // 4)
    request = tfs.PredictRequest(inputs={"x": tensor})
    request.model_spec.name = "no-such-model"
    return bytes(request.SerializeToString())


def grpc_gap(
    serving: Callable[..., Any], probe: Callable[..., None], default_bytes: int, calls: int = 5
) -> Row:
    """The longest REST health-check gap while a gRPC message arrives, at the default limit and
    at 60 MB (the limit raised)."""
    measured = {}
    for size, flags in (
        (default_bytes - 64 * 1024, ()),
        (60_000_000, ("--grpc-max-message-bytes", str(64 * MIB))),
    ):
        message = predict_of(size)
        options = [("grpc.max_send_message_length", 256 * MIB)]
        with (
            serving(*flags) as server,
            grpc.insecure_channel(f"127.0.0.1:{server.grpc}", options) as channel,
        ):
            stop, gaps = threading.Event(), list[float]()
            prober = threading.Thread(target=probe, args=(server.rest, stop, gaps))
            prober.start()
            time.sleep(0.5)
            statuses = Counter(
                grpc_call(channel, PREDICT_METHOD, message, None) for _ in range(calls)
            )
            time.sleep(0.5)
            stop.set()
            prober.join()
        measured[size] = (max(gaps) * 1000, statuses)
    (small, (gap_small, got_small)), (large, (gap_large, got_large)) = measured.items()
    return (
        f"j. gRPC Predict of one tensor_content, {calls} in turn, REST health probed every 5 ms: "
        f"{len(predict_of(small)) / MIB:.1f} MiB (under the default --grpc-max-message-bytes), "
        f"then {large / 1e6:g} MB with the limit raised",
        f"longest health-check gap **{gap_small:.0f} ms** at {small / MIB:.0f} MiB; "
        f"{gap_large:.0f} ms at {large / 1e6:g} MB",
        "under 100 ms at the default",
        gap_small < 100,
        f"{tally(got_small)}; {tally(got_large)}",
    )
