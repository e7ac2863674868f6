"""plan.html: the cost comparison first, a bar per GPU, all in one page."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

from sharedserve.documents import parse
from sharedserve.size.plan import Plan, plan_html

REPLICA = {
    "model": "fraud<x>",
    "gpu_memory_mib": 2000.0,
    "busy_share": 0.25,
    "predicted_p99_ms": 12.5,
}
PLAN = parse(Plan, {
    "gpu_count": 2, "lower_bound_gpus": 2, "above_bound": 1.0,
    "lower_bound": {"memory": 1, "compute": 2, "density": 1, "spread": 2, "large": 0},
    "node_count": 1, "node_cpu_cores": [1.5],
    "gpu_hours_per_month": 1460.0, "cost_per_month": 4380.0, "baseline_gpu_count": 5,
    "baseline_cost_per_month": 10950.0, "saving_factor": 2.5,
    "gpu": {"name": "H100-80GB", "memory_mib": 81559, "price_per_hour": 3.0, "max_gpus": None},
    "node": {"gpus": 8, "cpu_cores": 64}, "utilization_target": 0.8, "context_reserve_mib": 512,
    "models": [{"name": "fraud<x>", "peak_qps": 200, "replicas": 5, "rate_per_replica": 40.0,
                "capacity_qps_per_replica": 100.0, "slo_p99_ms": 50.0, "predicted_p99_ms": 12.5,
                "p99_at_capacity_ms": 12.0, "measured_at_density": 4,
                "gpu_memory_mib": 2000.0, "gpu_memory_source": "nvml", "busy_share": 0.25,
                "busy_source": "gpu utilisation", "max_density": 4, "cpu_cores": 0.3,
                "cpu_limit": 0.5, "profile": "profiles/fraud", "gpus": [0, 0, 0, 1, 1]}],
    "gpus": [{"index": 0, "node": 0, "memory_used_mib": 7536.0, "busy_share": 0.75,
              "replica_limit": 4, "replicas": [REPLICA] * 3},
             {"index": 1, "node": 0, "memory_used_mib": 5024.0, "busy_share": 0.5,
              "replica_limit": 4, "replicas": [REPLICA] * 2}],
    "warnings": ["model fraud: measured on a CPU"],
}, where="a test plan")  # fmt: skip


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_the_page_says_the_cost_first_and_draws_a_bar_per_gpu() -> None:
    page = plan_html(PLAN)
    parser = _Text()
    parser.feed(page)
    text = " ".join(" ".join(parser.text).split())
    assert text.index("saving factor 2.5x") < text.index("Models") < text.index("GPUs Memory")
    assert "this plan 2 1,460 4,380" in text and "one replica per GPU 5 3,650 10,950" in text
    assert "fraud<x> x3" in text  # escaped in the page, read back as written
    assert "<x>" not in page.replace("&lt;x&gt;", "")
    assert "model fraud: measured on a CPU" in text
    # A memory and a busy bar per GPU; the busy one marks the 80% target.
    assert len(re.findall(r'class="meter mem"', page)) == 2
    assert len(re.findall(r'class="meter busy"', page)) == 2
    assert page.count('<i style="left:80.0%">') == 2 and 'style="width:75.0%"' in page
    # One file: no script, no link, no image from elsewhere.
    assert not {"script", "link", "img"} & set(parser.tags)
