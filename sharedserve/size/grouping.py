"""Which models share a server process and which keep replicas of their own. Pure.

Every server process pays its context reserve (``context_reserve_mib``) and its runtime's host
memory once, whatever it holds, so a model that keeps a replica barely busy pays them for little.
The rule, from each model's demand (``size.demand``):

- A model's **load** is what one of its replicas carries of what one can: its rate per replica
  over its capacity (the most QPS per replica at which its profile met its objective).
- **Hot** (load over ``COLD_LOAD``): dedicated replicas. Its replicas are there for its traffic,
  and a neighbour in its process would queue behind it.
- **Measured only alone** (densest 1): dedicated. Its profile never saw a neighbour, and a shared
  server is one.
- **Kept dedicated** (``kept_dedicated``): a model the plan re-planned out of a shared server,
  its p99 as corrected by a verify run over its objective there (``size.run``).
- **Cold** (the rest): gathered into shared servers, first fit in decreasing load, with models of
  as many replicas and the same densest (a shared server's replica holds one replica of each of
  its models; the least densest would bind the others), while the server holds: its models'
  loads sum to at most the utilisation target (one process's time is shared out), their busy
  shares to at most ``GROUP_BUSY_SHARE`` of the target, their memory plus ONE reserve to at most
  ``GROUP_MEMORY_SHARE`` of a GPU, and it has at most ``MAX_GROUP_MODELS`` models. A cold model
  no server takes with another keeps dedicated replicas: a server of one saves nothing.
- **Objectives**, where the plan predicts a server's models together (``p99_of``: ``size.predict``
  simulating its one process, at the densest its models allow): a model joins only if every
  model of the resulting server keeps its predicted p99 within its objective (or was over it
  already without the join: then the server is not the cause, and the plan warns); refused, it tries
  the next server (at most ``_P99_TRIES`` simulated), else opens one, and its reason says whose
  p99 it would have put where. A small model waiting whole calls of a large one is the case
  it guards: verified, two 50 ms models beside resnet50 measured 112-128 ms before this check.

**Paging**, where the fleet allows it (``paging:``): a cold model whose replicas carry at most
``PAGE_LOAD`` of their capacity, and whose objective has room for a page-in over its p99, is
*paged*: its server keeps room for the largest of its paged models, not for each, and runs
``serve --paging lru`` (the others pinned). A server's memory is then its pinned models' plus
its largest paged model's.

Each server's replica pays one runtime in host memory (``size.host``) where its models, each
dedicated, would pay one each.

Each model's ``Serving`` says which it got and why, in words, for the plan. Servers are
coarser pieces to pack than the replicas they hold, so ``size`` packs the fleet both ways and
keeps a process per replica where that takes fewer GPUs (``dedicated``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sharedserve.placement import Replicas
from sharedserve.size.demand import Demand
from sharedserve.size.fleet import PagingSettings, listed
from sharedserve.size.host import process_host_mib

__all__ = [
    "COLD_LOAD",
    "GROUP_BUSY_SHARE",
    "GROUP_MEMORY_SHARE",
    "MAX_GROUP_MODELS",
    "PAGE_LOAD",
    "Grouping",
    "ServerP99",
    "Serving",
    "SharedServer",
    "dedicated",
    "group",
]

COLD_LOAD = 0.5
"""The most of a replica's capacity a model's replicas may carry and still share a server."""
GROUP_MEMORY_SHARE = 0.5
"""The most of a GPU's memory a shared server's replica may take, its one reserve included."""
GROUP_BUSY_SHARE = 0.25
"""The most of the utilisation target a shared server's replica may keep busy. Servers are
packed as the replicas they hold are, and a large one fills the gaps beside hot replicas less
well: examples/fleet-500 (CPU profiles, large busy shares) took 524 GPUs with servers up to the
whole target, 506 up to half, 484 up to a quarter, against 494 with a process per replica."""
MAX_GROUP_MODELS = 32
"""The most models one shared server holds: each is a model to load, page and report."""
PAGE_LOAD = 0.1
"""The most of a replica's capacity a paged model's replicas may carry: its requests come far
apart, so few of them wait for a page-in, and a model over it would be paged back in at once."""
_WINDOW = 16
"""Open servers a cold model is tried against (the newest): first fit over all of them is
quadratic on a fleet of 10,000 models, and an older server is nearly full anyway."""
_P99_TRIES = 3
"""Servers whose predicted p99 a cold model is checked against (each a simulation) before it
opens one of its own: sizing stays fast where many servers would refuse it."""

ServerP99 = Callable[[Sequence[Demand], int], "dict[str, float] | None"]
"""The p99 (ms) the plan predicts for each model of one server process holding ``models`` on a
GPU of ``sharing`` processes (inf: the process cannot keep up); None where the plan does not
predict them together (``size.predict``: some model without service times)."""


@dataclass(frozen=True)
class Serving:
    """How one model is served."""

    model: str
    server: str | None
    """The shared server holding it; None: dedicated replicas."""
    reason: str


@dataclass
class SharedServer:
    """Cold models served together: each of its ``replicas`` is one process holding them all."""

    name: str
    replicas: int
    models: list[Demand] = field(default_factory=list)
    pinned_mib: float = 0.0
    """Its models' memory that stays in GPU memory: all of it without paging."""
    paged: list[str] = field(default_factory=list)
    """Its paged models (``paging: lru``)."""
    paged_mib: float = 0.0
    """Room for its largest paged model."""
    host_memory_mib: float = 0.0
    """One process's host memory: one runtime, and its models (``size.host``)."""
    busy_share: float = 0.0
    load: float = 0.0
    """Its models' loads summed: the share of one process's capacity its traffic takes."""

    @property
    def memory_mib(self) -> float:
        """Its GPU memory need, without the (one) reserve: its pinned models' and room for the
        largest paged one."""
        return self.pinned_mib + self.paged_mib

    @property
    def max_density(self) -> int:
        return min(d.max_density for d in self.models)

    @property
    def cpu_limit(self) -> float | None:
        """The largest CPU limit its models were measured under: one process, their load summed
        within what one took."""
        limits = [d.cpu_limit for d in self.models if d.cpu_limit]
        return max(limits) if limits else None

    def placed_as(self) -> Replicas:
        return Replicas(
            self.name,
            self.replicas,
            self.memory_mib,
            busy_share=self.busy_share,
            max_density=self.max_density,
            spread=max(d.spread for d in self.models),
        )


