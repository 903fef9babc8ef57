"""Forest rows: the upper level's other kind of first decision.

Besides a chunk count for growing trees hop by hop, the upper level's first step offers
*forest rows*, each a whole family of aggregation trees for the instance:

- the trees of the instance's own optimal packing LP (``traffic.collectives.packing_forest``,
  column generation after ForestColl), configured by the row: about how many tree copies
  each shard is split over (in proportion to the kept trees' rates, fewer on small shards:
  ``traffic.packing.packing_plan``), which of each root's trees are kept (the heaviest one,
  two, or all), and how finely each copy is pipelined (one piece, or ``per_hop`` pieces per
  server hop);
- the tree families of the project's collectives that are trees too (``FAMILIES``: the
  packing of rings where it reaches the optimum (``traffic.collectives.optimal_rings``; a
  ring is N path-shaped trees), ``multitree``'s digit-correction trees or tree/ring
  packings, ``ps-sharded``'s stars).

The LP's trees reach the bandwidth optimum; what it does not know is the per-transfer cost,
which makes fewer copies, trees and pieces (or another family) better on small buffers.
Choosing the row is the learned decision. Every row is described by the same features,
computed from its Schedule alone (``schedule_features``), in units that mean the same on
any graph, so the scorer ranks families it has never seen by what they cost.

Pure: networkx, numpy and the packing (scipy); no torch. The packing is solved once per
graph (cached by ``topology.fingerprint``). An LP-forest row's features are measured tree
copy by tree copy (``forest_features``, equal to measuring its Schedule), and its Schedule
is built only when asked for (the chosen row, or training scoring every row).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import networkx as nx
import numpy as np

from agent.chains import longest_chain
from simulator import CostModel, simulate
from topology import fingerprint
from topology.links import GraphMemo
from topology.routing import servers
from traffic.collectives import build, from_builder, optimal_rings, packing_forest
from traffic.cuts import link_capacities, tree_allreduce_rate
from traffic.packing import MIN_CHUNK_BYTES, Packing, packing_plan
from traffic.schedule import DTYPES, Schedule, segments
from traffic.trees import Builder, emit_tree

#: (tree copies per shard, pieces per server hop of height (0: one piece), heaviest trees
#: kept per root (None: all)) of the LP-forest rows, in the order they are offered. The
#: copies are a target (``traffic.packing.packing_plan``: at least one per kept tree, fewer
#: on small shards), so on small buffers several rows build the same Schedule; the
#: Schedule's meta records the pieces it has (``pieces_per_root``).
FOREST_OPTIONS: tuple[tuple[int, float, int | None], ...] = (
    (1, 0, 1), (1, 4, 1), (2, 0, 2), (2, 1, 2), (2, 4, 2),
    (4, 0, 1), (4, 0, 2), (4, 4, 1), (4, 4, 2), (4, 4, None),
)
#: Tree families offered as the project's collectives build them, after the LP-forest rows
#: ("rings" only where they reach the optimum).
FAMILIES = ("rings", "multitree", "ps-sharded")
#: Upper-level feature columns a forest row fills (``agent.env.TreeBuildingEnv``): flag,
#: then ``Forest.features`` (``schedule_features`` and ``Forest.predicted_s``).
FOREST_COLUMNS = (18, 19, 20, 21, 22, 23)
#: Packings kept in memory (one per graph), and forest rows (per graph and setting).
CACHE = 256
_PACKINGS = GraphMemo(CACHE)
_FORESTS = GraphMemo(CACHE)


def packing_for(graph: nx.Graph) -> tuple[tuple[float, bool], Packing]:
    """The (cached) ``traffic.cuts.tree_allreduce_rate`` of ``graph`` and its packing LP's
    trees."""
    def make():
        rate = tree_allreduce_rate(graph)
        return rate, packing_forest(graph, rate)

    return _PACKINGS.get(fingerprint(graph), make)


@dataclass(frozen=True)
class Forest:
    """One forest row: its name, what its Schedule costs (``schedule_features``) and how to
    build the Schedule (``schedule``, built when first asked for: ranking the rows needs
    only their features)."""

    name: str
    make: Callable[[], Schedule] = field(compare=False, repr=False)
    #: Busiest directed link's bytes over its rate (seconds, bandwidth only).
    link_s: float
    #: Longest dependency chain, each transfer costing the fixed cost plus its bytes at its
    #: path's slowest link (seconds), and that chain's length in transfers.
    critical_s: float
    chain: int
    #: Transfers per server.
    per_server: float
    #: Simulated makespans already computed, by cost model (``makespan_s``).
    _makespans: dict = field(default_factory=dict, compare=False, repr=False)

    @cached_property
    def schedule(self) -> Schedule:
        """The row's Schedule (built once)."""
        return self.make()

    def features(self, lb_s: float, fixed_s: float) -> list[float]:
        """The FOREST_COLUMNS values (``lb_s``: the lower bound, ``fixed_s``: the fixed cost
        of one transfer)."""
        return [1.0, self.link_s / lb_s, math.log1p(self.critical_s / lb_s),
                math.log1p(self.chain * fixed_s / lb_s),
                math.log1p(self.per_server * fixed_s / lb_s),
                math.log1p(self.predicted_s() / lb_s)]

    def makespan_s(self, graph: nx.Graph, cost: CostModel) -> float:
        """Simulated makespan (seconds) of the row's Schedule on ``graph`` (the graph it was
        built for) under ``cost``; computed once per cost model (rows are cached per graph,
        and training scores every row before episodes pick them)."""
        if cost not in self._makespans:
            self._makespans[cost] = float(simulate(graph, self.schedule,
                                                   **cost.kwargs()).makespan_s)
        return self._makespans[cost]

    def predicted_s(self) -> float:
        """A closed-form guess of the makespan: the busiest link's time or the critical
        chain's, whichever is longer (the ``predicted`` hand rule picks the smallest)."""
        return max(self.link_s, self.critical_s)


