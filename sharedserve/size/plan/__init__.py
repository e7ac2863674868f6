"""A fleet's plan: ``document`` the one type of ``plan.json`` (read, written, its schema);
``build`` makes it from the placement; ``specs`` its GPUs as pack specs (``gpu-NNN.yaml``);
``markdown`` and ``page`` it as ``plan.md`` and ``plan.html``, with ``verified`` the section of
its ``size --verify`` runs; ``pages`` writes those two, with the runs found beside the plan.
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
    kubernetes_summary,
    plan_schema,
    read_plan,
    spec_index,
    spec_name,
    write_plan,
)
from sharedserve.size.plan.markdown import plan_markdown
from sharedserve.size.plan.page import plan_html
from sharedserve.size.plan.pages import (
    VERIFY_FILES,
    find_verified,
    plan_digest,
    show_verified,
    write_pages,
)
from sharedserve.size.plan.specs import gpu_specs, model_cap
from sharedserve.size.plan.verified import Verified, VerifyRun

__all__ = [
    "VERIFY_FILES",
    "LowerBound",
    "Plan",
    "PlanCorrection",
    "PlanGpu",
    "PlanKubernetes",
    "PlanModel",
    "PlanServer",
    "PlannedReplica",
    "Verified",
    "VerifyRun",
    "build_plan",
    "find_verified",
    "gpu_specs",
    "kubernetes_summary",
    "model_cap",
    "plan_digest",
    "plan_html",
    "plan_markdown",
    "plan_schema",
    "read_plan",
    "show_verified",
    "spec_index",
    "spec_name",
    "write_pages",
    "write_plan",
]
