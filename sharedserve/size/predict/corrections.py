"""Corrections from ``size --verify``: each model's measured latency over the plan's predicted
one, by which the next plan multiplies its predictions. Pure (reads the verify files).

A verify run (``size.verify``) benches one GPU's share of a plan and writes ``verify.json``: a
line per model with the plan's p50 and p99 for that GPU and the ones measured. Their ratio,
actual over expected, is the model's correction factor, as NVIDIA Dynamo's planner corrects
its predicted latencies by what it observes: ``p50_factor = measured_p50 / predicted_p50``,
``p99_factor = measured_p99 / predicted_p99``. ``size --fleet --corrections VERIFY.json``
multiplies every p50 and p99 the plan predicts for that model by them (``predict.forecast``),
so what judges a p99 against its objective (``size.grouping``'s check of a shared server, the
paging room, the plan's warnings, ``meet_objective`` here) sees the corrected figure.

- **Measured**: the mean of the line's ``runs`` (one per repeat of the verify run) where it
  has them, else its ``measured_*`` figures.
- **A run not to be trusted** (``trustworthy: false``: the load generator was late, or the run
  unstable) is refused: its errors would be the host's, not the plan's. A file without the key
  is read.
- **A plan already corrected**: its verify lines carry the correction that plan applied
  (``correction``), and the new factor is composed with it (the measured figure over the
  uncorrected prediction), so the loop size -> verify -> size --corrections -> verify converges
  rather than forgetting the last round.
- **Several GPUs** verifying one model: the largest factor of each figure.
- **A model the fleet lacks**: a warning, not an error.

A corrected model whose p99 is over its objective is re-planned (``size.run``): out of its
shared server, then ``meet_objective`` here (more replicas, fewer processes a GPU).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass as plain_dataclass
from dataclasses import replace
from pathlib import Path
from typing import Annotated

from pydantic import ConfigDict
from pydantic.dataclasses import dataclass

from sharedserve.documents import Must, parse, read_document
from sharedserve.errors import ConfigError
from sharedserve.size.demand import Demand
from sharedserve.size.fleet import listed

__all__ = [
    "MOST_REPLICAS",
    "Correction",
    "P99At",
    "VerifyFile",
    "VerifyLine",
    "VerifyRun",
    "correction_factors",
    "load_corrections",
    "meet_objective",
    "read_verify",
    "replanned",
]

# verify.json is a command's output, and newer versions add keys (repeats, their spread): keys
# this reader does not use are ignored, not refused, as report.json's readers do.
_VERIFY = ConfigDict(extra="ignore", use_attribute_docstrings=True)

MOST_REPLICAS = 4
"""The most times its replicas a model is given to meet its objective: past a quarter of its
planned rate a replica's queue is short, and its p99 is its calls' own, which more replicas do
not shorten."""


@dataclass(frozen=True, config=_VERIFY)
class VerifyRun:
    """One repeat of a verify run, for one model."""

    measured_qps: float | None = None
    measured_p50_ms: float | None = None
    measured_p99_ms: float | None = None


@dataclass(frozen=True, config=_VERIFY)
class AppliedCorrection:
    """The correction the verified plan had already applied to a model's predictions."""

    p99_factor: float
    p50_factor: float | None = None


@dataclass(frozen=True, config=_VERIFY)
class VerifyLine:
    """One model of a verify run: the plan's figures for its GPU beside the measured ones."""

    model: str
    predicted_p99_ms: float | None = None
    measured_p99_ms: float | None = None
    predicted_p50_ms: float | None = None
    measured_p50_ms: float | None = None
    runs: list[VerifyRun] | None = None
    """One per repeat; their mean stands for the run where present."""
    correction: AppliedCorrection | None = None
    """What the verified plan had multiplied its predictions by; None: nothing."""

    def measured(self, figure: str) -> float | None:
        """``measured_<figure>``: the mean over ``runs`` where they have it, else the line's."""
        key = f"measured_{figure}"
        values: list[float] = [v for r in self.runs or [] if (v := getattr(r, key)) is not None]
        if values:
            return sum(values) / len(values)
        value: float | None = getattr(self, key)
        return value


@dataclass(frozen=True, config=_VERIFY)
class VerifyFile:
    """``verify.json`` as ``size --fleet --corrections`` reads it (``size --verify`` writes it)."""

    models: Annotated[
        list[VerifyLine], Must("a list of lines, one a model", lambda v: isinstance(v, list))
    ]
    spec: str | None = None
    """The GPU's pack spec that was run."""
    trustworthy: bool | None = None
    """False where the run's figures are not to be trusted; absent from older files."""


@plain_dataclass(frozen=True)
class Correction:
    """A model's correction factors: what its predictions are multiplied by."""

    p99_factor: float
    p50_factor: float | None
    """None: no verify line gave both a predicted and a measured p50; p50 uncorrected."""
    source: str
    """The verify file(s) the factors come from."""

    def words(self) -> str:
        """``p99 x1.2, p50 x1.1 (from v/verify.json)``."""
        p50 = "" if self.p50_factor is None else f", p50 x{self.p50_factor:g}"
        return f"p99 x{self.p99_factor:g}{p50} (from {self.source})"


def read_verify(path: Path) -> VerifyFile:
    """A ``verify.json``; ConfigError names the file and the key at fault, and refuses a run
    marked untrustworthy."""
    found = parse(VerifyFile, read_document(path, "verify file"), where=str(path))
    if found.trustworthy is False:
        raise ConfigError(
            f"{path}: trustworthy is false: the verify run's load generator was late or its "
            "figures unstable, so its errors are the host's, not the plan's; run size --verify "
            "again on a quiet host (a longer --duration) and correct by that run"
        )
    return found


