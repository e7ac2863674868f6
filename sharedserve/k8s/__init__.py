"""Kubernetes manifests for sharedserve, rendered from settings (pure: no client, no cluster).

The hand-written manifests live in ``k8s/`` at the repository root; ``render`` produces the one
piece users need many copies of, a model's Deployment and Service, so nobody hand-edits YAML.
"""

from sharedserve.k8s.render import ModelDeployment, render_model, render_model_yaml

__all__ = ["ModelDeployment", "render_model", "render_model_yaml"]
