"""``sharedserve schema fleet|pack|...|chart-values``: print a file format's JSON Schema.

Thin: each schema is made by the module that reads and writes the format, from its types.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import Enum
from typing import Annotated, Any

import typer

from sharedserve.cli._app import app

__all__: list[str] = []


class FileFormat(str, Enum):
    fleet = "fleet"
    pack = "pack"
    plan = "plan"
    report = "report"
    model = "model"
    fake_gpus = "fake-gpus"
    chart_values = "chart-values"


def _schema_of(kind: FileFormat) -> Callable[[], dict[str, Any]]:
    # Imported here: the types load pydantic, which no other command needs at start-up.
    from sharedserve.bench.row import report_schema
    from sharedserve.gpu.fake import fake_gpus_schema
    from sharedserve.k8s.chart import chart_schema
    from sharedserve.pack.spec import pack_schema
    from sharedserve.server import model_schema
    from sharedserve.size.fleet import fleet_schema
    from sharedserve.size.plan import plan_schema

    return {
        FileFormat.fleet: fleet_schema,
        FileFormat.pack: pack_schema,
        FileFormat.plan: plan_schema,
        FileFormat.report: report_schema,
        FileFormat.model: model_schema,
        FileFormat.fake_gpus: fake_gpus_schema,
        FileFormat.chart_values: chart_schema,
    }[kind]


@app.command()
def schema(
    kind: Annotated[
        FileFormat,
        typer.Argument(
            help="fleet (size --fleet), pack (pack --spec, the plan's gpu-NNN.yaml), plan "
            "(the plan's plan.json), report (bench's and profile's report.json), model (a model "
            "repository's NAME/sharedserve.yaml), fake-gpus (the simulated GPUs of --fake-gpus, "
            "docs/fake-gpus.md) or chart-values (the Helm chart's values.schema.json)."
        ),
    ],
) -> None:
    """Print the JSON Schema of a fleet file, a pack spec, a plan, a bench report, a model file, a
    fake-GPU inventory or the Helm chart's values.

    For an editor to check a file as it is typed, or a CI job to check one; docs/schemas/ holds
    the same files."""
    typer.echo(json.dumps(_schema_of(kind)(), indent=2))