def _factor(measured: float | None, predicted: float | None, applied: float | None) -> float | None:
    """measured / predicted, times what the verified plan had applied (its prediction was the
    uncorrected one times that); None without both figures."""
    if measured is None or predicted is None or measured <= 0 or predicted <= 0:
        return None
    return round(measured / predicted * (1.0 if applied is None else applied), 4)


def correction_factors(
    files: Sequence[tuple[str, VerifyFile]], models: Collection[str]
) -> tuple[dict[str, Correction], list[str]]:
    """Each model's correction from ``files`` (name as given, content), and the warnings the
    plan must carry: models ``models`` (the fleet's) lacks, lines without figures to use."""
    p99s: dict[str, list[tuple[float, str]]] = {}
    p50s: dict[str, list[tuple[float, str]]] = {}
    unknown: dict[str, list[str]] = {}
    bare: dict[str, list[str]] = {}
    for name, found in files:
        for line in found.models:
            if line.model not in models:
                unknown.setdefault(name, []).append(line.model)
                continue
            applied = line.correction
            p99 = _factor(line.measured("p99_ms"), line.predicted_p99_ms,
                          None if applied is None else applied.p99_factor)  # fmt: skip
            if p99 is None:
                bare.setdefault(name, []).append(line.model)
                continue
            p99s.setdefault(line.model, []).append((p99, name))
            p50 = _factor(line.measured("p50_ms"), line.predicted_p50_ms,
                          None if applied is None else applied.p50_factor)  # fmt: skip
            if p50 is not None:
                p50s.setdefault(line.model, []).append((p50, name))
    out = {}
    for model, factors in p99s.items():
        # A model verified on several GPUs: the largest factor. Its replicas all follow one
        # plan, and its objective holds only if it holds on the GPU where the plan was most
        # optimistic; a mean would plan the others' luck into it.
        p99, p99_from = max(factors)
        p50, p50_from = max(p50s.get(model, []), default=(None, p99_from))
        source = p99_from if p50_from == p99_from else f"{p99_from} (p99), {p50_from} (p50)"
        out[model] = Correction(p99, p50, source)
    warnings = [
        f"verify file {name}: {listed(names)} {'is' if len(names) == 1 else 'are'} not in the "
        "fleet: not corrected"
        for name, names in unknown.items()
    ]
    warnings += [
        f"verify file {name}: {listed(names)} without both a predicted and a measured p99: "
        "not corrected"
        for name, names in bare.items()
    ]
    return out, warnings


def load_corrections(
    paths: Sequence[Path], models: Collection[str]
) -> tuple[dict[str, Correction], list[str]]:
    """``correction_factors`` of the verify files at ``paths``."""
    return correction_factors([(str(p), read_verify(p)) for p in paths], models)


P99At = Callable[[Demand, int], float]
"""A replica's corrected p99 (ms) in a process of its own on a GPU of ``sharing`` processes
(``LatencyForecaster.alone``)."""


def _with(d: Demand, replicas: int, densest: int) -> Demand:
    """``d`` with ``replicas`` sharing its peak, at most ``densest`` processes a GPU."""
    rate = d.rate_per_replica * d.replicas / replicas
    busy = d.busy_share * rate / d.rate_per_replica if d.rate_per_replica > 0 else d.busy_share
    return replace(d, replicas=replicas, rate_per_replica=rate, busy_share=busy,
                   max_density=densest)  # fmt: skip


def meet_objective(d: Demand, p99_at: P99At) -> Demand | None:
    """``d`` re-planned so that its corrected p99 in a process of its own meets its objective:
    more replicas (each carries less: a shorter queue), up to ``MOST_REPLICAS`` times its own,
    and fewer processes on its GPUs (less interference), whichever takes the fewest GPUs' worth
    (replicas over processes a GPU); ``d`` where it meets it as it is, None where nothing does.
    Each density is judged at its most crowded: the packer may fill its GPUs to it."""
    slo = d.slo_p99_ms
    if slo is None or p99_at(d, d.max_density) <= slo:
        return d
    best: tuple[float, int, int] | None = None
    for densest in range(d.max_density, 0, -1):
        low, high = d.replicas, d.replicas * MOST_REPLICAS
        if p99_at(_with(d, high, densest), densest) > slo:
            continue
        while low < high:  # the fewest replicas that meet it: the p99 falls with the rate
            mid = (low + high) // 2
            if p99_at(_with(d, mid, densest), densest) <= slo:
                high = mid
            else:
                low = mid + 1
        worth = low / densest
        if best is None or worth < best[0] - 1e-9:  # a tie keeps the denser: fewer GPUs held
            best = (worth, low, densest)
    return None if best is None else _with(d, best[1], best[2])


def replanned(before: Demand, after: Demand) -> str:
    """What ``meet_objective`` changed, in words; empty where nothing."""
    changes = []
    if after.replicas != before.replicas:
        changes.append(
            f"{after.replicas} replicas, not {before.replicas} (each at "
            f"{after.rate_per_replica:.3g} QPS, not {before.rate_per_replica:.3g})"
        )
    if after.max_density != before.max_density:
        changes.append(
            f"at most {after.max_density} process{'' if after.max_density == 1 else 'es'} a GPU "
            f"holding it, not {before.max_density}"
        )
    return "; ".join(changes)