@dataclass(frozen=True)
class Grouping:
    servers: list[SharedServer]
    serving: dict[str, Serving]
    """Every model's, by name."""

    def requests(self, demands: Sequence[Demand]) -> list[Replicas]:
        """What the placement routine places: dedicated models' replicas, then each server's."""
        own = [d.placed_as() for d in demands if self.serving[d.model].server is None]
        return own + [s.placed_as() for s in self.servers]


def load(d: Demand) -> float:
    """The share of one replica's capacity each of its replicas carries."""
    return d.rate_per_replica / d.capacity_qps if d.capacity_qps > 0 else 1.0


def pageable(d: Demand, paging: PagingSettings | None, p99_factor: float = 1.0) -> bool:
    """Whether ``d`` may be paged: the fleet allows it, it is among the coldest, and its
    objective has room for a page-in over its p99 (times ``p99_factor``, its correction by a
    verify run: ``size.predict.corrections``)."""
    if paging is None or load(d) > PAGE_LOAD:
        return False
    p99 = d.predicted_p99_ms * p99_factor
    return d.slo_p99_ms is None or p99 + paging.page_in_ms <= d.slo_p99_ms


def group(
    demands: Sequence[Demand],
    *,
    gpu_memory_mib: float,
    reserve_mib: float,
    target: float,
    paging: PagingSettings | None = None,
    runtime_mib: float = 0.0,
    p99_of: ServerP99 | None = None,
    p99_factors: Mapping[str, float] | None = None,
    kept_dedicated: Mapping[str, str] | None = None,
) -> Grouping:
    """Each model dedicated or in a shared server, by the rule of the module's docstring;
    ``runtime_mib``: a process's host memory base (``size.host``); ``p99_of``: the plan's
    prediction of a server's models (None: objectives are not checked); ``p99_factors``: the
    corrections of verified models' p99s (``size.predict.corrections``; ``p99_of`` applies them
    already); ``kept_dedicated``: models kept out of shared servers, with why (a corrected p99
    over its objective in one: ``size.run``)."""
    serving: dict[str, Serving] = {}
    cold: list[Demand] = []
    factors, kept = p99_factors or {}, kept_dedicated or {}
    for d in demands:
        share = load(d)
        if d.model in kept:
            serving[d.model] = Serving(d.model, None, kept[d.model])
        elif share > COLD_LOAD:
            serving[d.model] = Serving(
                d.model,
                None,
                f"dedicated: hot, a replica carries {share:.0%} of its capacity "
                f"({d.rate_per_replica:.3g} of {d.capacity_qps:.3g} QPS), over the "
                f"{COLD_LOAD:.0%} a model may bring to a shared server",
            )
        elif d.max_density <= 1:
            serving[d.model] = Serving(
                d.model, None, "dedicated: its profile measured it only alone on a GPU"
            )
        else:
            cold.append(d)
    room = GROUP_MEMORY_SHARE * gpu_memory_mib - reserve_mib
    taken = {d.model for d in demands}
    servers: list[SharedServer] = []
    open_: dict[tuple[int, int], list[SharedServer]] = {}  # by replicas and densest
    refused: dict[str, str] = {}  # why the last server checked would not take a model
    for d in sorted(cold, key=lambda d: (d.replicas, d.max_density, -load(d), d.model)):
        candidates = open_.setdefault((d.replicas, d.max_density), [])
        paged = pageable(d, paging, factors.get(d.model, 1.0))
        home = _home(candidates[-_WINDOW:], d, paged=paged, room=room, target=target,
                     p99_of=p99_of, refused=refused)  # fmt: skip
        if home is None:
            home = SharedServer(_name(len(servers), taken), d.replicas)
            servers.append(home)
            candidates.append(home)
        home.models.append(d)
        if paged:
            home.paged.append(d.model)
            home.paged_mib = max(home.paged_mib, d.memory_mib)
        else:
            home.pinned_mib += d.memory_mib
        home.busy_share += d.busy_share
        home.load += load(d)
        if len(home.models) >= MAX_GROUP_MODELS:
            candidates.remove(home)
    shared: list[SharedServer] = []
    for s in servers:
        if len(s.models) == 1:
            d = s.models[0]
            alone = (
                f"no other cold model with {d.replicas} replica"
                f"{'' if d.replicas == 1 else 's'} fit a shared server beside it"
            )
            why = f"dedicated: cold ({load(d):.0%} of a replica's capacity), but "
            why += refused.get(d.model, alone)
            serving[d.model] = Serving(d.model, None, why)
            continue
        s.name = _name(len(shared), taken)
        s.host_memory_mib = process_host_mib(s.models, runtime_mib)
        shared.append(s)
        for d in s.models:
            serving[d.model] = Serving(d.model, s.name, _shared_reason(s, d, paging, reserve_mib,
                                                                       runtime_mib))  # fmt: skip
    return Grouping(shared, serving)


