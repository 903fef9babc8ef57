"""The two Gymnasium environments of the hierarchical scheduler, over the real simulator.

Upper level, flow-tree building (``TreeBuildingEnv``): the policy first chooses how many
chunks each server's buffer is cut into (one of ``EnvConfig.chunk_options``; chunk c is
owned by server c mod N), then grows one spanning tree per chunk, hop by hop: every step
attaches one server outside the chunk's tree to a server inside it, over one of the
interned server-to-server paths (``agent.trees.Overlay``). Observation: one feature row per
offered attachment (``TREE_ROWS`` at most, see ``TreeBuildingEnv._attachments``), in units
that mean the same on any topology (link loads in lower bounds, depths and fan-outs as
fractions of the server count, link rates as fractions of the fastest), so one shared
scorer works on every graph. After the last tree the chunks' trees become a ``Plan``, the
``scheduler`` orders its transfers and the simulator runs the Schedule under the
configured cost model (fixed cost per transfer, latency per link, goodput). The reward, at
the last step only, is ``-makespan / reference_s`` (the caller's reference, by default the
lower bound; 0 for a forest row when the env does not ``score``).

Lower level, workload scheduling (``WorkloadEnv``): given a Plan, build rounds step by step.
The candidates are the ready transfers (every data dependency placed in an earlier round)
that conflict with nothing in the current round; two transfers *conflict* when their paths
share a directed link. The first ``slots`` candidates (oldest ready first, then longest
remaining chain) fill rows 0..slots-1, row ``slots`` is "end the round". A round also ends by
itself when nothing more fits. When every transfer is placed the rounds become the
Schedule (``Plan.schedule``: per sending link, round order), which is simulated; reward at
the last step ``(M0 - makespan) / lower_bound``, 0 before, where M0 is the plan's makespan
with data dependencies only (a baseline the scheduler cannot change, so the reward measures
what the ordering gained). When the rounds lose to M0 the env's result (``schedule``,
``makespan_s``) is the dependency-only Schedule: the rounds can only make things better.
``rounds_result`` is the rounds' own result, by which training scores its sampled episodes
unless ``TrainConfig.sampled_keep_better``.

Actions are Discrete; the mask of legal ones is ``info["action_mask"]`` (int8). A masked
action is replaced by the first legal one and flagged ``info["invalid_action"]`` so random
actions (as ``check_env`` sends) stay safe; the trained policies sample from masked
distributions and never send one. Both environments pass
``gymnasium.utils.env_checker.check_env``. The hierarchy is plain composition: the upper
env's ``scheduler`` runs the lower level on its plan (training runs the lower PPO policy in
a ``WorkloadEnv`` there), and ``WorkloadEnv`` takes its plan from ``reset(options={"plan":
...})`` or, without one, from random tree choices.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import gymnasium as gym
import networkx as nx
import numpy as np

from agent.forest import FOREST_COLUMNS, forests, predicted_ranks
from agent.plan import Plan
from agent.trees import Tree, overlay_for
from simulator import CostModel, lower_bound, simulate
from traffic.schedule import DTYPES, Schedule

#: Chunks per server the upper level chooses between (its first decision).
CHUNK_OPTIONS = (1, 2, 4)
#: Attachment rows offered per tree-building step.
TREE_ROWS = 16
#: Features per upper-level row (see ``TreeBuildingEnv``; 18-23: ``agent.forest``).
F_UP = 24
#: Upper-row column holding a hand rule's rank / TREE_ROWS (the greedy least-load key's on
#: attachment rows, ``predicted``'s on forest rows, 1 on chunk rows beside forest rows, else
#: 0): the policy's prior logit is -strength x TREE_ROWS x this column (``agent.networks``).
RANK_COL = 16
#: Features per lower-level row (see ``WorkloadEnv._observe``).
F_LO = 12
#: Observations are clipped to [0, OBS_HIGH].
OBS_HIGH = 1e3


@dataclass(frozen=True)
class EnvConfig:
    """What both levels optimise."""

    #: Buffer every server contributes.
    size_bytes: int = 8 * 2**20
    dtype: str = "float32"
    #: Chunks per server the upper level may choose (each chunk gets its own tree).
    chunk_options: tuple[int, ...] = CHUNK_OPTIONS
    #: Lower-level candidate rows (ready transfers shown per step).
    slots: int = 16
    #: The simulator's cost model (``simulator.CostModel``; defaults: bandwidth only).
    startup_s: float = 0.0
    hop_latency_s: float = 0.0
    goodput: float = 1.0
    #: The attachment rows' rank key: peak link load after the hop plus this many chunk
    #: link-times per link of the hop (the greedy least-load rule the prior starts from).
    link_weight: float = 0.25
    #: Offer the packed-forest rows (``agent.forest``) at the first decision.
    forest_rows: bool = True

    def __post_init__(self) -> None:
        for name in ("size_bytes", "slots"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r} is not one of {', '.join(DTYPES)}")
        options = tuple(self.chunk_options)
        if not options or any(isinstance(c, bool) or not isinstance(c, int) or c < 1
                              for c in options) or len(options) > TREE_ROWS:
            raise ValueError(f"chunk_options must be 1..{TREE_ROWS} integers >= 1, "
                             f"got {self.chunk_options!r}")
        object.__setattr__(self, "chunk_options", options)
        if not self.link_weight >= 0:
            raise ValueError(f"link_weight must be >= 0, got {self.link_weight!r}")
        self.cost()

    def cost(self) -> CostModel:
        """The simulator's cost model (validates it)."""
        return CostModel(self.startup_s, self.hop_latency_s, self.goodput)

    def at(self, size_bytes: int, cost: CostModel) -> EnvConfig:
        """This config for a buffer of ``size_bytes`` under the cost model ``cost``."""
        return replace(self, size_bytes=int(size_bytes), startup_s=cost.startup_s,
                       hop_latency_s=cost.hop_latency_s, goodput=cost.goodput)


