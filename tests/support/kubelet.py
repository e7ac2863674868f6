"""A kubelet stand-in: the device manager's side of the device plugin API v1beta1, over real
gRPC on real unix sockets.

What it does is what the kubelet's device manager does with a plugin: it serves
``Registration`` on ``<dir>/kubelet.sock`` (after emptying the directory, as a starting kubelet
does); on ``Register`` it checks the version and resource name, answers, and then (not before)
dials ``<dir>/<endpoint>``, asks ``GetDevicePluginOptions`` and opens ``ListAndWatch``, keeping
every response. ``restart()`` is a kubelet restart: the old server dies, leaving its socket
file, and a new one wipes the directory and listens on a new ``kubelet.sock``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc

from sharedserve.allocator.deviceplugin.api import deviceplugin_pb2 as pb
from sharedserve.allocator.deviceplugin.api import deviceplugin_pb2_grpc as pb_grpc

SUPPORTED_VERSIONS = ("v1beta1",)
# The kubelet keeps its allocation checkpoint in the same directory and spares it when it wipes.
CHECKPOINT = "kubelet_internal_checkpoint"


class PluginConnection:
    """One registered plugin as the device manager sees it."""

    def __init__(self, socket_path: Path, request: pb.RegisterRequest) -> None:
        self.request = request
        self.channel = grpc.insecure_channel(f"unix://{socket_path}")
        self.stub = pb_grpc.DevicePluginStub(self.channel)
        self.options: pb.DevicePluginOptions | None = None
        self.responses: list[pb.ListAndWatchResponse] = []
        self.error: BaseException | None = None
        """Set when dialing or the stream failed (not when we cancelled it)."""
        self.ended = threading.Event()
        """Set when the ListAndWatch stream is over, for whatever reason."""
        self.ended_ok = False
        """The plugin ended the stream itself (status OK), as on a clean shutdown."""
        self._changed = threading.Condition()
        self._stream: grpc.Future | None = None
        self._closing = False
        threading.Thread(target=self._run, name="fake-kubelet-plugin", daemon=True).start()

    def _run(self) -> None:
        try:
            grpc.channel_ready_future(self.channel).result(timeout=10)
            self.options = self.stub.GetDevicePluginOptions(pb.Empty(), timeout=10)
            self._stream = self.stub.ListAndWatch(pb.Empty())
            for response in self._stream:
                with self._changed:
                    self.responses.append(response)
                    self._changed.notify_all()
            self.ended_ok = True
        except grpc.RpcError as e:
            if not self._closing:
                self.error = e
        except Exception as e:  # recorded for the test to report, never raised in a thread
            self.error = e
        finally:
            self.ended.set()
            with self._changed:
                self._changed.notify_all()

    def wait_for(
        self,
        predicate: Callable[[pb.ListAndWatchResponse], bool],
        timeout: float = 10,
        after: int = 0,
    ) -> pb.ListAndWatchResponse:
        """The first ListAndWatch response from number ``after`` on (in arrival order) that
        satisfies ``predicate``."""
        deadline = time.monotonic() + timeout
        seen = after
        with self._changed:
            while True:
                for response in self.responses[seen:]:
                    if predicate(response):
                        return response
                seen = len(self.responses)
                left = deadline - time.monotonic()
                if left <= 0 or self.ended.is_set():
                    raise AssertionError(
                        f"no matching ListAndWatch response within {timeout} s "
                        f"({len(self.responses)} received, stream ended: {self.ended.is_set()}, "
                        f"error: {self.error})"
                    )
                self._changed.wait(left)

    def first(self, timeout: float = 10) -> pb.ListAndWatchResponse:
        return self.wait_for(lambda _: True, timeout)

    def close(self) -> None:
        self._closing = True
        if self._stream is not None:
            self._stream.cancel()
        self.channel.close()


class _Registration(pb_grpc.RegistrationServicer):
    def __init__(self, kubelet: FakeKubelet) -> None:
        self._kubelet = kubelet

    def Register(  # noqa: N802
        self, request: pb.RegisterRequest, context: grpc.ServicerContext
    ) -> pb.Empty:
        if request.version not in SUPPORTED_VERSIONS:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported {request.version}")
        if "/" not in request.resource_name or request.resource_name.startswith("kubernetes.io"):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "not an extended resource name")
        self._kubelet._registered(request)
        return pb.Empty()


class FakeKubelet:
    def __init__(self, plugin_dir: Path) -> None:
        self.dir = plugin_dir
        self.socket = plugin_dir / "kubelet.sock"
        self.registrations: list[pb.RegisterRequest] = []
        self.plugins: list[PluginConnection] = []
        """One per registration, in order; the last is the current one."""
        self._server: grpc.Server | None = None
        self._lock = threading.Condition()

    def start(self) -> None:
        for entry in self.dir.iterdir():
            if entry.name != CHECKPOINT:
                entry.unlink()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RegistrationServicer_to_server(_Registration(self), server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server

    def stop(self) -> None:
        """The kubelet dies: its server and streams go, ``kubelet.sock`` stays behind."""
        for plugin in self.plugins:
            plugin.close()
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None
        # grpc unlinks its socket on stop; a killed kubelet leaves it, refusing connections.
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        with socket.socket(socket.AF_UNIX) as dead:
            dead.bind(str(self.socket))

    def restart(self) -> None:
        self.stop()
        self.start()

    def _registered(self, request: pb.RegisterRequest) -> None:
        # Like the device manager, answer Register first and dial the plugin afterwards.
        def connect() -> None:
            plugin = PluginConnection(self.dir / request.endpoint, request)
            with self._lock:
                self.plugins.append(plugin)
                self._lock.notify_all()

        with self._lock:
            self.registrations.append(request)
        threading.Timer(0.01, connect).start()

    def wait_plugins(self, count: int, timeout: float = 15) -> PluginConnection:
        """Wait until ``count`` registrations have been dialled back; the latest connection."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self.plugins) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"{len(self.plugins)} plugin registration(s) within {timeout} s, "
                        f"expected {count}"
                    )
                self._lock.wait(left)
            return self.plugins[-1]

    def close(self) -> None:
        for plugin in self.plugins:
            plugin.close()
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None
