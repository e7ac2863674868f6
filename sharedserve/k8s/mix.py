"""A pack spec's models as Deployments and Services in one YAML stream (``k8s render --spec``).

Pure. ``pack --spec`` plans a mix on one GPU (``sharedserve.pack.caps``): each replica gets a GPU
memory cap, explicit or a share of what is left in proportion to its model's size, and keeps a
context reserve outside it. On Kubernetes the allocator cuts every GPU into equal vGPUs and a pod
asks for whole ones, so each model's pods ask for the vGPUs that hold what the plan gives one of
its replicas on that GPU, cap plus reserve:

    vGPUs per pod = ceil((cap + context reserve) / vGPU size), at least 1, at most a GPU's vGPUs

The reserve is counted because a pod's vGPUs are all the GPU memory the scheduler sets aside for
it, and its CUDA context lives in that memory too: counting the cap alone would let the scheduler
put more replicas on a GPU than the plan fits. With one model of N replicas and the allocator at
``--vgpus-per-gpu N``, every pod gets 1 vGPU, exactly ``pack``'s N on one GPU. Rounding up can
make a mix take more vGPUs than one GPU has; the header says how many GPUs' worth. A pod never
asks for more vGPUs than one GPU advertises: the allocator grants a pod vGPUs on one GPU only.

With the DRA driver (``k8s render --dra --spec``) there are no vGPUs to round to: each pod's
ResourceClaim asks for that memory itself (``ClaimSize``), cap plus reserve in MiB, and the
scheduler rounds it up to the step of the driver's requestPolicy (256 MiB by default).

A fleet plan (``size``) knows more than a pack spec: each replica's busy share, and the GPU it
went on. It sets each entry's ``units`` itself (``MixModel.units``: the vGPUs, or under DRA the
percent of a GPU's compute, each pod asks for) and the header's counts and explanation.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, replace

from sharedserve.contract import DRA_COMPUTE_UNITS, DRA_DRIVER
from sharedserve.errors import ConfigError
from sharedserve.k8s.admin import admin_secret_note, admin_secrets
from sharedserve.k8s.render import ModelDeployment, dump_all, render_model
from sharedserve.k8s.shared_server import SharedServerPods, shared_server_objects
from sharedserve.quantity import parse_memory

__all__ = ["ClaimSize", "MixModel", "VgpuSize", "held", "render_mix", "render_mix_yaml"]

_MIB = 1 << 20


@dataclass(frozen=True)
class VgpuSize:
    """How the allocator cuts one GPU into vGPUs, as its ``--vgpus-per-gpu`` or
    ``--vgpu-memory-mib`` does (``sharedserve.vgpu_sizing``)."""

    gpu_memory_mib: int
    """The GPU's memory in MiB."""
    vgpu_memory_mib: int
    """Memory per vGPU in MiB, at least 1."""
    per_gpu: int
    """vGPUs the GPU advertises, at least 1."""
    allocator_flag: str
    """The allocator's flag that cuts GPUs this way, e.g. ``--vgpus-per-gpu 8``, for the header."""

    @property
    def units(self) -> int:
        """The units a GPU has: its vGPUs."""
        return self.per_gpu

    def vgpus_for(self, mib: int) -> int:
        """The whole vGPUs holding ``mib`` MiB: at least 1, at most the GPU's."""
        return min(max(1, math.ceil(mib / self.vgpu_memory_mib)), self.per_gpu)

    def sized(
        self, deployment: ModelDeployment, mib: int, units: int | None = None
    ) -> ModelDeployment:
        """``deployment`` with pods asking for ``units`` vGPUs, or where None the vGPUs that
        hold ``mib`` MiB."""
        return replace(deployment, vgpu=self.vgpus_for(mib) if units is None else units)

    def total(self, deployments: Sequence[ModelDeployment]) -> str:
        vgpus = sum(d.replicas * d.vgpu for d in deployments)
        return f"{_count(vgpus, 'vGPU')} ({vgpus / self.per_gpu:.1f} GPUs' worth)"

    def asks(self, basis: str, reserve_mib: int) -> str:
        return (
            f"Each pod asks for the vGPUs holding {basis}: its GPU memory cap plus {reserve_mib} "
            f"MiB for its CUDA context, rounded up to vGPUs of {self.vgpu_memory_mib} MiB, "
            f"{self.per_gpu} per {self.gpu_memory_mib} MiB GPU (the allocator's "
            f"{self.allocator_flag})."
        )

    def per_pod(self, deployment: ModelDeployment) -> str:
        return f"{_count(deployment.vgpu, 'vGPU')} ({deployment.vgpu * self.vgpu_memory_mib} MiB)"