def _shared_reason(
    s: SharedServer, d: Demand, paging: PagingSettings | None, reserve: float, runtime: float
) -> str:
    why = (
        f"shared in {s.name}: cold, a replica carries {load(d):.0%} of its capacity; "
        f"{len(s.models)} models pay one {reserve:g} MiB reserve"
        + (f" and one {runtime:g} MiB runtime in host memory" if runtime else "")
        + " a replica"
    )
    if d.model in s.paged and paging is not None:
        why += (
            f"; paged (paging: lru): among the coldest (at most {PAGE_LOAD:.0%}), its objective "
            f"has room for a {paging.page_in_ms:g} ms page-in over its p99, and the server keeps "
            f"room for its largest paged model ({s.paged_mib:,.0f} MiB), not for each"
        )
    return why


def _home(
    servers: list[SharedServer],
    d: Demand,
    *,
    paged: bool,
    room: float,
    target: float,
    p99_of: ServerP99 | None,
    refused: dict[str, str],
) -> SharedServer | None:
    """The first of ``servers`` that takes ``d``; why the last it tried for objectives would
    not, into ``refused``."""
    tries = 0
    for s in servers:
        if tries >= _P99_TRIES:
            break
        if not _fits(s, d, paged, room, target):
            continue
        over = None if p99_of is None else _over(s, d, p99_of)
        if over is None:
            return s
        refused[d.model], tries = over, tries + 1
    return None


def _over(s: SharedServer, d: Demand, p99_of: ServerP99) -> str | None:
    """Why ``d`` may not join ``s`` for a model's objective, in words; None: every model of the
    server with it keeps its predicted p99 within its objective."""
    models = [*s.models, d]
    sharing = min(m.max_density for m in models)
    p99 = p99_of(models, sharing)
    if p99 is None:
        return None
    before: dict[str, float] | None = None
    for m in models:
        if m.slo_p99_ms is None or p99[m.model] <= m.slo_p99_ms:
            continue
        if before is None:  # cached simulations: the server as it is, and d in its own process
            before = {**(p99_of(s.models, sharing) or {}), **(p99_of([d], sharing) or {})}
        if before.get(m.model, 0.0) > m.slo_p99_ms:
            continue  # over its objective without the join too: the server is not the cause
        others = listed([o.model for o in s.models])
        at = "past what the process can serve" if p99[m.model] == float("inf") else (
            f"at {p99[m.model]:,.0f} ms")  # fmt: skip
        if m is d:
            return (
                f"beside {others} in a shared server's process its predicted p99 would be "
                f"{at}, over its {m.slo_p99_ms:g} ms objective"
            )
        return (
            f"in a shared server beside {others} it would put {m.model}'s predicted p99 "
            f"{at}, over its {m.slo_p99_ms:g} ms objective"
        )
    return None


def _fits(s: SharedServer, d: Demand, paged: bool, room: float, target: float) -> bool:
    memory = s.pinned_mib + max(s.paged_mib, d.memory_mib) if paged else s.memory_mib + d.memory_mib
    return (
        s.load + load(d) <= target
        and s.busy_share + d.busy_share <= GROUP_BUSY_SHARE * target
        and memory <= room
        and len(s.models) < MAX_GROUP_MODELS
    )


def _name(index: int, taken: set[str]) -> str:
    """``shared-<index>``, unless a model has that name."""
    name = f"shared-{index}"
    while name in taken:
        name = f"{name}-server"
    return name


def dedicated(demands: Sequence[Demand], why: str) -> Grouping:
    """Every model dedicated, each for the reason ``why``."""
    return Grouping([], {d.model: Serving(d.model, None, why) for d in demands})
