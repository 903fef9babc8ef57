"""The two Gymnasium environments of the hierarchical scheduler, over the real simulator.

Upper level, flow-tree selection (``TreeSelectionEnv``): one step per chunk (chunk c is owned
by server c mod N); the action picks which of K_MAX candidate trees carries it. Observation:
one feature row per candidate (``agent.candidates.features``: link loads after adding it,
split into the reduce and the broadcast direction, depth, fan-out, progress), so the same
shared scorer works on every topology. After the last chunk the chosen trees become a
``Plan``, the ``scheduler`` orders its transfers and the simulator runs the Schedule. The
reward, at the last step only, is ``-makespan / lower_bound`` (-1 is optimal). (Shaping
with the slotted estimate of ``agent.candidates`` as a potential was tried and misled the
policy: the estimate is exact for lock-step plans but far too pessimistic for mixed ones.)

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

from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import networkx as nx
import numpy as np

from agent.candidates import F_UP, K_MAX, Loads, candidate_trees, features
from agent.plan import Plan
from agent.trees import Tree, overlay_for
from simulator import lower_bound, simulate
from traffic.schedule import Schedule

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
    #: Chunks per server (each server owns this many chunks, one tree each).
    chunks_per_server: int = 2
    #: Lower-level candidate rows (ready transfers shown per step).
    slots: int = 16
    #: Passed to the simulator (defaults: pure bandwidth model).
    startup_s: float = 0.0
    hop_latency_s: float = 0.0
    #: Seed of the cycle search behind the chain candidates.
    overlay_seed: int = 0

    def __post_init__(self) -> None:
        for name in ("size_bytes", "chunks_per_server", "slots"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("startup_s", "hop_latency_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")


Scheduler = Callable[[Plan], tuple[Schedule, float]]


def _box(rows: int, cols: int) -> gym.spaces.Box:
    return gym.spaces.Box(0.0, OBS_HIGH, shape=(rows, cols), dtype=np.float32)


def simulate_plan(plan: Plan, rounds: list[list[int]] | None, cfg: EnvConfig,
                  algo: str = "drl") -> tuple[Schedule, float]:
    """Schedule and simulated makespan (seconds) of ``plan`` ordered by ``rounds``."""
    schedule = plan.schedule(rounds, algo=algo)
    result = simulate(plan.overlay.graph, schedule, startup_s=cfg.startup_s,
                      hop_latency_s=cfg.hop_latency_s)
    # A plain float: it ends up in checkpoints, which load with weights_only.
    return schedule, float(result.makespan_s)


class TreeSelectionEnv(gym.Env):
    """Upper level: choose a candidate tree for every chunk (see the module docstring)."""

    metadata = {"render_modes": []}

    def __init__(self, graph: nx.Graph, config: EnvConfig = EnvConfig(),
                 scheduler: Scheduler | None = None) -> None:
        self.cfg = config
        self.ov = overlay_for(graph, config.overlay_seed, config.chunks_per_server)
        self.chunks = config.chunks_per_server * self.ov.n
        self.chunk_bytes = config.size_bytes / self.chunks
        self.lb_s = lower_bound(graph, config.size_bytes)
        self.scheduler = scheduler or (lambda plan: fifo_schedule(plan, self.cfg))
        self.observation_space = _box(K_MAX, F_UP)
        self.action_space = gym.spaces.Discrete(K_MAX)

    def _observe(self) -> tuple[np.ndarray, dict]:
        root = self.step_index % self.ov.n
        self.cands = candidate_trees(self.ov, root, self.loads, self.chunk_bytes,
                                     self.step_index // self.ov.n)
        obs, self.mask = features(self.ov, self.cands, self.loads, self.chunk_bytes,
                                  self.lb_s, self.step_index / self.chunks)
        return np.clip(obs, 0.0, OBS_HIGH), {"action_mask": self.mask.copy()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start with no chunk routed."""
        super().reset(seed=seed)
        self.loads = Loads(self.ov)
        self.step_index = 0
        self.chosen: list[Tree] = []
        return self._observe()

    def step(self, action):
        """Route the current chunk on candidate ``action``."""
        action = int(action)
        invalid = not (0 <= action < K_MAX and self.mask[action])
        if invalid:
            action = int(np.flatnonzero(self.mask)[0])
        tree = self.cands[action]
        self.chosen.append(tree)
        self.loads.add(self.ov, tree, self.chunk_bytes)
        self.step_index += 1
        if self.step_index < self.chunks:
            obs, info = self._observe()
            info["invalid_action"] = invalid
            return obs, 0.0, False, False, info
        plan = Plan(self.ov, self.chosen, self.cfg.size_bytes, self.cfg.dtype)
        schedule, makespan = self.scheduler(plan)
        self.mask = np.zeros(K_MAX, np.int8)
        info = {"action_mask": self.mask.copy(), "invalid_action": invalid,
                "makespan_s": makespan, "schedule": schedule, "plan": plan,
                "ratio_to_lower_bound": makespan / self.lb_s}
        return (np.zeros((K_MAX, F_UP), np.float32), float(-makespan / self.lb_s),
                True, False, info)


class WorkloadEnv(gym.Env):
    """Lower level: place the plan's transfers into link-disjoint rounds (see the module
    docstring)."""

    metadata = {"render_modes": []}

    def __init__(self, graph: nx.Graph, config: EnvConfig = EnvConfig()) -> None:
        self.cfg = config
        self.graph = graph
        self.ov = overlay_for(graph, config.overlay_seed, config.chunks_per_server)
        self.lb_s = lower_bound(graph, config.size_bytes)
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
    """A Plan whose trees are uniformly random legal candidates (seeded by ``rng``)."""
    env = TreeSelectionEnv(graph, cfg, scheduler=lambda plan: (None, 1.0))
    _, info = env.reset()
    for _ in range(env.chunks):
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
