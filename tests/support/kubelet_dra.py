"""A kubelet stand-in for DRA drivers: the plugin watcher and the DRA plugin manager, over real
gRPC on real unix sockets.

What it does is what the kubelet does with a DRA kubelet plugin (pkg/kubelet/pluginmanager and
pkg/kubelet/cm/dra/plugin). The watcher walks the registry directory (subdirectories too, names
starting with ``.`` ignored) and, polling every 50 ms where the kubelet uses inotify, notices
sockets that appear, disappear or are re-created. For each new socket it dials it and calls
``Registration.GetInfo``; if the answer is usable it calls ``NotifyRegistrationStatus(True)``,
else ``(False, error)``. A refused plugin is tried again with the kubelet's backoff (0.5 s,
doubling), as the plugin manager's reconciler does. A removed socket deregisters the plugin; a
re-created one deregisters it and registers it again.

The gRPC service used for NodePrepareResources is the first entry of the plugin's
``supported_versions`` that this kubelet knows, in the plugin's order, as
``validateSupportedServices`` does: a plugin that lists ``v1beta1.DRAPlugin`` first gets v1beta1
even from a kubelet that speaks v1.

Stricter than the kubelet, to catch mistakes early: the driver name must be a DNS subdomain (it
must be one in every ResourceSlice anyway) and the endpoint must be an absolute path of an
existing socket when GetInfo answers (the kubelet only finds out at the first call).

Not played: the connection monitor's GetInfo every 10 s (a plugin must answer GetInfo any time),
the startup wipe of the node's ResourceSlices (``FakeApiServer.wipe_slices`` does it on demand)
and the wipe 30 s after the last plugin of a driver is gone.
"""

from __future__ import annotations

import re
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from sharedserve.allocator.dra.api import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
)
from sharedserve.allocator.dra.api import pluginregistration_pb2 as reg
from sharedserve.allocator.dra.api import pluginregistration_pb2_grpc as reg_grpc

PLUGIN_TYPE = "DRAPlugin"
# servicesSupportedByKubelet in pkg/kubelet/cm/dra/plugin, newest first.
SERVICES: dict[str, tuple[ModuleType, ModuleType]] = {
    "v1.DRAPlugin": (dra_v1_pb2, dra_v1_pb2_grpc),
    "v1beta1.DRAPlugin": (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc),
}
# The kubelet's timeouts (operationexecutor) and the goroutinemap backoff between attempts.
DIAL_TIMEOUT_S = 10.0
GET_INFO_TIMEOUT_S = 1.0
NOTIFY_TIMEOUT_S = 5.0
FIRST_RETRY_S = 0.5
MAX_RETRY_S = 122.0
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

Claims = Sequence[tuple[str, str, str]]
"""(namespace, uid, name) of each claim, as the kubelet sends them."""
PrepareResponse = (
    dra_v1_pb2.NodePrepareResourcesResponse | dra_v1beta1_pb2.NodePrepareResourcesResponse
)
UnprepareResponse = (
    dra_v1_pb2.NodeUnprepareResourcesResponse | dra_v1beta1_pb2.NodeUnprepareResourcesResponse
)


@dataclass(frozen=True)
class Registration:
    """One registration attempt of the plugin watcher, whatever its outcome."""

    socket: Path
    info: reg.PluginInfo | None
    """GetInfo's answer; None when dialing or GetInfo failed (the plugin is then not notified)."""
    registered: bool
    """What NotifyRegistrationStatus told the plugin."""
    error: str = ""
    service: str = ""
    """The gRPC service chosen for prepare calls, e.g. ``v1.DRAPlugin``; empty if refused."""

    @property
    def version(self) -> str:
        """``v1`` or ``v1beta1`` (empty if refused)."""
        return self.service.split(".", 1)[0]

    def describe(self) -> str:
        name = self.info.name if self.info is not None else "?"
        outcome = f"registered ({self.service})" if self.registered else f"refused: {self.error}"
        return f"{self.socket.name} {name}: {outcome}"


