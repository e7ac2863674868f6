"""What every command that starts ``serve`` replicas (``pack``, ``bench``, ``profile``,
``size --verify``) or renders them (``k8s render``) shares: the pass-through ``serve`` options,
checked against ``serve`` itself; a spec's entries; the environment the replicas inherit (this
layer is the one that reads it)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import typer

from sharedserve.cli._app import app, refuse_flags
from sharedserve.config import REPLICA_SERVE_OPTIONS, PackEntry
from sharedserve.contract import without_grant
from sharedserve.errors import ConfigError

__all__ = ["check_server_args", "replica_environment", "spec_entries"]

# The usage errors typer raises: click's, or those of the copy of click newer typers carry.
_CLICK_ERROR: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)


def check_server_args(args: list[str]) -> tuple[str, ...]:
    """Refuse pass-through options `serve` does not know, before any replica starts."""
    owned = [a for a in args if a.split("=", 1)[0] in REPLICA_SERVE_OPTIONS]
    if owned:
        raise ConfigError(f"pack sets {', '.join(owned)} itself for each replica; use pack's flags")
    tls = [a for a in args if a.startswith("--tls-")]
    if tls:
        raise ConfigError(
            f"{', '.join(tls)}: the replicas pack and bench start, and the pods k8s render "
            "writes, are probed over plain http; serve TLS with `sharedserve serve` and measure "
            "it through a targets file (`bench --targets`, its rest URL https://)"
        )
    serve = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    try:
        serve.make_context("serve", ["--model", ".", *args])
    except _CLICK_ERROR as e:
        # Caught and said here: left to typer, it would print `serve`'s usage line, as if the
        # user had typed `serve`.
        message = getattr(e, "format_message", e.__str__)()  # with the options it meant
        raise ConfigError(
            f"{message}; options after pack's own go to every replica's "
            "`sharedserve serve` (see `sharedserve serve --help`)"
        ) from e
    return tuple(args)


def spec_entries(
    spec: Path, given: Mapping[str, object], extra: tuple[str, ...]
) -> tuple[PackEntry, ...]:
    """The entries of a pack spec, each with the pass-through ``serve`` options ``extra`` before
    its own; ``given`` (flag: value) are the one-model flags, refused beside a spec."""
    from sharedserve.pack.spec import load_spec

    refuse_flags(
        given,
        "set these in the spec (per entry, or at its top level for every entry)",
        beside="--spec",
    )
    return tuple(
        replace(e, server_args=(*extra, *check_server_args(list(e.server_args))))
        for e in load_spec(spec).entries
    )


def replica_environment() -> dict[str, str]:
    """This shell's environment less every variable of the env contract: the packer hands each
    replica a grant of its own, which nothing left over here may add to or override."""
    return without_grant(os.environ)
