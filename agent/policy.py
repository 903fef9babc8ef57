"""The trained hierarchical policy: run an episode of both levels, load shipped checkpoints,
and ``schedule_for``, the function the emulation calls."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import torch

from agent.candidates import F_UP, K_MAX
from agent.env import F_LO, EnvConfig, TreeSelectionEnv, WorkloadEnv
from agent.networks import RowScorer, fifo_prior
from agent.ppo import Rollout, act
from traffic.schedule import Schedule

CHECKPOINT_DIR = Path(__file__).resolve().parent / "checkpoints"
CHECKPOINT_FORMAT = 1


def run_episode(graph: nx.Graph, cfg: EnvConfig, upper: RowScorer, lower: RowScorer | None,
                *, greedy: bool, generator: torch.Generator | None = None,
                upper_ro: Rollout | None = None, lower_ro: Rollout | None = None,
                keep_better: bool = True) -> dict:
    """One hierarchical episode: the upper policy picks a tree per chunk, the lower policy
    (None: the FIFO round filler) orders the transfers, the simulator scores the Schedule.
    Decisions are recorded into the rollouts when given; returns the upper env's final info
    (``schedule``, ``makespan_s``, ``ratio_to_lower_bound``). ``keep_better``: the episode's
    Schedule is the better of the lower policy's rounds and the dependency-only one (as
    deployed); False scores the rounds alone (``TrainConfig.sampled_keep_better``)."""
    scheduler = None
    if lower is not None:
        lower_env = WorkloadEnv(graph, cfg)

        def scheduler(plan):
            obs, info = lower_env.reset(options={"plan": plan,
                                                 "baseline_s": plan.baseline_s})
            done, reward = False, 0.0
            while not done:
                mask = info["action_mask"]
                a, logp, v = act(lower, obs, mask, greedy, generator)
                if lower_ro is not None:
                    lower_ro.add(obs, mask, a, logp, v)
                obs, reward, done, _, info = lower_env.step(a)
            if lower_ro is not None:
                lower_ro.end_episode(reward)
            if keep_better:
                return lower_env.schedule, lower_env.makespan_s
            return lower_env.rounds_result

    env = TreeSelectionEnv(graph, cfg, scheduler=scheduler)
    obs, info = env.reset()
    done, reward = False, 0.0
    while not done:
        mask = info["action_mask"]
        a, logp, v = act(upper, obs, mask, greedy, generator)
        if upper_ro is not None:
            upper_ro.add(obs, mask, a, logp, v)
        obs, reward, done, _, info = env.step(a)
    if upper_ro is not None:
        upper_ro.end_episode(reward)
    return info


def new_models(hidden: int, slots: int, prior: float) -> tuple[RowScorer, RowScorer]:
    """Freshly initialised (upper, lower) networks; the lower one over ``slots`` + 1 rows
    with the FIFO prior of strength ``prior``."""
    return (RowScorer(F_UP, hidden, K_MAX),
            RowScorer(F_LO, hidden, slots + 1, fifo_prior(slots, prior)))


def save_checkpoint(path: Path | str, upper: RowScorer, lower: RowScorer, spec: dict,
                    bw_mbps: float, config: dict, meta: dict) -> None:
    """Write both policies, the training config and the instance spec to ``path``."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": CHECKPOINT_FORMAT, "spec": spec, "bw_mbps": bw_mbps,
                "config": config, "hidden": upper.hidden, "meta": meta,
                "upper": upper.state_dict(), "lower": lower.state_dict()}, path)


def load_checkpoint(path: Path | str) -> tuple[RowScorer, RowScorer, dict]:
    """(upper, lower, checkpoint dict) from ``path``; ValueError if it is not one of ours."""
    try:
        doc = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError) as exc:
        raise ValueError(f"cannot read checkpoint {path}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not an agent checkpoint (format {CHECKPOINT_FORMAT})")
    upper, lower = new_models(doc["hidden"], doc["config"]["env"]["slots"], 0.0)
    upper.load_state_dict(doc["upper"])
    lower.load_state_dict(doc["lower"])
    upper.eval()
    lower.eval()
    return upper, lower, doc


def checkpoint_name(spec: dict) -> str:
    """File name of the shipped checkpoint of an instance, e.g. ``bcube-4-1.pt``."""
    return "-".join([spec["family"], *(str(v) for v in spec["params"].values())]) + ".pt"


def find_checkpoint(spec: dict) -> Path:
    """The shipped checkpoint trained for ``spec`` (its own file, else one whose training
    instances include it); ValueError naming the topology if none."""
    path = CHECKPOINT_DIR / checkpoint_name(spec)
    if not path.exists():
        for other in sorted(CHECKPOINT_DIR.glob("*.pt")):
            doc = torch.load(other, map_location="cpu", weights_only=True)
            if spec in doc.get("meta", {}).get("instances", []):
                return other
        shipped = sorted(p.name for p in CHECKPOINT_DIR.glob("*.pt"))
        raise ValueError(
            f"no shipped checkpoint for topology {spec['family']} {spec['params']} "
            f"(looked for {path.name}; shipped: {', '.join(shipped) or 'none'}); train one "
            "with python -m agent.train")
    return path


def build_schedule(graph: nx.Graph, upper: RowScorer, lower: RowScorer, cfg: EnvConfig,
                   samples: int = 0, seed: int = 0) -> tuple[Schedule, float]:
    """The DRL Schedule and its simulated makespan: the greedy (argmax) rollout of both
    levels, and, when ``samples`` > 0, the best of it and that many sampled rollouts
    (seeded), judged by the simulator."""
    info = run_episode(graph, cfg, upper, lower, greedy=True)
    best = (info["makespan_s"], info["schedule"])
    gen = torch.Generator().manual_seed(seed)
    for _ in range(samples):
        info = run_episode(graph, cfg, upper, lower, greedy=False, generator=gen)
        if info["makespan_s"] < best[0]:
            best = (info["makespan_s"], info["schedule"])
    return best[1], best[0]


def schedule_for(graph: nx.Graph, spec: dict, size_bytes: int, seed: int = 0,
                 checkpoint: Path | str | None = None) -> Schedule:
    """The DRL AllReduce Schedule for ``graph`` (described by ``spec``) and a buffer of
    ``size_bytes``, from the shipped checkpoint of that instance (greedy, deterministic;
    ``seed`` is recorded). ValueError naming the topology when no checkpoint fits."""
    if graph.graph.get("spec") not in (None, spec):
        raise ValueError(f"spec {spec} does not describe the graph ({graph.graph['spec']})")
    path = Path(checkpoint) if checkpoint else find_checkpoint(spec)
    upper, lower, doc = load_checkpoint(path)
    env = {**doc["config"]["env"], "size_bytes": int(size_bytes)}
    schedule, makespan = build_schedule(graph, upper, lower, EnvConfig(**env))
    meta = {**schedule.meta, "checkpoint": path.name, "seed": seed,
            "simulated_makespan_s": makespan}
    return Schedule(schedule.topology, schedule.size_bytes, schedule.dtype,
                    schedule.transfers, "drl", meta)