Scheduler = Callable[[Plan], tuple[Schedule, float]]


def _box(rows: int, cols: int) -> gym.spaces.Box:
    return gym.spaces.Box(0.0, OBS_HIGH, shape=(rows, cols), dtype=np.float32)


def simulate_plan(plan: Plan, rounds: list[list[int]] | None, cfg: EnvConfig,
                  algo: str = "drl") -> tuple[Schedule, float]:
    """Schedule and simulated makespan (seconds) of ``plan`` ordered by ``rounds``."""
    schedule = plan.schedule(rounds, algo=algo)
    result = simulate(plan.overlay.graph, schedule, **cfg.cost().kwargs())
    # A plain float: it ends up in checkpoints, which load with weights_only.
    return schedule, float(result.makespan_s)


class TreeBuildingEnv(gym.Env):
    """Upper level: choose the chunk count, then grow every chunk's tree hop by hop (see
    the module docstring).

    Attachment rows (columns): 0 chunk-row flag (0); 1 whether the parent is the root;
    2-3 unused (0); 4 peak load on the
    hop's links after adding it and 5 the rise of the network's peak load (in chunk
    link-times of the slowest link); 6 mean load now on the hop's links; 7 links of the
    hop / 4; 8 whether a server relays it; 9 depth of the new server / (N-1); 10 children
    the parent already has / 4; 11 whether the parent is the server attached last (the
    tree's tip, so chains can grow); 12 1 / (1 + this tree's hops already at the parent on
    the link the hop enters it by); 13 slowest link rate on the hop / fastest in the graph;
    14 share of this tree built; 15 share of the chunks built; 16 rank of the row under the
    greedy key (``EnvConfig.link_weight``) / TREE_ROWS; 17 log(1 + fixed cost of a
    transfer / its chunk's link time). Loads are in lower bounds unless noted.

    Chunk rows (the first step, one per feasible option): 0 flag (1); 1 chunks per server
    / 4; 2 log(1 + fixed cost of a transfer / a chunk's link time); 3 log2(N) / 6;
    17 = 2. Forest rows (the first step, after the chunk rows, ``EnvConfig.forest_rows``):
    0 flag (1); 3 log2(N) / 6; 16 rank of the row under ``agent.forest.Forest.predicted_s``
    / TREE_ROWS; 18-23 ``agent.forest.Forest.features``. Where forest rows are offered, the
    chunk rows carry rank 1 in column 16: the prior starts the first decision at the
    ``predicted`` hand rule, growing trees hop by hop tied with the second forest row.
    Choosing a forest row ends the episode: its Schedule is simulated as it is (its
    pipeline's dependencies order each link's pieces; the lower level has nothing to
    order)."""

    metadata = {"render_modes": []}

    def __init__(self, graph: nx.Graph, config: EnvConfig = EnvConfig(),
                 scheduler: Scheduler | None = None, reference_s: float | None = None,
                 score: bool = True) -> None:
        self.cfg = config
        #: False: a chosen forest row's Schedule is not simulated (makespan and ratio NaN,
        #: reward 0): deployment needs the Schedule, not its score.
        self.score = score
        self.ov = ov = overlay_for(graph)
        self.n = ov.n
        self.lb_s = lower_bound(graph, config.size_bytes, goodput=config.goodput)
        self.reference_s = reference_s or self.lb_s
        self.scheduler = scheduler or (lambda plan: fifo_schedule(plan, self.cfg))
        elements = config.size_bytes // DTYPES[config.dtype]
        self.options = [c for c in config.chunk_options if c * ov.n <= elements]
        if not self.options:
            raise ValueError(f"size_bytes {config.size_bytes} cannot be cut into "
                             f"{min(config.chunk_options) * ov.n} chunks of {config.dtype}")
        #: Bytes per second each directed link moves (the dummy last: infinite).
        self.rate_Bps = ov.cap_Bps * config.goodput
        real = ov.cap_Bps[:-1]
        self.hop_rate = ov.cap_Bps[ov.hop_fwd].min(axis=1) / real.max()
        self.mean_hop_links = float(ov.hop_len.mean())
        self.graph = graph
        room = TREE_ROWS - len(self.options)
        self.forests = (forests(graph, config.size_bytes, config.dtype, config.goodput,
                                self.fixed_s, room)
                        if config.forest_rows and ov.n > 1 else [])
        self.observation_space = _box(TREE_ROWS, F_UP)
        self.action_space = gym.spaces.Discrete(TREE_ROWS)

    def _cost_ratio(self, chunks: int) -> float:
        """log(1 + a transfer's fixed cost / its chunk's time on the slowest link)."""
        chunk_s = self.cfg.size_bytes / chunks / float(self.rate_Bps[:-1].min())
        return math.log1p(self.fixed_s / chunk_s)

    @property
    def fixed_s(self) -> float:
        """Fixed cost of one transfer over a mean hop."""
        return self.cfg.startup_s + self.cfg.hop_latency_s * self.mean_hop_links

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start before the chunk-count decision, with nothing routed."""
        super().reset(seed=seed)
        self.chunks = 0
        self.load = np.zeros(len(self.ov.cap_Bps))
        self.trees: list[Tree] = []
        return self._observe()

    # -- tree state -------------------------------------------------------------------

    def _start_tree(self) -> None:
        n = self.n
        self.root = len(self.trees) % n
        self.inside = np.zeros(n, bool)
        self.inside[self.root] = True
        self.depth = np.zeros(n, int)
        self.kids = np.zeros(n, int)
        self.parent = [self.root] * n
        self.hop_of = [-1] * n
        self.tip = self.root
        self.attached = 1
        #: Per server of this tree, how many of its tree hops use each neighbour.
        self.nic_use: list[dict[int, int]] = [{} for _ in range(n)]

    def _attachments(self) -> tuple[np.ndarray, np.ndarray]:
        """(hop ids, their rank keys) offered this step, best key first. The key of a hop is
        the peak load on its links after adding it plus ``link_weight`` chunk link-times per
        link. Three kinds of rows, per outside server its best hop by the key: into any
        tree server, into the tip (the server attached last: chains), into the root
        (stars); each kind keeps its ``TREE_ROWS // 4`` best, the rest of the rows go to
        the best remaining by key."""
        ov = self.ov
        cand = np.flatnonzero(~self.inside[ov.hop_src] & self.inside[ov.hop_dst])
        links = ov.hop_links[cand]
        after = (self.load[links] + self.inc[links]).max(axis=1)
        key = after + self.cfg.link_weight * self.unit * ov.hop_len[cand]
        order = np.argsort(key, kind="stable")
        dst = ov.hop_dst[cand[order]]
        kinds = []
        for keep in (slice(None), dst == self.tip, dst == self.root):
            sub = order[keep]
            _, first = np.unique(ov.hop_src[cand[sub]], return_index=True)
            kinds.append(sorted(sub[first].tolist(), key=lambda j: (key[j], j)))
        rows: list[int] = []
        for kind in kinds:
            rows += [j for j in kind[: TREE_ROWS // 4] if j not in rows]
        rest = sorted({j for kind in kinds for j in kind} - set(rows), key=lambda j: (key[j], j))
        rows = sorted(rows + rest[: TREE_ROWS - len(rows)], key=lambda j: (key[j], j))
        return cand[rows], key[rows]

    def _observe(self) -> tuple[np.ndarray, dict]:
        obs = np.zeros((TREE_ROWS, F_UP), np.float32)
        mask = np.zeros(TREE_ROWS, np.int8)
        if not self.chunks:
            for i, c in enumerate(self.options):
                ratio = self._cost_ratio(c * self.n)
                obs[i, [0, 1, 2, 3, 17]] = (1.0, c / 4, ratio, math.log2(self.n) / 6, ratio)
                mask[i] = 1
            first = len(self.options)
            if self.forests:
                obs[:first, RANK_COL] = 1 / TREE_ROWS
            ranks = predicted_ranks(self.forests)
            for i, forest in enumerate(self.forests):
                obs[first + i, [0, 3, RANK_COL]] = (1.0, math.log2(self.n) / 6,
                                                    ranks[i] / TREE_ROWS)
                obs[first + i, list(FOREST_COLUMNS)] = forest.features(self.lb_s, self.fixed_s)
                mask[first + i] = 1
            self.offered = np.arange(first + len(self.forests))
        else:
            ov = self.ov
            hops, _ = self._attachments()
            self.offered = hops
            links = ov.hop_links[hops]
            real = links != ov.dummy
            now = self.load[links]
            after = (now + self.inc[links]).max(axis=1)
            peak = self.load.max()
            u = ov.hop_dst[hops]
            k = len(hops)
            obs[:k, 1] = u == self.root
            obs[:k, 4] = after / self.lb_s
            obs[:k, 5] = np.maximum(after - peak, 0.0) / self.unit
            obs[:k, 6] = (now * real).sum(1) / real.sum(1) / self.lb_s
            obs[:k, 7] = ov.hop_len[hops] / 4
            obs[:k, 8] = ov.hop_relayed[hops]
            obs[:k, 9] = (self.depth[u] + 1) / (self.n - 1)
            obs[:k, 10] = self.kids[u] / 4
            obs[:k, 11] = u == self.tip
            obs[:k, 12] = [1.0 / (1 + self.nic_use[w].get(int(ov.hop_in[h]), 0))
                           for w, h in zip(u, hops, strict=True)]
            obs[:k, 13] = self.hop_rate[hops]
            obs[:k, 14] = self.attached / self.n
            obs[:k, 15] = len(self.trees) / self.chunks
            obs[:k, RANK_COL] = np.arange(k) / TREE_ROWS
            obs[:k, 17] = self.cost_ratio
            mask[:k] = 1
        self.mask = mask
        return np.clip(obs, 0.0, OBS_HIGH), {"action_mask": mask.copy()}

    def step(self, action):
        """Take chunk option ``action`` (first step) or attachment row ``action``."""
        action = int(action)
        invalid = not (0 <= action < TREE_ROWS and self.mask[action])
        if invalid:
            action = int(np.flatnonzero(self.mask)[0])
        if not self.chunks and action >= len(self.options):
            return self._end_forest(self.forests[action - len(self.options)], invalid)
        if not self.chunks:
            self.chunks = self.options[action] * self.n
            self.chunk_bytes = self.cfg.size_bytes / self.chunks
            self.inc = self.chunk_bytes / self.rate_Bps
            self.unit = float(self.inc[:-1].max())
            self.cost_ratio = self._cost_ratio(self.chunks)
            self._start_tree()
        else:
            self._attach(int(self.offered[action]))
        if len(self.trees) < self.chunks:
            obs, info = self._observe()
            info["invalid_action"] = invalid
            return obs, 0.0, False, False, info
        plan = Plan(self.ov, self.trees, self.cfg.size_bytes, self.cfg.dtype)
        schedule, makespan = self.scheduler(plan)
        if schedule is not None:
            schedule = replace(schedule, meta={**schedule.meta,
                                               "chunks_per_server": self.chunks // self.n})
        self.mask = np.zeros(TREE_ROWS, np.int8)
        info = {"action_mask": self.mask.copy(), "invalid_action": invalid,
                "makespan_s": makespan, "schedule": schedule, "plan": plan,
                "chunks_per_server": self.chunks // self.n,
                "ratio_to_lower_bound": makespan / self.lb_s}
        return (np.zeros((TREE_ROWS, F_UP), np.float32),
                float(-makespan / self.reference_s), True, False, info)

    def forest_makespan(self, forest) -> float:
        """Simulated makespan (seconds) of forest row ``forest`` under this env's costs."""
        return forest.makespan_s(self.graph, self.cfg.cost())

    def _end_forest(self, forest, invalid: bool):
        schedule = replace(forest.schedule, algo="drl",
                           meta={**forest.schedule.meta, "forest": forest.name})
        makespan = self.forest_makespan(forest) if self.score else math.nan
        self.mask = np.zeros(TREE_ROWS, np.int8)
        info = {"action_mask": self.mask.copy(), "invalid_action": invalid,
                "makespan_s": makespan, "schedule": schedule, "plan": None,
                "forest": forest.name, "chunks_per_server": 0,
                "ratio_to_lower_bound": makespan / self.lb_s}
        reward = float(-makespan / self.reference_s) if self.score else 0.0
        return np.zeros((TREE_ROWS, F_UP), np.float32), reward, True, False, info

    def _attach(self, hop: int) -> None:
        ov = self.ov
        v, u = int(ov.hop_src[hop]), int(ov.hop_dst[hop])
        self.inside[v] = True
        self.depth[v] = self.depth[u] + 1
        self.kids[u] += 1
        self.parent[v], self.hop_of[v] = u, hop
        self.tip = v
        self.attached += 1
        for w, nb in ((u, int(ov.hop_in[hop])), (v, int(ov.hop_out[hop]))):
            self.nic_use[w][nb] = self.nic_use[w].get(nb, 0) + 1
        links = ov.hop_links[hop]
        np.add.at(self.load, links, self.inc[links])
        self.load[ov.dummy] = 0.0
        if self.attached == self.n:
            self.trees.append(Tree(self.root, tuple(self.parent), tuple(self.hop_of), "built"))
            if len(self.trees) < self.chunks:
                self._start_tree()