class Costs:
    """What ``schedule_features`` measures, accumulated transfer by transfer through the
    ``traffic.trees.Builder.add`` interface, so a tree emitter can be measured without
    building its Schedule. Transfer ids are local: 0, 1, ... in the order added."""

    def __init__(self, rate_Bps: dict, unit: int, fixed_s: float) -> None:
        self.rate_Bps, self.unit, self.fixed_s = rate_Bps, unit, fixed_s
        #: Bytes per directed link (whole numbers, so sums do not depend on their order).
        self.load: dict[tuple[str, str], float] = {}
        self.finish: list[tuple[float, int]] = []
        #: The latest (finish time, chain length) of any transfer, and the transfers counted.
        self.last: tuple[float, int] = (0.0, 0)
        self.transfers = 0

    def add(self, src: str, dst: str, offset: int, count: int, op: str,
            path, deps=()) -> int:
        """Account for one transfer (``traffic.trees.Builder.add``); returns its local id."""
        nbytes = count * self.unit
        links = list(zip(path, path[1:]))
        slowest = min(self.rate_Bps[link] for link in links)
        for link in links:
            self.load[link] = self.load.get(link, 0.0) + nbytes
        start, depth = max((self.finish[d] for d in deps if d is not None), default=(0.0, 0))
        done = (start + self.fixed_s + nbytes / slowest, depth + 1)
        self.finish.append(done)
        self.last = max(self.last, done)
        self.transfers += 1
        return len(self.finish) - 1

    def merge(self, other: Costs | TreeCopy) -> None:
        """Add the transfers ``other`` measured (independent of these: no dependency
        between the two; later ``add`` calls cannot depend on them)."""
        for link, nbytes in other.load.items():
            self.load[link] = self.load.get(link, 0.0) + nbytes
        self.transfers += other.transfers
        self.last = max(self.last, other.last)

    def features(self, servers: int) -> tuple[float, float, int, float]:
        """(link_s, critical_s, chain, per_server) (see ``Forest``)."""
        link_s = max((b / self.rate_Bps[link] for link, b in self.load.items()), default=0.0)
        return (link_s, *self.last, self.transfers / max(1, servers))


def _rates(graph: nx.Graph, goodput: float) -> dict[tuple[str, str], float]:
    """Bytes per second of every directed link."""
    return {link: bits / 8 for link, bits in link_capacities(graph, goodput).items()}


