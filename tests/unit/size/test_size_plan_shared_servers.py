"""A plan with a shared server: each model's serving, the three costs, and the GPU's pack spec
with the server as an entry of ``servers:``, read back by pack's own reader."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import yaml

from sharedserve.pack.spec import load_spec, write_spec
from sharedserve.placement import OpenEnded, place
from sharedserve.size.fleet import Fleet, FleetModel, GpuType, NodeType, PagingSettings
from sharedserve.size.grouping import group
from sharedserve.size.manifests import plan_manifests
from sharedserve.size.plan import Plan, build_plan, gpu_specs, plan_html, plan_markdown, spec_name
from sharedserve.size.run import _pack
from tests.support.sizing import model

GPU, RESERVE, TARGET = 23_034, 512, 0.8


def plan_of(tmp_path: Path) -> tuple[Plan, Fleet]:
    # Every model measured at most 2 to a GPU: dedicated, the 4 take 2 GPUs; with the cold three
    # in one server, 2 processes take 1.
    wanted = [model(n, 0.1, memory=3000, busy=0.05, densest=2) for n in "abc"]
    wanted.append(model("hot", 0.7, memory=3000, busy=0.3, densest=2))
    entries = tuple(
        FleetModel(d.model, Path("p.json"), 10.0, 100.0, min_replicas=1,
                   model=tmp_path / "models" / d.model)
        for d in wanted
    )  # fmt: skip
    fleet = Fleet(GpuType("L4", GPU, 0.8), NodeType(8, 64), entries)
    gpus = OpenEnded(GPU, 8)
    grouping = group(wanted, gpu_memory_mib=GPU, reserve_mib=RESERVE, target=TARGET)
    packing = place(grouping.requests(wanted), gpus, reserve_mib=RESERVE, target=TARGET)
    alone = place([d.placed_as() for d in wanted], gpus, reserve_mib=RESERVE, target=TARGET)
    plan = build_plan(fleet, wanted, packing, [], grouping=grouping,
                      process_per_replica_gpus=len(alone.gpus))  # fmt: skip
    return plan, fleet


def test_cold_models_share_a_server_and_the_plan_says_so_and_what_it_saves(
    tmp_path: Path,
) -> None:
    plan, _ = plan_of(tmp_path)
    assert (plan.baseline_gpu_count, plan.process_per_replica_gpu_count, plan.gpu_count) == (
        4, 2, 1)  # fmt: skip
    serving = {m.name: (m.serving, m.server) for m in plan.models}
    assert serving == {"a": ("shared", "shared-0"), "b": ("shared", "shared-0"),
                       "c": ("shared", "shared-0"), "hot": ("dedicated", None)}  # fmt: skip
    assert all(m.serving_reason for m in plan.models)
    (server,) = plan.servers
    assert (server.name, server.replicas, server.models, server.gpus) == (
        "shared-0", 1, ["a", "b", "c"], [0])  # fmt: skip
    (gpu,) = plan.gpus
    # Two processes, two reserves: the server's models pay one between them.
    assert gpu.memory_used_mib == 4 * 3000 + 2 * RESERVE
    assert gpu.held() == "hot, shared-0 (a, b, c)"
    # The lower bound counts a context per process too.
    assert plan.lower_bound_gpus == 1


def test_a_gpus_pack_spec_has_the_server_under_servers(tmp_path: Path) -> None:
    plan, fleet = plan_of(tmp_path)
    out = tmp_path / "plan"
    out.mkdir()
    (spec,) = gpu_specs(plan, fleet, out)
    path = write_spec(spec, out / spec_name(0))
    read = load_spec(path).entries
    server_entry, hot = read
    assert hot.name == "hot" and hot.models == ()
    assert server_entry.name == "shared-0" and server_entry.replicas == 1
    assert server_entry.cap.share.mib == 9000  # its models' budgets, summed: the reserve kept once
    assert [(m.name, m.gpu_memory_mib, m.weight) for m in server_entry.models] == [
        ("a", 3000, 10.0), ("b", 3000, 10.0), ("c", 3000, 10.0)]  # fmt: skip


def test_plan_md_and_html_say_each_models_serving_why_and_the_three_costs(
    tmp_path: Path,
) -> None:
    plan, _ = plan_of(tmp_path)
    markdown = plan_markdown(plan, [])
    assert "| this plan | 1 |" in markdown and "| one replica per GPU | 4 |" in markdown
    assert "| a process per replica, packed | 2 |" in markdown
    assert "| a | shared-0 |" in markdown and "| hot | dedicated |" in markdown
    assert "- a: shared in shared-0: cold" in markdown
    assert "| shared-0 | 1 | a, b, c | 9,000 |" in markdown
    page = plan_html(plan)
    assert "a process per replica, packed</td><td>2</td>" in page
    assert '<span title="shared in shared-0: cold' in page and "<h2>Shared servers</h2>" in page


def test_shared_servers_are_dropped_where_a_process_per_replica_takes_fewer_gpus() -> None:
    # Two hot replicas at 0.65 of a GPU's time leave 0.15 each under the 0.8 target: the two
    # cold models (0.1 each) fill those gaps alone, but not as one server of 0.2.
    wanted = [model("hot-a", 0.7, busy=0.65), model("hot-b", 0.7, busy=0.65),
              model("a", 0.1, busy=0.1), model("b", 0.1, busy=0.1)]  # fmt: skip
    grouping, packing, separate = _pack(wanted, OpenEnded(GPU, 8), RESERVE, TARGET)
    assert (len(packing.gpus), separate, grouping.servers) == (2, 2, [])
    assert grouping.serving["a"].reason == (
        "dedicated: with shared servers the fleet packed onto 3 GPUs, with a process per "
        "replica onto 2"
    )


def test_k8s_yaml_renders_a_shared_server_as_one_deployment_holding_its_models(
    tmp_path: Path,
) -> None:
    plan, fleet = plan_of(tmp_path)
    manifests = plan_manifests(plan, fleet, {"a": "dir-a", "hot": "dir-hot"})
    objects = [o for o in yaml.safe_load_all(manifests.text) if o]
    deployments = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Deployment"}
    assert sorted(deployments) == ["hot", "shared-0"]  # not a, b, c: one a server
    server = deployments["shared-0"]
    assert server["spec"]["replicas"] == 1
    pod = server["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    assert args[args.index("--model-repository") + 1] == "/repository"
    assert "--model" not in args and "--paging" not in args  # nothing paged in this plan
    # One process's memory: its models' 9,000 MiB and ONE reserve, in vGPUs of the cut at the
    # least (its GPU's room beside it may add more).
    kube = manifests.kubernetes
    vgpu = kube.vgpu_memory_mib
    assert vgpu is not None
    units = int(container["resources"]["limits"]["sharedserve.io/vgpu"])
    assert units >= math.ceil((9000 + RESERVE) / vgpu)
    (init,) = pod["initContainers"]
    script = init["command"][-1]
    for name, directory in (("a", "dir-a"), ("b", "b"), ("c", "c")):
        assert f"/models/{directory}/* /repository/{name}/" in script
    (config,) = [o for o in objects if o["kind"] == "ConfigMap"]
    assert config["metadata"]["name"] == "shared-0-models"
    files = {k: yaml.safe_load(v) for k, v in config["data"].items()}
    assert files == {f"{n}.yaml": {"weight": 10.0, "gpu_memory_mib": 3000} for n in "abc"}
    (hot,) = deployments["hot"]["spec"]["template"]["spec"]["containers"]
    assert kube.vgpus == units + int(hot["resources"]["limits"]["sharedserve.io/vgpu"])
    assert (kube.deployments, kube.pods) == (2, 2)


def test_a_paging_server_pins_the_others_in_its_spec_and_pages_in_its_pods(
    tmp_path: Path,
) -> None:
    # a and b are the coldest (5%), c (20%) stays pinned: cap 3,000 + the largest paged 3,000.
    wanted = [replace(model(n, load, memory=3000, busy=0.05, densest=2), slo_p99_ms=100.0)
              for n, load in (("a", 0.05), ("b", 0.05), ("c", 0.2))]  # fmt: skip
    entries = tuple(FleetModel(d.model, Path("p.json"), 10.0, 100.0, min_replicas=1,
                               model=tmp_path / "models" / d.model) for d in wanted)  # fmt: skip
    fleet = Fleet(GpuType("L4", GPU, 0.8), NodeType(8, 64), entries, paging=PagingSettings())
    grouping, packing, separate = _pack(wanted, OpenEnded(GPU, 8), RESERVE, TARGET,
                                        paging=fleet.paging)  # fmt: skip
    plan = build_plan(fleet, wanted, packing, [], grouping=grouping,
                      process_per_replica_gpus=separate)  # fmt: skip
    (server,) = plan.servers
    assert (server.paging, sorted(server.paged), server.gpu_memory_mib) == ("lru", ["a", "b"], 6000)
    assert "paged (paging: lru)" in next(m for m in plan.models if m.name == "a").serving_reason
    out = tmp_path / "plan"
    out.mkdir()
    (spec,) = gpu_specs(plan, fleet, out)
    (entry,) = load_spec(write_spec(spec, out / spec_name(0))).entries
    assert entry.paging and entry.cap.share.mib == 6000
    assert [(m.name, m.pinned) for m in entry.models] == [("c", True), ("a", False), ("b", False)]
    deployment = next(o for o in yaml.safe_load_all(plan_manifests(plan, fleet, {}).text)
                      if o and o["kind"] == "Deployment")  # fmt: skip
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--paging") + 1] == "lru"
