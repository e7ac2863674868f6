"""Scenario d of ``run.py``: SIGTERM to a server under load, with idle keep-alive connections
held, as Kubernetes sends it in a rolling update; how many requests are lost, how long it takes
to exit."""

from __future__ import annotations

import contextlib
import http.client
import re
import select
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import grpc

from sharedserve.server.protos.tfserving import PREDICT_METHOD
from sharedserve.server.protos.tfserving import tf_serving_pb2 as tfs

LOST = (
    "A request is *lost* when its bytes were written on an open connection (REST) or it was "
    "started on a channel (gRPC) and it got no answer: a reset, an end of stream before the "
    "status line, a timeout, a gRPC error other than a refused connection, or any 5xx. A "
    "connection refused (the listener closed: a client or load balancer goes elsewhere) is a "
    "clean refusal, not a loss; each client stops at its first one. In d the clients act as a "
    "Service's proxies do in a rolling update: they start no new request once the endpoints "
    "are removed, 0.8 s after SIGTERM, within the server's 1 s --drain-delay (requests already "
    "sent still count); in e they ignore readiness and keep sending until the server is gone, "
    "so some requests race the listener's close (a connection still in the kernel's accept "
    "queue when it closes is reset): e is recorded, not judged."
)
# When d's clients stop starting requests: the endpoints are removed within the drain delay.
ENDPOINTS_REMOVED_S = 0.8
PREDICT = "/v1/models/tiny:predict"
ROW = b'{"instances": [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]]}'
WAIT_EXIT_S = 90.0  # past Kubernetes' 30 s: how long a server takes when nothing cuts it


class Tally:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.sigterm = threading.Event()

    def add(self, what: str) -> None:
        with self.lock:
            self.counts[what] += 1

    def answered(self) -> None:
        self.add("answered after SIGTERM" if self.sigterm.is_set() else "answered before")