def schedule_features(graph: nx.Graph, schedule: Schedule, goodput: float,
                      fixed_s: float) -> tuple[float, float, int, float]:
    """(link_s, critical_s, chain, per_server) of a Schedule (see ``Forest``)."""
    costs = Costs(_rates(graph, goodput), DTYPES[schedule.dtype], fixed_s)
    local = {}
    for t in schedule.transfers:
        local[t.id] = costs.add(t.src, t.dst, t.offset, t.count, t.op, t.path,
                                [local.get(d) for d in t.deps])
    return costs.features(len(servers(graph)))


def _forest_plan(graph: nx.Graph, option: tuple[int, float, int | None], size_bytes: int,
                 dtype: str) -> list:
    copies, per_hop, top = option
    return packing_plan(packing_for(graph)[1].top(top), size_bytes // DTYPES[dtype],
                        copies=copies, chunks_per_hop=per_hop,
                        min_chunk=max(1, MIN_CHUNK_BYTES // DTYPES[dtype]))


def forest_schedule(graph: nx.Graph, option: tuple[int, float, int | None], size_bytes: int,
                    dtype: str) -> Schedule:
    """The Schedule of LP-forest option ``option`` (see FOREST_OPTIONS): every tree copy
    reduced up and broadcast down (``traffic.trees.emit_tree``)."""
    copies, per_hop, top = option
    builder = Builder()
    plan = _forest_plan(graph, option, size_bytes, dtype)
    for tree, down_tree, root, off, cnt, chunks in plan:
        emit_tree(builder, tree, root, off, cnt, chunks, down_tree)
    return from_builder(graph, size_bytes, dtype, builder, "drl", style="forest", copies=copies,
                        pieces_per_hop=per_hop, trees_per_root="all" if top is None else top,
                        pieces_per_root=round(len(plan) / max(1, len({e[2] for e in plan})), 2))


def forest_features(graph: nx.Graph, option: tuple[int, float, int | None], size_bytes: int,
                    dtype: str, goodput: float, fixed_s: float,
                    memo: dict | None = None) -> tuple[float, float, int, float]:
    """``schedule_features`` of ``forest_schedule(graph, option, size_bytes, dtype)``, without
    building it: every tree copy is an independent chain of transfers, measured once per
    distinct (trees, root, elements, pieces) (``memo``: shared between the options of one
    graph, buffer, dtype, goodput and fixed cost; it keys trees by id, so they must outlive
    it, as the cached packing's do)."""
    memo = {} if memo is None else memo
    rate = _rates(graph, goodput)
    total = Costs(rate, DTYPES[dtype], fixed_s)
    for tree, down_tree, root, _, cnt, chunks in _forest_plan(graph, option, size_bytes, dtype):
        shape = (id(tree), id(down_tree), root)
        if shape not in memo:
            memo[shape] = Period(tree, down_tree, root, rate)
        if (shape, cnt, chunks) not in memo:
            memo[shape, cnt, chunks] = memo[shape].cost(cnt, chunks, DTYPES[dtype], fixed_s)
        total.merge(memo[shape, cnt, chunks])
    return total.features(len(servers(graph)))


@dataclass(frozen=True)
class TreeCopy:
    """What ``Costs`` measures of one tree copy's transfers (``Costs.merge`` takes it)."""

    load: dict[tuple[str, str], float]
    last: tuple[float, int]
    transfers: int


class Period:
    """One piece of a tree copy's pipelined reduce and broadcast (``emit_tree`` recorded on
    two pieces): each transfer's dependencies within its piece and on the previous piece,
    its path's slowest rate and the links it crosses. ``cost`` measures any piece count
    with ``agent.chains.longest_chain``."""

    def __init__(self, tree, down_tree, root: str, rate_Bps: dict) -> None:
        recorded = _Recorder()
        emit_tree(recorded, tree, root, 0, 2, 2, down_tree)
        size = len(recorded.deps) // 2
        first, second = recorded.deps[:size], recorded.deps[size:]
        same = [[d - size for d in deps if d >= size] for deps in second]
        prev = [[d for d in deps if d < size] for deps in second]
        if len(second) != size or first != same or any(
                d >= t for t, deps in enumerate(same) for d in deps):
            raise RuntimeError("emit_tree's pieces are not alike: Period cannot measure them")
        self.same_ptr, self.same_idx = _csr(same)
        self.prev_ptr, self.prev_idx = _csr(prev)
        links = [list(zip(path, path[1:])) for path in recorded.paths[:size]]
        self.rate = np.array([min(rate_Bps[link] for link in crossed) for crossed in links])
        self.crossings = Counter(link for crossed in links for link in crossed)

    def cost(self, count: int, chunks: int, unit: int, fixed_s: float) -> TreeCopy:
        """What the tree copy costs for ``count`` elements of ``unit`` bytes in ``chunks``
        pieces (as ``emit_tree`` cuts them)."""
        pieces = segments(count, max(1, min(chunks, count)))
        piece_bytes = np.array([cnt * unit for _, cnt in pieces], dtype=float)
        finish, chain = longest_chain(self.same_ptr, self.same_idx, self.prev_ptr,
                                      self.prev_idx, self.rate, piece_bytes, fixed_s)
        load = {link: float(n * count * unit) for link, n in self.crossings.items()}
        return TreeCopy(load, (float(finish), int(chain)), len(self.rate) * len(pieces))


class _Recorder:
    """The paths and dependencies of transfers (``traffic.trees.Builder.add``)."""

    def __init__(self) -> None:
        self.paths: list = []
        self.deps: list[list[int]] = []

    def add(self, src: str, dst: str, offset: int, count: int, op: str, path,
            deps=()) -> int:
        self.paths.append(path)
        self.deps.append([d for d in deps if d is not None])
        return len(self.deps) - 1


def _csr(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(lists) + 1, np.int64)
    ptr[1:] = np.cumsum([len(items) for items in lists])
    return ptr, np.array([i for items in lists for i in items], np.int64)


def option_name(option: tuple[int, float, int | None]) -> str:
    """``lp 4x4/hop top2``: the row's name in tables."""
    copies, per_hop, top = option
    return (f"lp {copies}x{'1 piece' if not per_hop else f'{per_hop:g}/hop'}"
            f" top{'all' if top is None else top}")


def forests(graph: nx.Graph, size_bytes: int, dtype: str, goodput: float, fixed_s: float,
            count: int | None = None) -> list[Forest]:
    """The first ``count`` (default all) forest rows of ``graph`` for a buffer of
    ``size_bytes``: FOREST_OPTIONS, then FAMILIES (cached: training builds an env per
    episode)."""
    return _FORESTS.get((fingerprint(graph), size_bytes, dtype, goodput, fixed_s, count),
                        lambda: _forests(graph, size_bytes, dtype, goodput, fixed_s, count))


def _forests(graph: nx.Graph, size_bytes: int, dtype: str, goodput: float, fixed_s: float,
             count: int | None) -> list[Forest]:
    out: list[Forest] = []
    memo: dict = {}
    for option in FOREST_OPTIONS:
        if count is not None and len(out) == count:
            return out
        out.append(Forest(option_name(option),
                          lambda o=option: forest_schedule(graph, o, size_bytes, dtype),
                          *forest_features(graph, option, size_bytes, dtype, goodput, fixed_s,
                                           memo)))
    makers = [("rings", lambda: optimal_rings(graph, size_bytes, dtype, packing_for(graph)[0]))]
    makers += [(algo, lambda a=algo: build(a, graph, size_bytes, dtype)) for algo in FAMILIES[1:]]
    for name, make in makers:
        if count is not None and len(out) == count:
            break
        schedule = make()
        if schedule is None:
            continue
        out.append(Forest(name, lambda s=schedule: s,
                          *schedule_features(graph, schedule, goodput, fixed_s)))
    return out


def predicted_ranks(rows: list[Forest]) -> np.ndarray:
    """Each row's rank under ``Forest.predicted_s`` (0: the smallest; ties in row order)."""
    order = np.argsort([f.predicted_s() for f in rows], kind="stable")
    return np.argsort(order, kind="stable")


def best_predicted(rows: list[Forest]) -> int:
    """Index of the row ``Forest.predicted_s`` likes best (rank 0 of ``predicted_ranks``)."""
    return int(np.argmin(predicted_ranks(rows)))