class WorkloadEnv(gym.Env):
    """Lower level: place the plan's transfers into link-disjoint rounds (see the module
    docstring)."""

    metadata = {"render_modes": []}

    def __init__(self, graph: nx.Graph, config: EnvConfig = EnvConfig()) -> None:
        self.cfg = config
        self.graph = graph
        self.ov = overlay_for(graph)
        self.lb_s = lower_bound(graph, config.size_bytes, goodput=config.goodput)
        self.slots = config.slots
        self.observation_space = _box(self.slots + 1, F_LO)
        self.action_space = gym.spaces.Discrete(self.slots + 1)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start scheduling ``options["plan"]`` (default: trees chosen at random);
        ``options["baseline_s"]``, when known, saves simulating the plan's baseline."""
        super().reset(seed=seed)
        plan = (options or {}).get("plan")
        self.baseline_s = (options or {}).get("baseline_s")
        if plan is None:
            plan = random_plan(self.graph, self.cfg, self.np_random)
        self.plan = plan
        n = len(plan.tasks)
        self.kids: list[list[int]] = [[] for _ in range(n)]
        for i, t in enumerate(plan.tasks):
            for d in t.deps:
                self.kids[d].append(i)
        self.missing = np.array([len(t.deps) for t in plan.tasks])
        self.placed = np.zeros(n, bool)
        self.ready_round = np.full(n, -1)
        self.ready = [i for i in range(n) if self.missing[i] == 0]
        self.ready_round[self.ready] = 0
        self.round = 0
        self.used = np.zeros(len(self.ov.cap_Bps), bool)
        self.current: list[int] = []
        self.rounds: list[list[int]] = []
        n_links = len(self.ov.cap_Bps)
        last = plan.links[np.arange(n), (plan.links != self.ov.dummy).sum(1) - 1]
        self.last_link = last
        self.send_backlog = np.bincount(plan.first_link, minlength=n_links).astype(float)
        self.recv_backlog = np.bincount(last, minlength=n_links).astype(float)
        self.chunk_left = np.bincount([t.chunk for t in plan.tasks]).astype(float)
        self.chunk_size = self.chunk_left.copy()
        self.tails = np.array([t.tail for t in plan.tasks], float)
        self.hops = (plan.links != self.ov.dummy).sum(1).astype(float)
        return self._observe()

    def _candidates(self) -> np.ndarray:
        ready = np.array(self.ready, dtype=int)
        if not ready.size:
            return ready
        ok = ~self.used[self.plan.links[ready]].any(axis=1)
        ready = ready[ok]
        order = np.lexsort((ready, -self.tails[ready], self.ready_round[ready]))
        return ready[order]

    def _observe(self) -> tuple[np.ndarray, dict]:
        cands = self._candidates()
        self.cands = cands[: self.slots]
        obs = np.zeros((self.slots + 1, F_LO), np.float32)
        mask = np.zeros(self.slots + 1, np.int8)
        glob = (self.used[:-1].mean(), self.placed.mean(), min(len(cands), 4 * self.slots)
                / (4 * self.slots))
        c = self.cands
        if c.size:
            plan = self.plan
            obs[: c.size, 0] = [plan.tasks[i].op == "reduce" for i in c]
            obs[: c.size, 1] = self.tails[c] / self.tails.max()
            obs[: c.size, 2] = (self.round - self.ready_round[c]) / 8.0
            obs[: c.size, 3] = self.hops[c] / self.hops.max()
            obs[: c.size, 4] = (self.send_backlog[plan.first_link[c]]
                                / max(self.send_backlog.max(), 1.0))
            obs[: c.size, 5] = (self.recv_backlog[self.last_link[c]]
                                / max(self.recv_backlog.max(), 1.0))
            chunks = np.array([plan.tasks[i].chunk for i in c])
            obs[: c.size, 6] = 1.0 - self.chunk_left[chunks] / self.chunk_size[chunks]
            obs[: c.size, 7] = np.arange(c.size) / self.slots
            mask[: c.size] = 1
        obs[:, 8:11] = glob
        obs[self.slots, 11] = 1.0
        if self.current and c.size:
            mask[self.slots] = 1
        self.mask = mask
        return np.clip(obs, 0.0, OBS_HIGH), {"action_mask": mask.copy()}

    def _close_round(self) -> None:
        self.rounds.append(self.current)
        self.round += 1
        for i in self.current:
            for k in self.kids[i]:
                self.missing[k] -= 1
                if self.missing[k] == 0:
                    self.ready.append(k)
                    self.ready_round[k] = self.round
        self.current = []
        self.used[:] = False

    def step(self, action):
        """Place candidate row ``action`` in the current round, or end the round."""
        action = int(action)
        invalid = not (0 <= action <= self.slots and self.mask[action])
        if invalid:
            action = int(np.flatnonzero(self.mask)[0])
        if action == self.slots:
            self._close_round()
        else:
            i = int(self.cands[action])
            self.placed[i] = True
            self.ready.remove(i)
            self.current.append(i)
            self.used[self.plan.links[i]] = True
            self.used[self.ov.dummy] = False
            self.send_backlog[self.plan.first_link[i]] -= 1
            self.recv_backlog[self.last_link[i]] -= 1
            self.chunk_left[self.plan.tasks[i].chunk] -= 1
            if not self._candidates().size:
                self._close_round()
        if not self.placed.all():
            obs, info = self._observe()
            info["invalid_action"] = invalid
            return obs, 0.0, False, False, info
        if self.current:
            self._close_round()
        self.schedule, rounds_s = simulate_plan(self.plan, self.rounds, self.cfg)
        self.makespan_s = rounds_s
        #: What the rounds alone give (the sampled training episodes are scored by it).
        self.rounds_result = (self.schedule, rounds_s)
        if self.baseline_s is None or self.baseline_s < rounds_s:
            base, self.baseline_s = simulate_plan(self.plan, None, self.cfg)
            # Rounds only add dependencies; where they lose to the data dependencies alone
            # (many staggered chains of relayed hops, as on DCell(3,1)) the plan keeps the
            # latter. The reward still scores the rounds.
            if self.baseline_s < rounds_s:
                self.schedule, self.makespan_s = base, self.baseline_s
        self.mask = np.zeros(self.slots + 1, np.int8)
        info = {"action_mask": self.mask.copy(), "invalid_action": invalid,
                "makespan_s": self.makespan_s, "schedule": self.schedule,
                "ratio_to_lower_bound": self.makespan_s / self.lb_s,
                "rounds_makespan_s": rounds_s, "baseline_s": self.baseline_s}
        return (np.zeros((self.slots + 1, F_LO), np.float32),
                float((self.baseline_s - rounds_s) / self.lb_s), True, False, info)


def random_plan(graph: nx.Graph, cfg: EnvConfig, rng: np.random.Generator) -> Plan:
    """A Plan whose chunk count and attachments are uniformly random legal choices
    (seeded by ``rng``; hop-by-hop trees only: a forest row has no Plan)."""
    env = TreeBuildingEnv(graph, replace(cfg, forest_rows=False),
                          scheduler=lambda plan: (None, 1.0))
    _, info = env.reset()
    done = False
    while not done:
        action = int(rng.choice(np.flatnonzero(info["action_mask"])))
        _, _, done, _, info = env.step(action)
    return info["plan"]


def fifo_schedule(plan: Plan, cfg: EnvConfig) -> tuple[Schedule, float]:
    """The default lower level: fill every round with the first candidates (oldest ready
    first, longest remaining chain next)."""
    env = WorkloadEnv(plan.overlay.graph, cfg)
    env.reset(options={"plan": plan, "baseline_s": plan.baseline_s})
    done = False
    while not done:
        _, _, done, _, _ = env.step(0)
    return env.schedule, env.makespan_s
