"""A fleet's plan: ``document`` the one type of ``plan.json`` (read, written, its schema);
``build`` makes it from the placement; ``specs`` its GPUs as pack specs (``gpu-NNN.yaml``);
``markdown`` and ``page`` it as ``plan.md`` and ``plan.html``.
"""

from sharedserve.size.plan.build import build_plan
from sharedserve.size.plan.document import (
    LowerBound,
    Plan,
    PlanCorrection,
    PlanGpu,
    PlanKubernetes,
    PlanModel,
    PlannedReplica,
    PlanServer,
    plan_schema,
    read_plan,
    spec_index,
    spec_name,
    write_plan,
)
from sharedserve.size.plan.markdown import plan_markdown
from sharedserve.size.plan.page import plan_html
from sharedserve.size.plan.specs import gpu_specs, model_cap

__all__ = [
    "LowerBound",
    "Plan",
    "PlanCorrection",
    "PlanGpu",
    "PlanKubernetes",
    "PlanModel",
    "PlanServer",
    "PlannedReplica",
    "build_plan",
    "gpu_specs",
    "model_cap",
    "plan_html",
    "plan_markdown",
    "plan_schema",
    "read_plan",
    "spec_index",
    "spec_name",
    "write_plan",
]
