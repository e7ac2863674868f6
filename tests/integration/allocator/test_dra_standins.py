"""The DRA stand-ins themselves: the fake API server against the real ``kubernetes`` client, and
the kubelet stand-in against a tiny plugin served here over real unix sockets."""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pydantic
import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from sharedserve.allocator.dra.api import dra_v1_pb2, dra_v1_pb2_grpc
from sharedserve.allocator.dra.api import pluginregistration_pb2 as reg
from sharedserve.allocator.dra.api import pluginregistration_pb2_grpc as reg_grpc
from tests.support.apiserver import TOKEN, FakeApiServer, allocated_claim
from tests.support.kubelet_dra import FakeDraKubelet

pytestmark = pytest.mark.timeout(30)

DRIVER = "gpu.sharedserve.io"
SHARE = "5f0c1a2b-2222-4000-8000-0000000000c1"
CLAIM_UID = "5f0c1a2b-3333-4000-8000-0000000000d1"


def a_slice(
    slice_name: str = "node-1-gpus",
    node: str = "node-1",
    spec: dict[str, Any] | None = None,
    **device: Any,
) -> dict[str, Any]:
    """A valid slice of one shareable GPU, but for ``device`` fields and ``spec`` fields."""
    gpu = {
        "name": "gpu-0",
        "allowMultipleAllocations": True,
        "attributes": {"model": {"string": "Tesla T4"}},
        "capacity": {
            "memory": {
                "value": "15Gi",
                "requestPolicy": {"default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi"}},
            }
        },
    }
    base = {"driver": DRIVER, "nodeName": node}
    base["pool"] = {"name": node, "generation": 1, "resourceSliceCount": 1}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name},
        "spec": base | {"devices": [gpu | device]} | (spec or {}),
    }


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


@pytest.fixture
def resource(api: FakeApiServer, tmp_path: Path) -> Iterator[client.ResourceV1Api]:
    # The kubeconfig loader of load_kube_config, without replacing the process-wide default.
    api_client = config.new_client_from_config(
        config_file=str(api.write_kubeconfig(tmp_path / "kc"))
    )
    yield client.ResourceV1Api(api_client)
    api_client.close()