def rest_loop(port: int, tally: Tally, until: Callable[[], float]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    while time.monotonic() < until():
        try:
            conn.request("POST", PREDICT, ROW, {"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
        except ConnectionRefusedError:
            tally.add("refused")
            return
        except (OSError, http.client.HTTPException) as e:
            tally.add(f"lost: REST {type(e).__name__}")
            conn.close()
            continue
        if response.status >= 500:
            tally.add(f"lost: REST {response.status}")
        else:
            tally.answered()
    conn.close()


def grpc_loop(target: str, tally: Tally, until: Callable[[], float]) -> None:
    request = tfs.PredictRequest()
    request.model_spec.name = "tiny"
    request.inputs["x"].dtype = tfs.DT_FLOAT
    request.inputs["x"].tensor_shape.dim.add(size=1)
    request.inputs["x"].tensor_shape.dim.add(size=8)
    request.inputs["x"].float_val.extend([0.5] * 8)
    with grpc.insecure_channel(target) as channel:
        predict = channel.unary_unary(
            PREDICT_METHOD, request_serializer=tfs.PredictRequest.SerializeToString
        )
        while time.monotonic() < until():
            try:
                predict(request, timeout=15)
            except grpc.RpcError as e:
                refused = "failed to connect" in (e.details() or "").lower()
                if e.code() == grpc.StatusCode.UNAVAILABLE and refused:
                    tally.add("refused")
                    return
                tally.add(f"lost: gRPC {e.code().name}")
                continue
            tally.answered()


def idle_connection(port: int, used: bool) -> socket.socket:
    """A keep-alive connection that has had one answer (``used``), or none yet, and sits idle."""
    sock = socket.create_connection(("127.0.0.1", port))
    if used:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.recv(65536)
    return sock


def readiness(port: int) -> str:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/v2/health/ready")
        return str(conn.getresponse().status)
    except ConnectionRefusedError:
        return "refused"
    except (OSError, http.client.HTTPException) as e:
        return type(e).__name__


def sigterm_under_load(
    serving: Callable[..., Any],
    help_text: str,
    *,
    rest_clients: int = 4,
    grpc_clients: int = 4,
    idle: int = 8,
    load_s: float = 3.0,
    ignore_readiness: bool = False,
) -> tuple[str, str, str, bool | None, str]:
    """The row of scenario d (or e, ``ignore_readiness``). ``serving(*flags)`` starts a server;
    ``help_text`` is its ``serve --help``, which says whether it has ``--drain-delay`` and its
    grace's default."""
    drain = "--drain-delay" in help_text
    grace_match = re.search(r"--shutdown-grace.*?\[default: ([0-9.]+)\]", help_text, re.S)
    grace = float(grace_match.group(1)) if grace_match else 30.0  # Kubernetes' default
    flags = ["--drain-delay", "1"] if drain else []
    tally = Tally()
    with serving(*flags) as server:
        held = [idle_connection(server.rest, used=i % 2 == 0) for i in range(idle)]
        channels = [grpc.insecure_channel(f"127.0.0.1:{server.grpc}") for _ in range(2)]
        for channel in channels:  # connected, then idle
            grpc.channel_ready_future(channel).result(timeout=10)
        stop_at = [time.monotonic() + load_s + WAIT_EXIT_S]

        def until() -> float:
            return stop_at[0]

        loops = [
            threading.Thread(target=rest_loop, args=(server.rest, tally, until))
            for _ in range(rest_clients)
        ] + [
            threading.Thread(target=grpc_loop, args=(f"127.0.0.1:{server.grpc}", tally, until))
            for _ in range(grpc_clients)
        ]
        for loop in loops:
            loop.start()
        time.sleep(load_s)
        sent = time.monotonic()
        tally.sigterm.set()
        server.process.send_signal(signal.SIGTERM)
        if not ignore_readiness:
            stop_at[0] = sent + ENDPOINTS_REMOVED_S
        time.sleep(0.2)
        ready = readiness(server.rest)
        closed_after = watch_idle(held, server.process, sent)
        try:
            code = server.process.wait(max(0.0, sent + WAIT_EXIT_S - time.monotonic()))
            exit_s = f"{time.monotonic() - sent:.1f} s, exit code {code}"
        except Exception:
            exit_s, code = f"none within {WAIT_EXIT_S:g} s (killed)", None
            server.process.kill()
        took = time.monotonic() - sent
        for loop in loops:
            loop.join()
        for closable in [*held, *channels]:
            with contextlib.suppress(Exception):
                closable.close()
    counts = tally.counts
    lost = sum(n for what, n in counts.items() if what.startswith("lost"))
    got = ", ".join(f"{what} x{n}" for what, n in sorted(counts.items()))
    clients = (
        "clients ignoring readiness, sending until the server is gone"
        if ignore_readiness
        else f"clients starting no request {ENDPOINTS_REMOVED_S:g} s after SIGTERM on"
    )
    return (
        f"{'e' if ignore_readiness else 'd'}. SIGTERM after {load_s:g} s of {rest_clients} "
        f"REST + {grpc_clients} gRPC predict loops ({clients}), {idle} idle REST connections "
        "(half after an answer, half before a request) and 2 idle gRPC channels held; "
        + ("--drain-delay 1" if drain else "no --drain-delay (the server lacks it)"),
        f"**{lost} lost**; exit {exit_s}; /v2/health/ready 0.2 s after SIGTERM: {ready}; "
        f"idle connections closed by the server after {closed_after}",
        "recorded, not judged"
        if ignore_readiness
        else f"0 lost, exit 0 within the grace ({grace:g} s)",
        None if ignore_readiness else lost == 0 and code == 0 and took <= grace,
        got,
    )


def watch_idle(held: list[socket.socket], process: Any, sent: float) -> str:
    """When the server closed the idle connections (before it exited), in seconds."""
    open_, times = set(held), list[float]()
    while open_ and process.poll() is None and time.monotonic() - sent < WAIT_EXIT_S:
        for sock in select.select(list(open_), [], [], 0.1)[0]:
            with contextlib.suppress(OSError):
                sock.recv(65536)
            open_.discard(sock)
            times.append(time.monotonic() - sent)
    if not times:
        return "none (open until exit)"
    span = f"{min(times):.1f}-{max(times):.1f} s"
    return span + (f", {len(open_)} left open until exit" if open_ else "")
