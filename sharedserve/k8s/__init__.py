"""Kubernetes manifests for sharedserve, rendered from settings (pure: no client, no cluster).

The hand-written manifests live in ``k8s/`` at the repository root; ``render`` produces the one
piece users need many copies of, a model's Deployment and Service, so nobody hand-edits YAML;
``mix`` renders one for every entry of a pack spec, sized from ``pack``'s plan; ``vgpus`` cuts a
GPU into vGPUs as the allocator does, for the manifests whose pods ask for vGPUs; ``chart``
types the Helm chart's values (charts/sharedserve), whose schema, defaults and docs table
``chart_docs`` writes (imported by their modules: they load pydantic, which ``k8s render`` does
not need at start-up).
"""

from sharedserve.k8s.mix import ClaimSize, MixModel, VgpuSize, held, render_mix, render_mix_yaml
from sharedserve.k8s.render import ModelDeployment, PodSpread, render_model, render_model_yaml
from sharedserve.k8s.vgpus import vgpu_cut

__all__ = [
    "ClaimSize",
    "MixModel",
    "ModelDeployment",
    "PodSpread",
    "VgpuSize",
    "held",
    "render_mix",
    "render_mix_yaml",
    "render_model",
    "render_model_yaml",
    "vgpu_cut",
]
