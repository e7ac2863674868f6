"""``sharedserve k8s``: Kubernetes manifests without hand-edited YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sharedserve.cli._app import app
from sharedserve.errors import ConfigError
from sharedserve.k8s.render import ModelDeployment, render_model_yaml

__all__: list[str] = []

k8s_app = typer.Typer(
    help="Kubernetes manifests (the allocator, bench and examples are in k8s/ as kustomize).",
    no_args_is_help=True,
)
app.add_typer(k8s_app, name="k8s")


@k8s_app.command("render")
def render(
    model: Annotated[
        str,
        typer.Option(help="Model name: its URLs (/v1/models/NAME) and its directory /models/NAME."),
    ],
    image: Annotated[str, typer.Option(help="sharedserve image, e.g. REGISTRY/sharedserve:TAG.")],
    vgpu: Annotated[int, typer.Option(help="vGPUs per pod (sharedserve.io/vgpu).")] = 1,
    cpu: Annotated[str, typer.Option(help="CPU request and limit (Kubernetes quantity).")] = "500m",
    memory: Annotated[
        str, typer.Option(help="Memory request and limit (Kubernetes quantity).")
    ] = "2Gi",
    model_pvc: Annotated[
        str, typer.Option(help="PersistentVolumeClaim with the models, mounted at /models.")
    ] = "sharedserve-models",
    namespace: Annotated[str, typer.Option(help="Namespace.")] = "sharedserve",
    replicas: Annotated[int, typer.Option(help="Pods; each takes --vgpu vGPUs.")] = 1,
    name: Annotated[
        str | None, typer.Option(help="Deployment and Service name.", show_default="from --model")
    ] = None,
    runtime_class: Annotated[
        str | None,
        typer.Option(
            help="RuntimeClass, where the NVIDIA runtime is not the node's default.",
            show_default="none: the node's default runtime",
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Write here instead of stdout.", show_default="stdout")
    ] = None,
) -> None:
    """Print a ready Deployment and Service for one model, as YAML for `kubectl apply -f`.

    The pod asks for sharedserve.io/vgpu (the allocator injects the GPU
    memory cap), has CPU and memory requests equal to its limits (the server
    sizes its threads to the CPU quota), reads the model read-only from the
    claim, and is ready only once the model has loaded and warmed up.
    """
    spec = ModelDeployment(
        model=model,
        image=image,
        name=name,
        vgpu=vgpu,
        cpu=cpu,
        memory=memory,
        model_pvc=model_pvc,
        namespace=namespace,
        replicas=replicas,
        runtime_class=runtime_class,
    )
    text = render_model_yaml(spec)
    if out is None:
        typer.echo(text, nl=False)
        return
    try:
        out.write_text(text)
    except OSError as e:
        raise ConfigError(f"cannot write {out}: {e.strerror}") from e
