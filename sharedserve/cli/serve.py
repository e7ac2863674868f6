"""``sharedserve models``, ``serve`` and ``demo``: build example models and serve one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from sharedserve.cli._app import ExampleModelName, app, models_app
from sharedserve.config import (
    DEFAULT_MAX_BODY_BYTES,
    BatchingSettings,
    ConnectionSettings,
    GpuSettings,
    GrpcSettings,
    RestSettings,
    ServerSettings,
)
from sharedserve.contract import Grant
from sharedserve.enums import Framework
from sharedserve.errors import ConfigError

__all__: list[str] = []


@models_app.command("build")
def models_build(
    names: Annotated[
        list[ExampleModelName], typer.Argument(help="Models to build.", metavar="MODEL")
    ],
    out: Annotated[Path, typer.Option(help="Output directory; each model goes to OUT/NAME/1.")],
    framework: Annotated[
        Framework,
        typer.Option(
            help="tf (SavedModel) or torch (TorchScript + signature.json).", case_sensitive=False
        ),
    ] = Framework.TENSORFLOW,
    overwrite: Annotated[bool, typer.Option(help="Replace models that already exist.")] = False,
    seed: Annotated[int, typer.Option(help="Random seed for the weights.")] = 0,
) -> None:
    """Build example models with RANDOM weights in TF Serving's layout (OUT/NAME/1/...).

    Nothing is downloaded: Keras applications are built with weights=None. Predictions are
    meaningless, but compute and memory are those of the real architectures, which is what
    packing decisions need. tiny builds in seconds and is what the tests use.
    """
    from sharedserve.models import build_models

    for path in build_models(
        [n.value for n in names], out, overwrite=overwrite, seed=seed, framework=framework
    ):
        typer.echo(path)


@models_app.command("list")
def models_list() -> None:
    """List the example models."""
    from sharedserve.models import CATALOG

    for model in CATALOG.values():
        frameworks = ",".join(f.value for f in model.frameworks)
        typer.echo(f"{model.name:14} {frameworks:9} {model.description}")


@app.command()
def serve(
    model: Annotated[
        Path, typer.Option(help="Model base path (DIR/NAME with version dirs) or a SavedModel dir.")
    ],
    name: Annotated[
        str | None, typer.Option(help="Model name in URLs.", show_default="dir name")
    ] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "0.0.0.0",
    rest_port: Annotated[
        int, typer.Option(help="REST port (TF Serving and OIP); 0 picks a free one.")
    ] = 8501,
    grpc_port: Annotated[
        int, typer.Option(help="gRPC port (TF Serving and OIP); 0 picks a free one.")
    ] = 8500,
    max_body_bytes: Annotated[
        int, typer.Option(help="Largest request body in bytes; larger gets HTTP 413.")
    ] = DEFAULT_MAX_BODY_BYTES,
    max_request_elements: Annotated[
        int | None,
        typer.Option(
            help="Most elements a request's tensors may hold, counted from their shapes before "
            "anything is allocated; more gets 413 / RESOURCE_EXHAUSTED.",
            show_default="--max-body-bytes / 2, what a full JSON body can carry",
        ),
    ] = None,
    max_decoding_bytes: Annotated[
        int | None,
        typer.Option(
            help="Request-body bytes decoded from JSON at once; decoding takes ~18x a body's "
            "size in memory, so this bounds a burst of large bodies. A body that finds no room "
            "waits up to 10 s, then gets 503.",
            show_default="--max-body-bytes",
        ),
    ] = None,
    keep_alive_timeout: Annotated[
        float,
        typer.Option(
            help="Seconds a connection may sit idle between requests (REST and gRPC); longer "
            "than the 60 s of the proxies usually in front, as nginx's.",
            show_default=True,
        ),
    ] = ConnectionSettings.keep_alive_timeout_s,
    header_timeout: Annotated[
        float,
        typer.Option(
            help="Seconds a request's line and headers (gRPC: its connection preface) may take "
            "to arrive; then 408, or a close if nothing came.",
            show_default=True,
        ),
    ] = ConnectionSettings.header_timeout_s,
    body_timeout: Annotated[
        float,
        typer.Option(
            help="Longest pause in seconds between two reads of a request body; then 408.",
            show_default=True,
        ),
    ] = ConnectionSettings.body_timeout_s,
    max_connections: Annotated[
        int,
        typer.Option(
            help="Open connections per API at most; past it REST answers 503 and closes, gRPC "
            "closes the connection.",
            show_default=True,
        ),
    ] = ConnectionSettings.max_connections,
    gpu_memory_fraction: Annotated[
        float | None,
        typer.Option(
            help="Share of the GPU's memory this process may use, in (0, 1].",
            show_default="the env contract's, else no cap",
        ),
    ] = None,
    gpu_memory_mib: Annotated[
        int | None,
        typer.Option(
            help="GPU memory cap in MiB (instead of a fraction).",
            show_default="the env contract's, else no cap",
        ),
    ] = None,
    cpu_limit: Annotated[
        float | None,
        typer.Option(
            help="CPU limit in cores; sizes thread pools.", show_default="the cgroup quota"
        ),
    ] = None,
    fake_gpus: Annotated[
        Path | None,
        typer.Option(
            help="Simulated GPU inventory (JSON), for tests.",
            show_default="none: real GPUs through NVML",
        ),
    ] = None,
    enable_batching: Annotated[
        bool, typer.Option(help="Merge concurrent requests into batches (off, as in TF Serving).")
    ] = False,
    max_batch_size: Annotated[int, typer.Option(help="Rows per merged batch.")] = 1000,
    batch_timeout_micros: Annotated[
        int, typer.Option(help="How long a batch waits for more requests, in microseconds.")
    ] = 0,
    max_enqueued_batches: Annotated[
        int, typer.Option(help="Queue bound in batches; past it requests get 503 at once.")
    ] = 10,
    num_batch_threads: Annotated[int, typer.Option(help="Batches run concurrently.")] = 1,
    batching_parameters_file: Annotated[
        Path | None,
        typer.Option(
            help="TF Serving batching_parameters.txt; implies --enable-batching.",
            show_default="none: the flags",
        ),
    ] = None,
) -> None:
    """Serve a model over the TensorFlow Serving REST and gRPC APIs and the Open Inference
    Protocol (KServe V2: /v2/... on the REST port, inference.GRPCInferenceService on the gRPC
    port), both through one predictor.

    The model directory decides the backend: saved_model.pb is TensorFlow, model.pt (with the
    signature.json that `models build --framework torch` writes) is TorchScript.

    The GPU memory cap comes from the flags or, when neither is given, from the env contract
    (SHAREDSERVE_GPU_MEMORY_MIB, then SHAREDSERVE_GPU_MEMORY_FRACTION) that the allocator and
    the packer set. Without a GPU the cap is recorded and reported but not enforced.
    GET /sharedserve/v1/limits shows the caps in force.
    """
    from sharedserve.limits.gpu import parse_cap_request
    from sharedserve.server.run import run

    for flag, port in (("--rest-port", rest_port), ("--grpc-port", grpc_port)):
        if not 0 <= port <= 65535:
            raise ConfigError(f"{flag} must be in 0..65535, got {port}")
    batching = None
    if batching_parameters_file is not None:
        from sharedserve.server.batching_policy import parse_batching_parameters

        try:
            text = batching_parameters_file.read_text()
        except OSError as e:
            raise ConfigError(f"cannot read {batching_parameters_file}: {e.strerror}") from e
        batching = parse_batching_parameters(text)
    elif enable_batching:
        batching = BatchingSettings(
            max_batch_size, batch_timeout_micros, max_enqueued_batches, num_batch_threads
        )
    if batching is not None:
        batching.validate()
    if max_body_bytes <= 0:
        raise ConfigError(f"--max-body-bytes must be positive, got {max_body_bytes}")
    for flag, limit in (
        ("--max-request-elements", max_request_elements),
        ("--max-decoding-bytes", max_decoding_bytes),
    ):
        if limit is not None and limit <= 0:
            raise ConfigError(f"{flag} must be positive, got {limit}")
    connections = ConnectionSettings(
        keep_alive_timeout, header_timeout, body_timeout, max_connections
    )
    connections.validate()
    grant = Grant.from_env(os.environ)  # the env contract's one reader
    cap = parse_cap_request(gpu_memory_fraction, gpu_memory_mib, grant)
    settings = ServerSettings(
        model_dir=model,
        model_name=name,
        rest=RestSettings(host, rest_port, max_body_bytes, max_decoding_bytes),
        grpc=GrpcSettings(port=grpc_port, max_message_bytes=max_body_bytes),
        connections=connections,
        batching=batching,
        gpu=GpuSettings(
            cap=cap,
            visible_devices=grant.cuda_visible_devices,
            fake_gpus=fake_gpus,
        ),
        cpu_limit_cores=cpu_limit,
        max_request_elements=max_request_elements,
    )
    raise typer.Exit(run(settings))


@app.command()
def demo(
    model: Annotated[
        ExampleModelName, typer.Option(help="Example model.")
    ] = ExampleModelName.mobilenet_v2,
    workdir: Annotated[Path, typer.Option(help="Where models are built (reused).")] = Path(
        "build/models"
    ),
    requests: Annotated[int, typer.Option(help="Predictions to send.", min=1)] = 5,
    batch: Annotated[int, typer.Option(help="Instances per prediction.", min=1)] = 1,
) -> None:
    """Build an example model, serve it, send predictions and print what came back."""
    from sharedserve.demo import run_demo

    run_demo(model.value, workdir, requests=requests, batch=batch)
