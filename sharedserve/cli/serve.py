"""``sharedserve models``, ``serve`` and ``demo``: build example models and serve one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from sharedserve.cli._access import (
    PANEL_LISTENERS,
    AdminHeader,
    AdminKeyFile,
    AllowedModelRoots,
    TlsCaFile,
    TlsCertFile,
    TlsKeyFile,
    admin_key,
)
from sharedserve.cli._app import PANEL_GPUS, ExampleModelName, FakeGpus, app, models_app
from sharedserve.cli._limits import (
    BodyTimeout,
    DrainDelay,
    GrpcMaxMessageBytes,
    HeaderTimeout,
    KeepAliveTimeout,
    MaxArrivingBytes,
    MaxBodyBytes,
    MaxConnections,
    MaxDecodingBytes,
    MaxHeaderBytes,
    MaxInflightPerModel,
    MaxRequestElements,
    ShutdownGrace,
)
from sharedserve.config import BatchingSettings, GpuSettings
from sharedserve.contract import Grant
from sharedserve.enums import Framework, Paging
from sharedserve.errors import ConfigError
from sharedserve.server import (
    ADMIN_HEADER,
    AdminSettings,
    ConnectionSettings,
    GrpcSettings,
    RestSettings,
    ServerSettings,
    ShutdownSettings,
    TlsSettings,
)

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
            help="tf (SavedModel), torch (TorchScript + signature.json), onnx (model.onnx) or "
            "export (torch.export's model.pt2 + signature.json), both from the torch modules.",
            case_sensitive=False,
        ),
    ] = Framework.TENSORFLOW,
    overwrite: Annotated[
        bool,
        typer.Option(
            help="Replace models that already exist, built otherwise (an identical one is kept)."
        ),
    ] = False,
    seed: Annotated[int, typer.Option(help="Random seed for the weights.")] = 0,
) -> None:
    """Build example models with RANDOM weights in TF Serving's layout (OUT/NAME/1/...).

    Nothing is downloaded: Keras applications are built with weights=None. Predictions are
    meaningless, but compute and memory are those of the real architectures, which is what
    packing decisions need. tiny builds in seconds and is what the tests use.
    """
    from sharedserve.models import build

    for built in build(
        [n.value for n in names], out, overwrite=overwrite, seed=seed, framework=framework
    ):
        typer.echo(f"already built (identical): {built.path}" if built.already else built.path)


@models_app.command("list")
def models_list() -> None:
    """List the example models `models build` can make (a catalogue: not the models you built).

    Each row: the name `models build` takes, the frameworks it builds for (--framework) and
    what the model is."""
    from sharedserve.models import CATALOG

    typer.echo("Example models `models build` can make (name, --framework, what it is):")
    frameworks = {name: ",".join(f.value for f in m.frameworks) for name, m in CATALOG.items()}
    width = max(map(len, frameworks.values()))
    for model in CATALOG.values():
        typer.echo(f"{model.name:14} {frameworks[model.name]:{width}} {model.description}")


_PANEL_BATCHING = "Batching"

_Model = Annotated[
    Path | None,
    typer.Option(
        help="One model: its base path (DIR/NAME with version dirs) or a model directory.",
        show_default="none: --model-config-file or --model-repository",
    ),
]
_ModelConfigPoll = Annotated[
    float,
    typer.Option(
        "--model-config-file-poll-wait-seconds",
        help="Re-read --model-config-file every this many seconds and load and unload models "
        "to match it (TF Serving's flag); a file that fails to parse is logged and ignored. "
        "0: off.",
    ),
]
_ModelConfigFile = Annotated[
    Path | None,
    typer.Option(
        help="Many models: TensorFlow Serving's model config file (model_config_list { config "
        "{ name base_path model_platform model_version_policy version_labels } }), as TF "
        "Serving reads it; base_path absolute.",
        show_default="none",
    ),
]
_ModelRepository = Annotated[
    Path | None,
    typer.Option(
        help="Many models: a directory with one model per subdirectory, named after it "
        "(version subdirectories as for --model), each optionally with a sharedserve.yaml "
        "model file (batching, version_policy, version_labels; `sharedserve schema model`).",
        show_default="none",
    ),
]
_ExitOnError = Annotated[
    bool,
    typer.Option(
        "--exit-on-error",
        help="Many models: stop if a model named at start cannot be read (exit 2, before "
        "anything starts) or fails to load (exit 1), as Triton's flag. Off: it is reported "
        "(status END, repository index, log, metrics) and the others serve. --model always "
        "stops.",
    ),
]
_StrictReadiness = Annotated[
    bool,
    typer.Option(
        "--strict-readiness",
        help="Many models: /v2/health/ready and gRPC health say ready only while every model "
        "serves (one failed or loading: not ready), as Triton's flag. Off: ready once the "
        "loads at start settle, whatever failed; each model's own readiness says which.",
    ),
]
_Name = Annotated[str | None, typer.Option(help="--model's name in URLs.", show_default="dir name")]
_Host = Annotated[str, typer.Option(help="Address to listen on.", rich_help_panel=PANEL_LISTENERS)]
_RestPort = Annotated[
    int,
    typer.Option(
        help="REST port (TF Serving and OIP); 0 picks a free one. A second server on this host "
        "needs another --grpc-port too.",
        rich_help_panel=PANEL_LISTENERS,
    ),
]
_GrpcPort = Annotated[
    int,
    typer.Option(
        help="gRPC port (TF Serving and OIP); 0 picks a free one. A second server on this host "
        "needs another --rest-port too.",
        rich_help_panel=PANEL_LISTENERS,
    ),
]
_Paging = Annotated[
    Paging,
    typer.Option(
        help="With many models: 'lru' moves the least recently used idle models out of memory "
        "(torch to host memory, TensorFlow unloaded) when a model's request or load needs "
        "room under the GPU cap (--gpu-memory-mib or the env contract's; without a GPU, the "
        "recorded cap); 'off' refuses what does not fit (507).",
        show_default=True,
    ),
]
_PageInTimeout = Annotated[
    float,
    typer.Option(
        help="Seconds a request waits for its paged-out model to come back in; then 503 with "
        "Retry-After.",
        show_default=True,
    ),
]
_GpuMemoryFraction = Annotated[
    float | None,
    typer.Option(
        help="Share of the GPU's memory this process may use, in (0, 1].",
        show_default="the env contract's, else no cap",
        rich_help_panel=PANEL_GPUS,
    ),
]
_GpuMemoryMib = Annotated[
    int | None,
    typer.Option(
        help="GPU memory cap in MiB (instead of a fraction).",
        show_default="the env contract's, else no cap",
        rich_help_panel=PANEL_GPUS,
    ),
]
_CpuLimit = Annotated[
    float | None,
    typer.Option(
        help="CPU limit in cores; sizes thread pools.",
        show_default="the cgroup quota",
        rich_help_panel=PANEL_GPUS,
    ),
]
_EnableBatching = Annotated[
    bool,
    typer.Option(
        help="Merge concurrent requests into batches (off, as in TF Serving).",
        rich_help_panel=_PANEL_BATCHING,
    ),
]
_MaxBatchSize = Annotated[
    int, typer.Option(help="Rows per merged batch.", rich_help_panel=_PANEL_BATCHING)
]
_BatchTimeoutMicros = Annotated[
    int,
    typer.Option(
        help="How long a batch waits for more requests, in microseconds.",
        rich_help_panel=_PANEL_BATCHING,
    ),
]
_MaxEnqueuedBatches = Annotated[
    int,
    typer.Option(
        help="Queue bound in batches; past it requests get 503 at once.",
        rich_help_panel=_PANEL_BATCHING,
    ),
]
_NumBatchThreads = Annotated[
    int, typer.Option(help="Batches run concurrently.", rich_help_panel=_PANEL_BATCHING)
]
_BatchingParametersFile = Annotated[
    Path | None,
    typer.Option(
        help="TF Serving batching_parameters.txt; implies --enable-batching.",
        show_default="none: the flags",
        rich_help_panel=_PANEL_BATCHING,
    ),
]


@app.command()
def serve(
    model: _Model = None,
    model_config_file: _ModelConfigFile = None,
    model_repository: _ModelRepository = None,
    model_config_file_poll_wait_seconds: _ModelConfigPoll = ServerSettings.model_config_poll_s,
    allowed_model_roots: AllowedModelRoots = None,
    exit_on_error: _ExitOnError = ServerSettings.exit_on_error,
    strict_readiness: _StrictReadiness = ServerSettings.strict_readiness,
    admin_key_file: AdminKeyFile = None,
    admin_header: AdminHeader = ADMIN_HEADER,
    name: _Name = ServerSettings.model_name,
    host: _Host = RestSettings.host,
    rest_port: _RestPort = RestSettings.port,
    grpc_port: _GrpcPort = GrpcSettings.port,
    max_body_bytes: MaxBodyBytes = RestSettings.max_body_bytes,
    grpc_max_message_bytes: GrpcMaxMessageBytes = GrpcSettings.max_message_bytes,
    max_request_elements: MaxRequestElements = ServerSettings.max_request_elements,
    max_inflight_per_model: MaxInflightPerModel = ServerSettings.max_inflight_per_model,
    paging: _Paging = ServerSettings.paging,
    page_in_timeout: _PageInTimeout = ServerSettings.page_in_timeout_s,
    max_decoding_bytes: MaxDecodingBytes = RestSettings.max_decoding_bytes,
    max_arriving_bytes: MaxArrivingBytes = RestSettings.max_arriving_bytes,
    max_header_bytes: MaxHeaderBytes = ConnectionSettings.max_header_bytes,
    keep_alive_timeout: KeepAliveTimeout = ConnectionSettings.keep_alive_timeout_s,
    header_timeout: HeaderTimeout = ConnectionSettings.header_timeout_s,
    body_timeout: BodyTimeout = ConnectionSettings.body_timeout_s,
    max_connections: MaxConnections = ConnectionSettings.max_connections,
    drain_delay: DrainDelay = ShutdownSettings.drain_delay_s,
    shutdown_grace: ShutdownGrace = ShutdownSettings.grace_s,
    tls_cert_file: TlsCertFile = TlsSettings.cert_file,
    tls_key_file: TlsKeyFile = TlsSettings.key_file,
    tls_ca_file: TlsCaFile = TlsSettings.ca_file,
    gpu_memory_fraction: _GpuMemoryFraction = None,
    gpu_memory_mib: _GpuMemoryMib = None,
    cpu_limit: _CpuLimit = ServerSettings.cpu_limit_cores,
    fake_gpus: FakeGpus = GpuSettings.fake_gpus,
    enable_batching: _EnableBatching = False,
    max_batch_size: _MaxBatchSize = BatchingSettings.max_batch_size,
    batch_timeout_micros: _BatchTimeoutMicros = BatchingSettings.batch_timeout_micros,
    max_enqueued_batches: _MaxEnqueuedBatches = BatchingSettings.max_enqueued_batches,
    num_batch_threads: _NumBatchThreads = BatchingSettings.num_batch_threads,
    batching_parameters_file: _BatchingParametersFile = None,
) -> None:
    """Serve a model, or many in one process, over the TensorFlow Serving REST and gRPC APIs
    and the Open Inference Protocol (KServe V2: /v2/... on the REST port,
    inference.GRPCInferenceService on the gRPC port), all through one predict path.

    Give one of --model (one model), --model-config-file (TF Serving's model config: many) or
    --model-repository (a directory of models: many). Requests are routed by model name,
    version and version label. Each version directory decides its backend: saved_model.pb is
    TensorFlow, model.pt (with the signature.json that `models build --framework torch`
    writes) is TorchScript, model.onnx is ONNX (onnxruntime, the [onnx] extra), model.pt2 is
    a torch.export program or AOTInductor package; all may be served by one process.

    The GPU memory cap comes from the flags or, when neither is given, from the env contract
    (SHAREDSERVE_GPU_MEMORY_MIB, then SHAREDSERVE_GPU_MEMORY_FRACTION) that the allocator and
    the packer set. Without a GPU the cap is recorded and reported but not enforced.
    With many models the cap is also what their memory is counted against: each model's
    budget (gpu_memory_mib in its model file) or its peak measured at load; --paging lru
    makes room by moving idle models out. GET /sharedserve/v1/limits shows the caps in force
    and every model's budget, footprint, state and last use.
    """
    from sharedserve.limits.gpu import parse_cap_request
    from sharedserve.server.process import run

    grant = Grant.from_env(os.environ)  # the env contract's one reader
    settings = ServerSettings(
        model_dir=model,
        model_name=name,
        model_config_file=model_config_file,
        model_repository=model_repository,
        model_config_poll_s=model_config_file_poll_wait_seconds,
        allowed_model_roots=tuple(allowed_model_roots or ()),
        exit_on_error=exit_on_error,
        strict_readiness=strict_readiness,
        admin=AdminSettings(admin_key(admin_key_file), admin_header),
        rest=RestSettings(host, rest_port, max_body_bytes, max_decoding_bytes, max_arriving_bytes),
        grpc=GrpcSettings(port=grpc_port, max_message_bytes=grpc_max_message_bytes),
        connections=ConnectionSettings(
            keep_alive_timeout, header_timeout, body_timeout, max_connections, max_header_bytes
        ),
        shutdown=ShutdownSettings(drain_delay, shutdown_grace),
        tls=TlsSettings(tls_cert_file, tls_key_file, tls_ca_file),
        batching=_batching(
            batching_parameters_file,
            enable_batching,
            BatchingSettings(
                max_batch_size, batch_timeout_micros, max_enqueued_batches, num_batch_threads
            ),
        ),
        gpu=GpuSettings(
            cap=parse_cap_request(gpu_memory_fraction, gpu_memory_mib, grant),
            visible_devices=grant.cuda_visible_devices,
            fake_gpus=fake_gpus,
        ),
        cpu_limit_cores=cpu_limit,
        max_request_elements=max_request_elements,
        max_inflight_per_model=max_inflight_per_model,
        paging=paging,
        page_in_timeout_s=page_in_timeout,
    )
    settings.validate()
    raise typer.Exit(run(settings))


def _batching(
    parameters_file: Path | None, enabled: bool, flags: BatchingSettings
) -> BatchingSettings | None:
    """TF Serving's batching parameters file, else the flags with --enable-batching, else off."""
    if parameters_file is None:
        return flags if enabled else None
    from sharedserve.server import parse_batching_parameters

    try:
        text = parameters_file.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read {parameters_file}: {e.strerror}") from e
    return parse_batching_parameters(text)


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
