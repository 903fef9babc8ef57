"""The trained hierarchical policy: run an episode of both levels, load checkpoints (the
shipped general one serves every graph), and ``schedule_for``, the function the emulation
calls."""

from __future__ import annotations

import math
from pathlib import Path

import networkx as nx
import torch

from agent.env import F_LO, F_UP, RANK_COL, TREE_ROWS, EnvConfig, TreeBuildingEnv, WorkloadEnv
from agent.networks import GreedyScorer, RowScorer, fifo_prior
from agent.ppo import Rollout, act
from simulator import CALIBRATED, CostModel
from traffic.schedule import Schedule

CHECKPOINT_DIR = Path(__file__).resolve().parent / "checkpoints"
#: The one shipped checkpoint, trained on the instances of ``agent.instances.TRAIN``.
GENERAL = CHECKPOINT_DIR / "general.pt"
CHECKPOINT_FORMAT = 4


def run_episode(graph: nx.Graph, cfg: EnvConfig, upper: RowScorer, lower: RowScorer | None,
                *, greedy: bool, generator: torch.Generator | None = None,
                upper_ro: Rollout | None = None, lower_ro: Rollout | None = None,
                keep_better: bool = True, reference_s: float | None = None,
                score: bool = True) -> dict:
    """One hierarchical episode: the upper policy chooses the chunk count and grows a tree
    per chunk, the lower policy
    (None: the FIFO round filler) orders the transfers, the simulator scores the Schedule.
    Decisions are recorded into the rollouts when given; returns the upper env's final info
    (``schedule``, ``makespan_s``, ``ratio_to_lower_bound``). ``keep_better``: the episode's
    Schedule is the better of the lower policy's rounds and the dependency-only one (as
    deployed); False scores the rounds alone (``TrainConfig.sampled_keep_better``).
    ``reference_s`` scales the upper level's reward (default: the lower bound). ``score``
    False: a chosen forest row is not simulated (``makespan_s`` NaN; see
    ``TreeBuildingEnv``)."""
    scheduler = None
    if lower is not None:
        lower_env = WorkloadEnv(graph, cfg)
        fast_lower = GreedyScorer(lower) if greedy and lower_ro is None else None

        def scheduler(plan):
            obs, info = lower_env.reset(options={"plan": plan,
                                                 "baseline_s": plan.baseline_s})
            done, reward = False, 0.0
            while not done:
                mask = info["action_mask"]
                if fast_lower is not None:
                    a = fast_lower(obs, mask)
                else:
                    a, logp, v = act(lower, obs, mask, greedy, generator)
                if lower_ro is not None:
                    lower_ro.add(obs, mask, a, logp, v)
                obs, reward, done, _, info = lower_env.step(a)
            if lower_ro is not None:
                lower_ro.end_episode(reward)
            if keep_better:
                return lower_env.schedule, lower_env.makespan_s
            return lower_env.rounds_result

    env = TreeBuildingEnv(graph, cfg, scheduler=scheduler, reference_s=reference_s,
                          score=score)
    fast_upper = GreedyScorer(upper) if greedy and upper_ro is None else None
    obs, info = env.reset()
    done, reward = False, 0.0
    while not done:
        mask = info["action_mask"]
        if fast_upper is not None:
            a = fast_upper(obs, mask)
            obs, reward, done, _, info = env.step(a)
            continue
        a, logp, v = act(upper, obs, mask, greedy, generator)
        if upper_ro is not None:
            upper_ro.add(obs, mask, a, logp, v)
        obs, reward, done, _, info = env.step(a)
    if upper_ro is not None:
        upper_ro.end_episode(reward)
    return info


def new_models(hidden: int, slots: int, prior: float,
               rank_prior: float = 0.0) -> tuple[RowScorer, RowScorer]:
    """Freshly initialised (upper, lower) networks: the upper one starts near the hand rules
    (logit -``rank_prior`` per rank: of a forest row under the ``predicted`` rule at the
    first decision, of an attachment row under the greedy least-load key), the lower one
    over ``slots`` + 1 rows near the FIFO round filler (prior of strength ``prior``)."""
    return (RowScorer(F_UP, hidden, TREE_ROWS, rank_col=RANK_COL,
                      rank_strength=rank_prior * TREE_ROWS),
            RowScorer(F_LO, hidden, slots + 1, fifo_prior(slots, prior)))