@dataclass(frozen=True)
class ClaimSize:
    """DRA mode: each pod's ResourceClaim asks the driver for its GPU memory in MiB."""

    gpu_memory_mib: int
    """One GPU's memory in MiB, which the plan shares out."""

    @property
    def units(self) -> int:
        """The units a GPU has: percent of its compute."""
        return DRA_COMPUTE_UNITS

    def sized(
        self, deployment: ModelDeployment, mib: int, units: int | None = None
    ) -> ModelDeployment:
        """``deployment`` with pods claiming ``mib`` MiB of one GPU's memory, and ``units``
        percent of its compute where given."""
        return replace(deployment, gpu_memory=f"{mib}Mi", gpu_compute=units)

    def total(self, deployments: Sequence[ModelDeployment]) -> str:
        mib = sum(d.replicas * _claimed_mib(d) for d in deployments)
        return f"{mib} MiB of GPU memory ({mib / self.gpu_memory_mib:.1f} GPUs' worth)"

    def asks(self, basis: str, reserve_mib: int) -> str:
        return (
            f"Each pod's ResourceClaim asks the DRA driver {DRA_DRIVER} for {basis}: its GPU "
            f"memory cap plus {reserve_mib} MiB for its CUDA context, of one "
            f"{self.gpu_memory_mib} MiB GPU; the scheduler rounds a claim up to the driver's "
            "step (allocator --memory-step-mib, 256 by default)."
        )

    def per_pod(self, deployment: ModelDeployment) -> str:
        compute = deployment.gpu_compute
        also = "" if compute is None else f" and {compute}% of its compute"
        return f"{_claimed_mib(deployment)} MiB of GPU memory{also}"


def _claimed_mib(deployment: ModelDeployment) -> int:
    assert deployment.gpu_memory is not None
    return int(parse_memory(deployment.gpu_memory, "gpu_memory") // _MIB)


@dataclass(frozen=True)
class MixModel:
    """One entry of a pack spec: its pods, and what ``pack`` plans for each on one GPU."""

    deployment: ModelDeployment
    """The entry's Deployment and Service; ``vgpu`` is set from the plan."""
    cap_mib: int
    """The GPU memory cap ``pack`` gives each replica on one GPU, in MiB."""
    where: str
    """The entry, for errors: ``mix.yaml: models[2] (resnet50)``."""
    shared_server: SharedServerPods | None = None
    """A shared server's models, which each pod serves from one repository
    (``k8s.shared_server``)."""
    units: int | None = None
    """The vGPUs (under ``ClaimSize`` the percent of a GPU's compute) each pod asks for, where
    the plan sets them; None: the vGPUs holding its cap and reserve (under ``ClaimSize``, no
    compute)."""
    note: str = ""
    """More about its pods for its comment line, after the cap."""


def render_mix(
    models: Sequence[MixModel], size: VgpuSize | ClaimSize, *, context_reserve_mib: int
) -> list[ModelDeployment]:
    """Each model's Deployment with its vGPUs (or, with a ``ClaimSize``, its claim's GPU memory)
    set, checked; ConfigError names the entry."""
    deployments = []
    seen: dict[str, str] = {}
    for model in models:
        deployment = size.sized(model.deployment, model.cap_mib + context_reserve_mib, model.units)
        try:
            deployment.validate()
        except ConfigError as e:
            raise ConfigError(f"{model.where}: {e.message}") from e
        name = deployment.resource_name
        if name in seen:
            # The second would replace the first on apply.
            raise ConfigError(
                f"{seen[name]} and {model.where} both render as the Deployment and Service "
                f"{name!r}; give each a unique 'name'"
            )
        seen[name] = model.where
        deployments.append(deployment)
    return deployments


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}" if n == 1 else f"{n:,} {what}s"