def status_of(error: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(error.body)
    return body


def test_the_client_creates_replaces_and_deletes_a_slice(
    api: FakeApiServer, resource: client.ResourceV1Api
) -> None:
    created = resource.create_resource_slice(client.V1ResourceSlice.from_dict(a_slice()))
    assert created.metadata.generation == 1 and created.metadata.uid
    version = created.metadata.resource_version

    changed = a_slice()
    changed["spec"]["devices"][0]["attributes"] = {"model": {"string": "A100"}}
    changed["metadata"]["resourceVersion"] = version
    replaced = resource.replace_resource_slice("node-1-gpus", changed)
    assert replaced.metadata.generation == 2
    assert int(replaced.metadata.resource_version) > int(version)

    # A stale resourceVersion is a conflict; none at all is an unconditional update.
    with pytest.raises(ApiException) as stale:
        resource.replace_resource_slice("node-1-gpus", changed)
    assert stale.value.status == 409 and status_of(stale.value)["reason"] == "Conflict"
    del changed["metadata"]["resourceVersion"]
    again = resource.replace_resource_slice("node-1-gpus", changed)
    assert again.metadata.resource_version == replaced.metadata.resource_version  # no change

    assert resource.delete_resource_slice("node-1-gpus").metadata.name == "node-1-gpus"
    with pytest.raises(ApiException) as gone:
        resource.read_resource_slice("node-1-gpus")
    assert gone.value.status == 404 and api.slices == {}
    with pytest.raises(ApiException) as absent:
        resource.replace_resource_slice("node-1-gpus", changed)
    assert absent.value.status == 404


def test_a_second_create_is_409_already_exists(resource: client.ResourceV1Api) -> None:
    resource.create_resource_slice(a_slice())
    with pytest.raises(ApiException) as duplicate:
        resource.create_resource_slice(a_slice())
    assert duplicate.value.status == 409
    assert status_of(duplicate.value)["reason"] == "AlreadyExists"


def test_dict_bodies_work_and_unknown_fields_never_leave_the_client(
    api: FakeApiServer, resource: client.ResourceV1Api
) -> None:
    resource.create_resource_slice(a_slice())  # a dict, in the API's camelCase
    assert api.slices["node-1-gpus"]["spec"]["devices"][0]["capacity"]["memory"]["value"] == "15Gi"
    # The client's pydantic models forbid unknown fields in a dict body ...
    with pytest.raises(pydantic.ValidationError, match="Extra inputs are not permitted"):
        resource.create_resource_slice(a_slice("other", typo=1))
    # ... while from_dict drops them without a word.
    model = client.V1ResourceSlice.from_dict(a_slice("other", typo=1))
    assert model is not None and "typo" not in json.dumps(model.to_dict())


POLICY = {"default": "1536Mi", "validRange": {"min": "1Gi", "step": "1Gi"}}
INVALID = {
    "uppercase": (a_slice(name="GPU-0"), "spec.devices[0].name", "Invalid"),
    "duplicate": (
        a_slice(spec={"devices": [{"name": "gpu-0"}, {"name": "gpu-0"}]}),
        "spec.devices[1].name",
        "Duplicate",
    ),
    "policy-without-multiple": (
        a_slice(allowMultipleAllocations=False),
        "spec.devices[0].capacity[memory].requestPolicy",
        "Forbidden",
    ),
    "default-off-step": (
        a_slice(capacity={"memory": {"value": "15Gi", "requestPolicy": POLICY}}),
        "spec.devices[0].capacity[memory].requestPolicy.validRange.step",
        "Invalid",
    ),
    "129-devices": (
        a_slice(spec={"devices": [{"name": f"gpu-{i}"} for i in range(129)]}),
        "spec.devices",
        "TooMany",
    ),
    "two-node-scopes": (a_slice(spec={"allNodes": True}), "spec", "Invalid"),
    "no-slices-in-pool": (
        a_slice(spec={"pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 0}}),
        "spec.pool.resourceSliceCount",
        "Invalid",
    ),
}


@pytest.mark.parametrize("case", INVALID)
def test_invalid_slices_are_422(resource: client.ResourceV1Api, case: str) -> None:
    body, field, reason = INVALID[case]
    with pytest.raises(ApiException) as error:
        resource.create_resource_slice(body)
    status = status_of(error.value)
    assert error.value.status == 422 and status["reason"] == "Invalid", status
    cause = status["details"]["causes"][0]
    assert (cause["field"], cause["reason"]) == (field, f"FieldValue{reason}"), status


def test_driver_node_and_pool_are_immutable(resource: client.ResourceV1Api) -> None:
    resource.create_resource_slice(a_slice())
    moved = a_slice(node="node-2")
    moved["metadata"]["name"] = "node-1-gpus"
    with pytest.raises(ApiException) as error:
        resource.replace_resource_slice("node-1-gpus", moved)
    causes = status_of(error.value)["details"]["causes"]
    assert [c["field"] for c in causes] == ["spec.pool.name", "spec.nodeName"]


def raw(api: FakeApiServer, body: Any, query: str = "", token: str = TOKEN) -> tuple[int, Any, Any]:
    request = urllib.request.Request(
        f"{api.url}/apis/resource.k8s.io/v1/resourceslices{query}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.load(response), response.headers.get_all("Warning")
    except urllib.error.HTTPError as e:
        return e.code, json.load(e), None


def test_decoding_as_the_api_server_does(
    api: FakeApiServer, resource: client.ResourceV1Api
) -> None:
    """Past the client: an unknown field is dropped with a warning (400 when Strict), a wrong
    type is 400, a missing required field 422, a wrong token 401."""
    code, _, warnings = raw(api, a_slice("a", typo=1))
    assert code == 201 and warnings == ['299 - "unknown field \\"spec.devices[0].typo\\""']
    assert "typo" not in json.dumps(api.slices["a"])
    code, status, _ = raw(api, a_slice("b", typo=1), "?fieldValidation=Strict")
    assert code == 400 and "strict decoding error" in status["message"]
    wrong = a_slice("c")
    wrong["spec"]["pool"]["generation"] = "1"
    assert raw(api, wrong)[0] == 400
    del wrong["spec"]["pool"]
    code, status, _ = raw(api, wrong)
    assert code == 422 and status["details"]["causes"][0]["field"] == "spec.pool"
    assert raw(api, a_slice("d"), token="nope")[0] == 401


def test_claims_are_read_and_a_missing_one_is_404(
    api: FakeApiServer, resource: client.ResourceV1Api
) -> None:
    result = {"request": "gpu", "driver": DRIVER, "pool": "node-1", "device": "gpu-0"}
    result |= {"consumedCapacity": {"memory": "6Gi"}, "shareID": SHARE}
    api.set_claim(allocated_claim("default", "claim-1", CLAIM_UID, [result], node="node-1"))
    claim = resource.read_namespaced_resource_claim("claim-1", "default")
    assert claim.metadata.uid == CLAIM_UID and claim.metadata.resource_version
    assert claim.status.allocation.devices.results[0].share_id == SHARE
    assert claim.spec.devices.requests[0].exactly.capacity.requests == {"memory": "6Gi"}
    with pytest.raises(ApiException) as error:
        resource.read_namespaced_resource_claim("claim-2", "default")
    assert error.value.status == 404 and status_of(error.value)["reason"] == "NotFound"
    with pytest.raises(AssertionError, match="shareID"):
        allocated_claim("default", "bad", CLAIM_UID, [result | {"shareID": SHARE.upper()}])


def test_lists_select_fields_and_stray_calls_are_recorded(
    api: FakeApiServer, resource: client.ResourceV1Api
) -> None:
    resource.create_resource_slice(a_slice("one", "node-1"))
    resource.create_resource_slice(a_slice("two", "node-2"))
    found = resource.list_resource_slice(
        field_selector=f"spec.nodeName=node-2,spec.driver={DRIVER}"
    )
    assert [s.metadata.name for s in found.items] == ["two"]
    before = len(api.unexpected)
    with pytest.raises(ApiException) as error:
        client.CoreV1Api(resource.api_client).read_node("node-1")
    assert error.value.status == 404
    assert [(r.method, r.path) for r in api.unexpected[before:]] == [
        ("GET", "/api/v1/nodes/node-1")
    ]


def test_injected_failures_and_waiting(api: FakeApiServer, resource: client.ResourceV1Api) -> None:
    api.fail_next(1, 503)
    with pytest.raises(ApiException) as error:
        resource.create_resource_slice(a_slice())
    assert error.value.status == 503
    threading.Timer(0.05, resource.create_resource_slice, [a_slice()]).start()
    found = api.wait_for_slice(lambda s: s["spec"]["nodeName"] == "node-1", timeout=5)
    assert found["metadata"]["name"] == "node-1-gpus"


# -- the kubelet stand-in ----------------------------------------------------------------------


@dataclass
class Plugin:
    """A DRA kubelet plugin reduced to its gRPC: registration socket and DRA socket."""

    root: Path
    type: str = "DRAPlugin"
    versions: tuple[str, ...] = ("v1.DRAPlugin",)
    statuses: list[reg.RegistrationStatus] = field(default_factory=list)
    prepared: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.registration = self.root / "registry" / f"{DRIVER}-reg.sock"
        self.endpoint = self.root / "plugins" / "dra.sock"
        self.endpoint.parent.mkdir()
        self.servers = [grpc.server(futures.ThreadPoolExecutor(max_workers=2)) for _ in range(2)]
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(_Dra(self), self.servers[0])
        reg_grpc.add_RegistrationServicer_to_server(_Registration(self), self.servers[1])
        self.servers[0].add_insecure_port(f"unix://{self.endpoint}")
        self.servers[1].add_insecure_port(f"unix://{self.registration}")
        for server in self.servers:  # the DRA socket first, as kubeletplugin does
            server.start()

    def stop(self) -> None:
        for server in self.servers:
            server.stop(grace=None).wait()


class _Registration(reg_grpc.RegistrationServicer):
    def __init__(self, plugin: Plugin) -> None:
        self.plugin = plugin

    def GetInfo(self, request: reg.InfoRequest, context: grpc.ServicerContext) -> reg.PluginInfo:  # noqa: N802
        p = self.plugin
        return reg.PluginInfo(
            type=p.type, name=DRIVER, endpoint=str(p.endpoint), supported_versions=p.versions
        )

    def NotifyRegistrationStatus(  # noqa: N802
        self, request: reg.RegistrationStatus, context: grpc.ServicerContext
    ) -> reg.RegistrationStatusResponse:
        self.plugin.statuses.append(request)
        return reg.RegistrationStatusResponse()


class _Dra(dra_v1_pb2_grpc.DRAPluginServicer):
    def __init__(self, plugin: Plugin) -> None:
        self.plugin = plugin

    def NodePrepareResources(  # noqa: N802
        self, request: dra_v1_pb2.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1_pb2.NodePrepareResourcesResponse:
        response = dra_v1_pb2.NodePrepareResourcesResponse()
        for claim in request.claims:
            self.plugin.prepared.append(claim.uid)
            device = dra_v1_pb2.Device(
                request_names=["gpu"], pool_name="node-1", device_name="gpu-0"
            )
            response.claims[claim.uid].devices.append(device)
        return response


@pytest.fixture
def root() -> Iterator[Path]:
    # Unix socket paths must stay under 108 bytes: a short directory of our own under /tmp.
    path = Path(tempfile.mkdtemp(prefix="ss-dra-", dir="/tmp"))
    (path / "registry").mkdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_plugin_registers_is_prepared_and_registers_again_after_a_restart(root: Path) -> None:
    plugin = Plugin(root)
    with FakeDraKubelet(root / "registry") as kubelet:
        first = kubelet.wait_registered(1, timeout=5)
        assert first.service == "v1.DRAPlugin" and first.info is not None
        assert [s.plugin_registered for s in plugin.statuses] == [True]
        response = kubelet.prepare([("default", CLAIM_UID, "claim-1")])
        assert response.claims[CLAIM_UID].devices[0].device_name == "gpu-0"
        assert plugin.prepared == [CLAIM_UID]

        kubelet.restart()
        kubelet.wait_registered(2, timeout=5)
        assert len(plugin.statuses) == 2 and kubelet.deregistrations == []
        kubelet.prepare([("default", CLAIM_UID, "claim-1")])

        plugin.registration.unlink()
        gone = kubelet.wait_deregistered(1, timeout=5)
        assert (gone.name, gone.endpoint) == (DRIVER, str(plugin.endpoint))
        with pytest.raises(AssertionError, match="no DRA driver is registered"):
            kubelet.prepare([("default", CLAIM_UID, "claim-1")])
    plugin.stop()


def test_a_plugin_of_another_type_is_refused(root: Path) -> None:
    plugin = Plugin(root, type="CSIPlugin")
    with FakeDraKubelet(root / "registry") as kubelet:
        refused = kubelet.wait_attempts(1, timeout=5)
    plugin.stop()
    assert not refused.registered and "CSIPlugin" in refused.error
    assert not plugin.statuses[0].plugin_registered and "CSIPlugin" in plugin.statuses[0].error


def test_the_service_is_the_first_one_the_plugin_lists(root: Path) -> None:
    plugin = Plugin(root, versions=("v1beta1.DRAPlugin", "v1.DRAPlugin"))
    with FakeDraKubelet(root / "registry") as kubelet:
        assert kubelet.wait_registered(1, timeout=5).version == "v1beta1"
    plugin.stop()