def save_checkpoint(path: Path | str, upper: RowScorer, lower: RowScorer, config: dict,
                    meta: dict) -> None:
    """Write both policies, the training config and what it was trained on to ``path``."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": CHECKPOINT_FORMAT, "config": config, "hidden": upper.hidden,
                "meta": meta,
                "upper": upper.state_dict(), "lower": lower.state_dict()}, path)


def load_checkpoint(path: Path | str) -> tuple[RowScorer, RowScorer, dict]:
    """(upper, lower, checkpoint dict) from ``path``; ValueError if it is not one of ours."""
    try:
        doc = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError) as exc:
        raise ValueError(f"cannot read checkpoint {path}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not an agent checkpoint (format {CHECKPOINT_FORMAT})")
    upper, lower = new_models(doc["hidden"], doc["config"]["env"]["slots"], 0.0,
                              doc["config"]["rank_prior"])
    upper.load_state_dict(doc["upper"])
    lower.load_state_dict(doc["lower"])
    upper.eval()
    lower.eval()
    return upper, lower, doc


def build_schedule(graph: nx.Graph, upper: RowScorer, lower: RowScorer, cfg: EnvConfig,
                   samples: int = 0, seed: int = 0,
                   score: bool = True) -> tuple[Schedule, float]:
    """The DRL Schedule and its simulated makespan: the greedy (argmax) rollout of both
    levels, and, when ``samples`` > 0, the best of it and that many sampled rollouts
    (seeded), judged by the simulator. ``score`` False (with no samples): the makespan is
    NaN where the decision did not need the simulator (a forest row)."""
    info = run_episode(graph, cfg, upper, lower, greedy=True, score=score or samples > 0)
    best = (info["makespan_s"], info["schedule"])
    gen = torch.Generator().manual_seed(seed)
    for _ in range(samples):
        info = run_episode(graph, cfg, upper, lower, greedy=False, generator=gen)
        if info["makespan_s"] < best[0]:
            best = (info["makespan_s"], info["schedule"])
    return best[1], best[0]


def policy_config(doc: dict, size_bytes: int, cost: CostModel = CALIBRATED) -> EnvConfig:
    """The EnvConfig a checkpoint runs with for a buffer of ``size_bytes`` under ``cost``."""
    return EnvConfig(**doc["config"]["env"]).at(size_bytes, cost)


def schedule_for(graph: nx.Graph, spec: dict, size_bytes: int, seed: int = 0,
                 checkpoint: Path | str | None = None, cost: CostModel = CALIBRATED) -> Schedule:
    """The DRL AllReduce Schedule for ``graph`` (described by ``spec``) and a buffer of
    ``size_bytes``, from the general checkpoint (or ``checkpoint``), greedy and
    deterministic, planned for the cost model ``cost`` (default: the one measured by the
    emulation here); ``seed`` is recorded, and the simulated makespan
    (``simulated_makespan_s``) where the decision computed it. Works on any graph with at
    least two servers."""
    if graph.graph.get("spec") not in (None, spec):
        raise ValueError(f"spec {spec} does not describe the graph ({graph.graph['spec']})")
    path = Path(checkpoint) if checkpoint else GENERAL
    upper, lower, doc = load_checkpoint(path)
    schedule, makespan = build_schedule(graph, upper, lower, policy_config(doc, size_bytes, cost),
                                        score=False)
    meta = {**schedule.meta, "checkpoint": path.name, "seed": seed}
    if not math.isnan(makespan):
        meta["simulated_makespan_s"] = makespan
    return Schedule(schedule.topology, schedule.size_bytes, schedule.dtype,
                    schedule.transfers, "drl", meta)