@dataclass(frozen=True)
class Deregistration:
    """The plugin's registration socket went away (or was re-created)."""

    socket: Path
    name: str
    endpoint: str


@dataclass
class _Plugin:
    registration: Registration
    channel: grpc.Channel

    def stub(self, service: str) -> Any:
        if service not in SERVICES:
            raise AssertionError(f"unknown DRA service {service!r}, known: {sorted(SERVICES)}")
        return SERVICES[service][1].DRAPluginStub(self.channel)


@dataclass
class _Socket:
    """The watcher's state for one socket path (desired and actual state of the world)."""

    identity: tuple[int, int]
    plugin: _Plugin | None = None
    busy: bool = False
    done: bool = False
    """Registered, or refused in a way the kubelet does not retry."""
    failures: int = 0
    next_try: float = 0.0


@dataclass
class _Instance:
    """One run of the kubelet, from start() to stop()."""

    stop: threading.Event = field(default_factory=threading.Event)
    sockets: dict[Path, _Socket] = field(default_factory=dict)
    thread: threading.Thread | None = None


class FakeDraKubelet:
    def __init__(self, registry_dir: Path, poll_interval: float = 0.05) -> None:
        self.dir = registry_dir
        self.poll_interval = poll_interval
        self.attempts: list[Registration] = []
        """Every registration attempt, across restarts, in order."""
        self.deregistrations: list[Deregistration] = []
        self._changed = threading.Condition()
        self._instance: _Instance | None = None

    @property
    def registrations(self) -> list[Registration]:
        """The successful attempts, across restarts."""
        with self._changed:
            return [a for a in self.attempts if a.registered]

    def start(self) -> None:
        assert self._instance is None, "kubelet already running"
        self.dir.mkdir(parents=True, exist_ok=True)
        instance = _Instance()
        instance.thread = threading.Thread(
            target=self._watch, args=(instance,), name="fake-dra-kubelet", daemon=True
        )
        self._instance = instance
        instance.thread.start()

    def stop(self) -> None:
        """The kubelet dies: watching stops and it forgets every plugin; their sockets stay."""
        instance, self._instance = self._instance, None
        if instance is None:
            return
        instance.stop.set()
        if instance.thread is not None:
            instance.thread.join(timeout=5)
        with self._changed:
            for state in instance.sockets.values():
                if state.plugin is not None:
                    state.plugin.channel.close()
            instance.sockets.clear()

    def restart(self) -> None:
        """A kubelet restart: the new one walks the directory and registers every socket again."""
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()

    def __enter__(self) -> FakeDraKubelet:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- waiting --------------------------------------------------------------------------

    def _wait(self, what: str, ready: Callable[[], Any], timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not (found := ready()):
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = "; ".join(a.describe() for a in self.attempts) or "no attempt"
                    raise AssertionError(
                        f"{what} within {timeout} s; attempts seen: {seen}; "
                        f"deregistrations: {len(self.deregistrations)}"
                    )
                self._changed.wait(left)
            return found

    def wait_registered(self, count: int = 1, timeout: float = 10) -> Registration:
        """Wait for ``count`` successful registrations in all; the latest one."""

        def ready() -> Registration | None:
            done = [a for a in self.attempts if a.registered]
            return done[-1] if len(done) >= count else None

        result: Registration = self._wait(f"not registered {count}x", ready, timeout)
        return result

    def wait_attempts(self, count: int = 1, timeout: float = 10) -> Registration:
        """Wait for ``count`` registration attempts, refused ones included; the latest one."""

        def ready() -> Registration | None:
            return self.attempts[-1] if len(self.attempts) >= count else None

        result: Registration = self._wait(f"fewer than {count} attempt(s)", ready, timeout)
        return result

    def wait_deregistered(self, count: int = 1, timeout: float = 10) -> Deregistration:
        def ready() -> Deregistration | None:
            return self.deregistrations[-1] if len(self.deregistrations) >= count else None

        result: Deregistration = self._wait(f"not deregistered {count}x", ready, timeout)
        return result

    # -- the DRA manager's calls ----------------------------------------------------------

    def _plugin(self, driver: str | None) -> _Plugin:
        with self._changed:
            instance = self._instance
            plugins = [] if instance is None else [s.plugin for s in instance.sockets.values()]
            current = [p for p in plugins if p is not None]
        names = sorted({p.registration.info.name for p in current if p.registration.info})
        assert names, "no DRA driver is registered (kubelet stopped, or the socket is gone?)"
        if driver is None:
            assert len(names) == 1, f"name the driver: registered drivers are {names}"
            driver = names[0]
        mine = [p for p in current if p.registration.info and p.registration.info.name == driver]
        assert mine, f"DRA driver {driver} is not registered (registered: {names})"
        # Like DRAPluginManager.get: the most recently registered plugin of the driver.
        return mine[-1]

    def _call(
        self, method: str, claims: Claims, version: str | None, timeout: float, driver: str | None
    ) -> Any:
        plugin = self._plugin(driver)
        service = plugin.registration.service
        if version is not None:
            service = version if "." in version else f"{version}.DRAPlugin"
        pb = SERVICES[service][0] if service in SERVICES else dra_v1_pb2
        request_type = getattr(pb, f"{method}Request")
        request = request_type(
            claims=[pb.Claim(namespace=ns, uid=uid, name=name) for ns, uid, name in claims]
        )
        return getattr(plugin.stub(service), method)(request, timeout=timeout)

    def prepare(
        self,
        claims: Claims,
        version: str | None = None,
        timeout: float = 10,
        driver: str | None = None,
    ) -> PrepareResponse:
        """NodePrepareResources on the registered plugin (of ``driver``, if several are), over
        the chosen service or ``version`` (``v1``, ``v1beta1``); gRPC errors are raised."""
        response: PrepareResponse = self._call(
            "NodePrepareResources", claims, version, timeout, driver
        )
        return response

    def unprepare(
        self,
        claims: Claims,
        version: str | None = None,
        timeout: float = 10,
        driver: str | None = None,
    ) -> UnprepareResponse:
        response: UnprepareResponse = self._call(
            "NodeUnprepareResources", claims, version, timeout, driver
        )
        return response

    # -- the plugin watcher ---------------------------------------------------------------

    def _watch(self, instance: _Instance) -> None:
        while not instance.stop.is_set():
            self._scan(instance)
            instance.stop.wait(self.poll_interval)

    def _scan(self, instance: _Instance) -> None:
        found = dict(_sockets(self.dir))
        now = time.monotonic()
        with self._changed:
            if instance.stop.is_set():
                return
            # Deregistrations first, as the reconciler does them.
            for path, state in list(instance.sockets.items()):
                if found.get(path) != state.identity and not state.busy:
                    del instance.sockets[path]
                    self._forget(path, state)
            for path, identity in found.items():
                state = instance.sockets.setdefault(path, _Socket(identity))
                if state.done or state.busy or now < state.next_try:
                    continue
                state.busy = True
                threading.Thread(
                    target=self._register,
                    args=(instance, path, state),
                    name="fake-dra-kubelet-register",
                    daemon=True,
                ).start()

    def _forget(self, path: Path, state: _Socket) -> None:
        if state.plugin is None:
            return
        state.plugin.channel.close()
        info = state.plugin.registration.info
        assert info is not None
        self.deregistrations.append(Deregistration(path, info.name, info.endpoint))
        self._changed.notify_all()

    def _register(self, instance: _Instance, path: Path, state: _Socket) -> None:
        attempt, plugin, retry = _attempt(path, instance.stop, self._endpoints(instance))
        with self._changed:
            state.busy = False
            if instance.stop.is_set():
                if plugin is not None:
                    plugin.channel.close()
                return
            if attempt is None:
                return
            self.attempts.append(attempt)
            state.plugin = plugin
            state.done = not retry
            if retry:
                state.failures += 1
                delay = min(FIRST_RETRY_S * 2 ** (state.failures - 1), MAX_RETRY_S)
                state.next_try = time.monotonic() + delay
            self._changed.notify_all()

    def _endpoints(self, instance: _Instance) -> set[tuple[str, str]]:
        with self._changed:
            return {
                (s.plugin.registration.info.name, s.plugin.registration.info.endpoint)
                for s in instance.sockets.values()
                if s.plugin is not None and s.plugin.registration.info is not None
            }


def _sockets(root: Path) -> Iterator[tuple[Path, tuple[int, int]]]:
    """Every unix socket under ``root`` (not below a name starting with ``.``), with an identity
    that changes when it is re-created."""
    try:
        entries = list(root.iterdir())
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue
        try:
            st = entry.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            yield from _sockets(entry)
        elif stat.S_ISSOCK(st.st_mode):
            yield entry, (st.st_ino, st.st_mtime_ns)


def _attempt(
    path: Path, stop: threading.Event, taken: set[tuple[str, str]]
) -> tuple[Registration | None, _Plugin | None, bool]:
    """One RegisterPlugin operation: (the record, the plugin if registered, retry?)."""
    channel = grpc.insecure_channel(f"unix://{path}")
    try:
        stub = reg_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
        try:
            grpc.channel_ready_future(channel).result(timeout=DIAL_TIMEOUT_S)
            info = stub.GetInfo(reg.InfoRequest(), timeout=GET_INFO_TIMEOUT_S)
        except (grpc.FutureTimeoutError, grpc.RpcError) as e:
            # No NotifyRegistrationStatus: the kubelet cannot reach the plugin.
            return Registration(path, None, False, f"dial or GetInfo failed: {e}"), None, True
        if stop.is_set():
            return None, None, False
        error, service = _validate(path, info)
        retry = True
        if not error and (info.name, info.endpoint or str(path)) in taken:
            # DRAPluginManager.add, after the plugin is in the actual state: not retried.
            error = f"endpoint {info.endpoint} already registered for DRA driver plugin {info.name}"
            retry = False
        status = reg.RegistrationStatus(plugin_registered=not error, error=error)
        try:
            stub.NotifyRegistrationStatus(status, timeout=NOTIFY_TIMEOUT_S)
        except grpc.RpcError as e:
            error = error or f"NotifyRegistrationStatus failed: {e}"
        if error:
            return Registration(path, info, False, error), None, retry
        endpoint = info.endpoint or str(path)
        plugin = _Plugin(
            Registration(path, info, True, service=service),
            grpc.insecure_channel(f"unix://{endpoint}"),
        )
        return plugin.registration, plugin, False
    finally:
        channel.close()


def _validate(path: Path, info: reg.PluginInfo) -> tuple[str, str]:
    """(error, chosen service) for a GetInfo answer, as the plugin manager and the DRA handler
    (plus this stand-in's stricter checks) judge it."""
    if info.type != PLUGIN_TYPE:
        return f"no handler registered for plugin type: {info.type} at socket {path}", ""
    if len(info.name) > 253 or not _DNS_SUBDOMAIN.fullmatch(info.name):
        return f"plugin name {info.name!r} is not a DNS subdomain (a DRA driver name)", ""
    endpoint = Path(info.endpoint or path)
    if not endpoint.is_absolute():
        return f"endpoint {info.endpoint!r} is not an absolute path", ""
    try:
        is_socket = stat.S_ISSOCK(endpoint.stat().st_mode)
    except OSError:
        is_socket = False
    if not is_socket:
        return f"endpoint {endpoint} is not an existing unix socket", ""
    if not info.supported_versions:
        return "empty list of supported gRPC services (aka supported versions)", ""
    for service in info.supported_versions:
        if service in SERVICES:
            return "", service
    return (
        f"none of services supported by the plugin ({list(info.supported_versions)}) are "
        f"supported by the kubelet ({list(SERVICES)})",
        "",
    )