def held(models: int, deployments: int, pods: int, servers: int = 0, shared: int = 0) -> str:
    """What a stream of manifests holds, each counted as what it is: ``500 models in 353
    Deployments (74 of them shared servers, holding 221 of the models), 905 pods``. A shared
    server is one Deployment serving several models; ``shared``: the models they serve."""
    them = ""
    if servers:
        kind = "a shared server" if servers == 1 else "shared servers"
        them = f" ({servers:,} of them {kind}, holding {shared:,} of the models)"
    return (
        f"{_count(models, 'model')} in {_count(deployments, 'Deployment')}{them}, "
        f"{_count(pods, 'pod')}"
    )


def render_mix_yaml(
    models: Sequence[MixModel],
    size: VgpuSize | ClaimSize,
    *,
    context_reserve_mib: int,
    source: str,
    basis: str = "what `pack` plans for one replica of the spec on one GPU",
    command: str = "sharedserve k8s render --spec",
    admin_secret: bool = True,
    counts: str | None = None,
    asks: str | None = None,
) -> str:
    """Every model's objects in one YAML stream, with comments saying how their vGPUs (or
    claims) follow from the plan; ``source`` names the spec (or plan) in the header, ``basis``
    where each replica's cap comes from and ``command`` what wrote the file. With
    ``admin_secret``, first the Secret holding a new management key for the pods of each
    namespace (``k8s.admin``), else the pods read an existing one. ``counts`` and ``asks``: the
    header's counts and what each pod asks for, where the caller words them (none: from the
    models, and ``basis``)."""
    deployments = render_mix(models, size, context_reserve_mib=context_reserve_mib)
    if counts is None:
        servers = [m.shared_server for m in models if m.shared_server is not None]
        shared = sum(len(s.models) for s in servers)
        pods = sum(d.replicas for d in deployments)
        what = held(len(models) - len(servers) + shared, len(deployments), pods, len(servers),
                    shared)  # fmt: skip
        counts = f"{what}, {size.total(deployments)}"
    objects = "a Deployment and Service"
    if isinstance(size, ClaimSize):
        objects = "a ResourceClaimTemplate, Deployment and Service"
    header = (
        f"Models of {source} for sharedserve ({command}): {objects} "
        f"each; {counts}. Apply with: kubectl apply -f FILE. "
        f"{asks or size.asks(basis, context_reserve_mib)}"
    )
    lines = textwrap.wrap(header, 97, break_long_words=False, break_on_hyphens=False)
    for where in dict.fromkeys((d.admin_secret, d.namespace) for d in deployments):
        lines += admin_secret_note(*where, emitted=admin_secret)
    parts = ["".join(f"# {line}\n" for line in lines)]
    rendered = []
    for model, deployment in zip(models, deployments, strict=True):
        note = (
            f"# {deployment.model}: {_count(deployment.replicas, 'pod')} x "
            f"{size.per_pod(deployment)}; "
            f"planned cap {model.cap_mib} MiB + {context_reserve_mib} MiB reserve{model.note}"
        )
        objects_of = render_model(deployment)
        if model.shared_server is not None:
            objects_of = shared_server_objects(objects_of, model.shared_server)
            names = ", ".join(m.name for m in model.shared_server.models)
            note += f"; a shared server: each pod serves {names}"
        rendered.append((note, objects_of))
    if admin_secret:
        made = admin_secrets([o for _, objects_of in rendered for o in objects_of])
        parts.append("---\n# The pods' management key\n" + dump_all(made))
    parts += [f"---\n{note}\n" + dump_all(objects_of) for note, objects_of in rendered]
    return "".join(parts)
