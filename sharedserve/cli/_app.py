"""The typer application every ``sharedserve`` command registers on, and the root options."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from enum import Enum
from functools import partial
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from sharedserve import framework_output
from sharedserve.cli._help import keep_flag_names_whole
from sharedserve.enums import Protocol
from sharedserve.errors import ConfigError

__all__ = [
    "PANEL_GPUS",
    "PANEL_LOAD",
    "ExampleModelName",
    "GpusOption",
    "LoadOption",
    "app",
    "exit_when_stopped",
    "models_app",
    "refuse_flags",
]

keep_flag_names_whole()
app = typer.Typer(
    help="Pack many inference models onto one GPU, and measure how many is too many.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)
models_app = typer.Typer(
    help="Example models with RANDOM weights (real compute and memory; meaningless predictions).",
    no_args_is_help=True,
)
app.add_typer(models_app, name="models")


class ExampleModelName(str, Enum):
    """The example models' names, as ``models build`` and ``demo`` take them (the choices of a
    flag); a test keeps them in step with ``sharedserve.models.CATALOG`` (the
    ``ExampleModelSpec`` of each), which this layer does not import at start-up (it would load the
    model builders for every command)."""

    tiny = "tiny"
    mobilenet_v2 = "mobilenet_v2"
    resnet50 = "resnet50"
    inception_v3 = "inception_v3"


def _setup_logging(level: str) -> None:
    level = level.lower()
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # Processes this one starts (pack's and bench's replicas) log at the same level, and so
    # show or hide the frameworks as this one does.
    os.environ["SHAREDSERVE_LOG_LEVEL"] = level
    framework_output.hide_startup_output(level != "debug")
    # PyTorch's "`torch.jit.load` is deprecated" on every build and load, as one line of the log.
    framework_output.route_upstream_deprecations()
    if level == "debug":
        return  # the frameworks as they are, start-up lines and all
    # The frameworks' start-up and routine lines alarm more than they inform (cuInit's "error"
    # on every host without a GPU); sharedserve says in its own words what matters. Set before
    # any framework is imported; a variable the user set wins.
    for name, value in framework_output.QUIET_ENV.items():
        os.environ.setdefault(name, value)
    if level == "info":
        for name in framework_output.FRAMEWORK_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)


@app.callback()
def _root(
    log_level: Annotated[
        str, typer.Option(help="debug, info, warning or error.", envvar="SHAREDSERVE_LOG_LEVEL")
    ] = "info",
) -> None:
    if log_level.lower() not in ("debug", "info", "warning", "error"):
        raise typer.BadParameter("choose debug, info, warning or error", param_hint="--log-level")
    _setup_logging(log_level)


def refuse_flags(flags: Mapping[str, object], why: str, *, beside: str = "") -> None:
    """ConfigError naming every flag of ``flags`` (flag: value) that was given (not None), after
    "``beside`` with" when given, then ``why``; nothing when none was."""
    given = [flag for flag, value in flags.items() if value is not None]
    if given:
        lead = f"{beside} with " if beside else ""
        raise ConfigError(f"{lead}{', '.join(given)}: {why}")


T = TypeVar("T")


def renamed_flag(new: str, value: T | None, old: str, old_value: T | None) -> tuple[str, T | None]:
    """A renamed flag's value and the name it came under: the old name still works and warns
    that it is deprecated; ConfigError when both are given."""
    if old_value is None:
        return new, value
    if value is not None:
        raise ConfigError(f"give {new}, not {old} too (its deprecated name)")
    logging.getLogger(__name__).warning(
        "%s is deprecated: use %s %s (the same value)", old, new, old_value
    )
    return old, old_value


# The deprecated names of --vgpus-per-gpu (allocator's --replicas, k8s render's
# --replicas-per-gpu), whose values renamed_flag takes.
DeprecatedVgpusPerGpu = Annotated[
    int | None,
    typer.Option(
        help="Deprecated: use --vgpus-per-gpu (the same number).",
        show_default="none: --vgpus-per-gpu",
    ),
]


# The help panel (``rich_help_panel``) of the options on GPUs, caps and CPUs, on every command
# that has them: a command's long list of options reads in groups (cli/_help.py).
PANEL_GPUS = "GPUs and CPUs"
PANEL_LOAD = "Load"
GpusOption = partial(typer.Option, rich_help_panel=PANEL_GPUS)
"""``typer.Option`` in the GPUs and CPUs panel."""
LoadOption = partial(typer.Option, rich_help_panel=PANEL_LOAD)
"""``typer.Option`` in the panel of the load a measurement offers."""

# Options that mean the same on every command that takes them.
FakeGpus = Annotated[
    Path | None,
    typer.Option(
        help="Simulated GPUs (a JSON inventory: docs/fake-gpus.md, `sharedserve schema "
        "fake-gpus`), for hosts without one.",
        show_default="none: real GPUs through NVML",
        rich_help_panel=PANEL_GPUS,
    ),
]
ProtocolOption = Annotated[
    Protocol,
    typer.Option(
        help="rest or grpc (TF Serving's APIs), oip-rest (Open Inference Protocol, binary "
        "tensors) or oip-grpc.",
        case_sensitive=False,
        rich_help_panel=PANEL_LOAD,
    ),
]

ServerCpus = Annotated[
    str,
    typer.Option(
        help="CPUs the model servers may run on: auto, all (not pinned) or a list such as 0-2. "
        "auto, on 2 or more CPUs: every CPU but the load generator's. Recorded in the report.",
        rich_help_panel=PANEL_GPUS,
    ),
]
LoadgenCpus = Annotated[
    str,
    typer.Option(
        help="CPUs the load generator may run on: auto, all or a list such as 3. auto: the last "
        "quarter of the CPUs (at least one) on 2 or more, so that it neither lags behind nor "
        "slows the servers it measures; the rest when --server-cpus is a list.",
        rich_help_panel=PANEL_GPUS,
    ),
]


def cpu_settings(servers: str, loadgen: str, *, servers_started: bool = True) -> dict[str, Any]:
    """``BenchSettings``' CPU fields from --server-cpus and --loadgen-cpus, on this host's CPUs
    (``limits.affinity.split_cpus``); the split is logged, since it changes what is measured."""
    from sharedserve.limits.affinity import split_cpus, usable_cpus

    split = split_cpus(servers, loadgen, usable_cpus(), servers_started=servers_started)
    described = split.describe()
    logging.getLogger(__name__).info(
        "servers on CPUs %s, load generator on %s (%s)",
        described["server_cpus"] or "any",
        described["loadgen_cpus"] or "any",
        split.note,
    )
    return {"server_cpus": split.servers, "loadgen_cpus": split.loadgen, "cpu_pinning": split.note}


@contextmanager
def exit_when_stopped() -> Iterator[None]:
    """A run stopped in order by SIGINT or SIGTERM exits 128 + the signal, as a shell reports a
    process that signal killed (the work has already cleaned up and said what it kept)."""
    # Here, not at the top: importing sharedserve.pack loads the packer, its placement and numpy,
    # which every command (serve, allocator) would otherwise pay for at start.
    from sharedserve.pack.stopping import StoppedBySignal

    try:
        yield
    except StoppedBySignal as e:
        raise typer.Exit(e.exit_code) from None
