"""Kubernetes manifests for sharedserve, rendered from settings (pure: no client, no cluster).

The hand-written manifests live in ``k8s/`` at the repository root; ``render`` produces the one
piece users need many copies of, a model's Deployment and Service, so nobody hand-edits YAML;
``mix`` renders one for every entry of a pack spec, sized from ``pack``'s plan.
"""

from sharedserve.k8s.mix import MixModel, VgpuSize, render_mix, render_mix_yaml
from sharedserve.k8s.render import ModelDeployment, render_model, render_model_yaml

__all__ = [
    "MixModel",
    "ModelDeployment",
    "VgpuSize",
    "render_mix",
    "render_mix_yaml",
    "render_model",
    "render_model_yaml",
]
