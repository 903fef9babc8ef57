"""``python -m agent.train --out F [--time-budget S] [--train-seed N] [--workers N] [--address A]``

Trains one policy for every topology: both levels jointly, with PPO, on episodes drawn from
a distribution of instances (by default the training split of ``agent.instances``, with
its degraded copies) and settings (buffer size and cost model, ``agent.instances.SETTINGS``).
Every episode the upper policy either picks a forest row (``agent.forest``) or chooses a
chunk count and grows a tree per chunk, which the lower policy orders into rounds; the
simulator runs the Schedule; the upper level receives ``-makespan / reference`` (the
reference: the best baseline on that instance and setting, so rewards mean the same on
every graph) and the lower level what its ordering gained over the plan's
data-dependency-only makespan. The first decision's forest rows are also fitted with full
information (``FirstDecisions``, ``agent.ppo.rank_update``). Each update prints one ``losses``
line; the progress bar shows the running makespan ratio to the reference. With
``--workers N`` (N > 1) or ``--address``, Ray actors play each update's episodes in
parallel (``agent.rollouts``) and this process learns; ``--workers 1`` runs without Ray.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import networkx as nx
import numpy as np
import torch
from tqdm import tqdm

from agent.env import TREE_ROWS, EnvConfig, TreeBuildingEnv
from agent.instances import SETTINGS, TRAIN, graphs, label
from agent.networks import RowScorer
from agent.policy import new_models, run_episode, save_checkpoint
from agent.ppo import Rollout, rank_update, update
from agent.rules import baseline_makespans
from topology import make_graph
from topology.cli import ArgumentParser, run
from topology.files import read_topology

PROG = "python -m agent.train"


@dataclass(frozen=True)
class TrainConfig:
    """Everything one training run depends on (a ``--config`` JSON file may set any field;
    unknown keys are errors)."""

    #: Seeds torch, numpy and the action sampler.
    seed: int = 0
    #: Episodes to run (one episode = one Schedule simulated).
    episodes: int = 3000
    #: Stop early after this many seconds of training (0: no limit).
    time_budget_s: float = 0.0
    #: Stop once the greedy policy's mean makespan on the selection episodes is within this
    #: many references (0: never).
    stop_ratio: float = 0.0
    #: Run the greedy (argmax) policy on the selection episodes every this many updates;
    #: the best one is kept (model selection on training instances only).
    eval_every: int = 4
    #: Selection episodes: this many (instance, setting) pairs drawn once from the
    #: training distribution.
    selection: int = 12
    #: Settings (names in ``agent.instances.SETTINGS``) episodes are drawn from.
    settings: tuple[str, ...] = tuple(s.name for s in SETTINGS)
    #: Episodes drawn per (instance, setting) pair in a row: the upper level's advantage
    #: baseline is then the mean return of the pair's other episodes (rewards of different
    #: graphs differ more than a value network of one state's rows can tell); 1: the value
    #: network's estimate.
    group: int = 4
    #: Strength of the upper level's prior towards the hand rules' rows (logit per rank: the
    #: ``predicted`` forest row first, then the greedy least-load attachment; 0: none).
    rank_prior: float = 0.5
    #: Episodes collected before each PPO update.
    episodes_per_update: int = 16
    #: Width of both scorer networks.
    hidden: int = 64
    #: Adam step size, both levels.
    lr: float = 1e-3
    #: Discount (episodes are short and the reward is terminal: no discount).
    gamma: float = 1.0
    #: GAE lambda of the upper level (2N decisions per episode, one terminal reward:
    #: Monte-Carlo returns learned fastest).
    upper_lambda: float = 1.0
    #: GAE lambda of the lower level (one decision per transfer, ~1000 per episode).
    lower_lambda: float = 0.98
    #: PPO clipping range, entropy and value-loss weights, gradient-norm clip.
    clip: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    #: Passes over each rollout, and minibatches per pass.
    update_epochs: int = 4
    minibatches: int = 4
    #: Lower level's prior: logit -prior x row index (rows sorted oldest-ready first), so
    #: an untrained scheduler starts near the FIFO round filler and learns corrections.
    lower_prior: float = 2.0
    #: Also train the workload scheduler (else it stays the FIFO round filler).
    train_lower: bool = True
    #: Score sampled episodes by the better of the lower level's rounds and the
    #: dependency-only Schedule, as deployed (``agent.env``), instead of by the rounds alone.
    #: Off by default: so scored, the upper level learns trees that need no ordering
    #: (BCube(3,1) from scratch stalls at 1.47 x the bound; 1.00 after 16 episodes when
    #: off). On for DCell(3,1), whose chains run best on their data dependencies
    #: (agent/configs/dcell-3-1.json; off there, training stays above 1.34).
    sampled_keep_better: bool = False
    #: The first decision's forest rows need no later decision to be scored, so every
    #: offered forest row of each (graph, setting) drawn is simulated once, and after each
    #: PPO update the upper scorer's first decisions seen so far are fitted to them (full
    #: information: cross-entropy towards a softmax of the rows' makespans over the
    #: reference at temperature ``forest_temp``, ``forest_epochs`` full-batch steps;
    #: ``agent.ppo.rank_update``). 0: PPO alone.
    forest_temp: float = 0.01
    forest_epochs: int = 16
    #: What both levels optimise (size and costs are replaced by each episode's setting).
    env: EnvConfig = field(default_factory=EnvConfig)

    def __post_init__(self) -> None:
        object.__setattr__(self, "settings", tuple(self.settings))
        known = {s.name for s in SETTINGS}
        for name in self.settings:
            if name not in known:
                raise ValueError(f"unknown setting {name!r}; choose from {', '.join(known)}")
        if not self.settings:
            raise ValueError("settings names no setting")
        for name in ("episodes", "episodes_per_update", "hidden", "update_epochs",
                     "minibatches", "eval_every", "selection", "group", "forest_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.forest_temp >= 0:
            raise ValueError(f"forest_temp must be >= 0, got {self.forest_temp!r}")


def config_from_file(path: str, **overrides) -> TrainConfig:
    """A TrainConfig from a JSON file (nested ``env`` object allowed); ValueError on an
    unknown key."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read config {path}: {exc}") from None
    known = {f.name for f in fields(TrainConfig)}
    for key in doc:
        if key not in known:
            raise ValueError(f"config {path} has an unknown key {key!r}")
    env = doc.pop("env", {})
    env_known = {f.name for f in fields(EnvConfig)}
    for key in env:
        if key not in env_known:
            raise ValueError(f"config {path} has an unknown key env.{key!r}")
    return TrainConfig(**{**doc, **overrides, "env": EnvConfig(**env)})


def episode_config(cfg: TrainConfig, setting: str) -> EnvConfig:
    """The EnvConfig of one episode: ``cfg.env`` with the setting's size and costs."""
    found = next(s for s in SETTINGS if s.name == setting)
    return cfg.env.at(found.size_bytes, found.cost)


class References:
    """The best baseline's simulated makespan per (graph, setting), computed once."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.known: dict[tuple[int, str], float] = {}

    def __call__(self, i: int, graph: nx.Graph, setting: str) -> float:
        if (i, setting) not in self.known:
            env = episode_config(self.cfg, setting)
            self.known[(i, setting)] = min(baseline_makespans(graph, env).values())
        return self.known[(i, setting)]


class FirstDecisions:
    """The first decision of every (graph, setting) seen, with full information: its
    observation and each forest row's simulated makespan over the reference (inf on the
    other rows), computed once."""

    def __init__(self, pool: list[nx.Graph], cfg: TrainConfig, reference: References) -> None:
        self.pool, self.cfg, self.reference = pool, cfg, reference
        self.known: dict[tuple[int, str], tuple[np.ndarray, np.ndarray] | None] = {}

    def add(self, i: int, setting: str) -> None:
        """Simulate the forest rows of ``pool[i]`` under ``setting`` (once)."""
        if (i, setting) in self.known:
            return
        ref = self.reference(i, self.pool[i], setting)
        env = TreeBuildingEnv(self.pool[i], episode_config(self.cfg, setting), reference_s=ref)
        obs, _ = env.reset()
        ratios = np.full(TREE_ROWS, np.inf)
        first = len(env.options)
        for j, forest in enumerate(env.forests):
            ratios[first + j] = env.forest_makespan(forest) / ref
        # A decision without a finite makespan (no forest rows) teaches nothing.
        self.known[(i, setting)] = (obs, ratios) if np.isfinite(ratios).any() else None

    def batch(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(observations, ratios) of every first decision seen that has forest rows."""
        rows = [v for v in self.known.values() if v is not None]
        return [o for o, _ in rows], [r for _, r in rows]


class Episodes:
    """Plays episodes on ``pool`` under ``cfg`` with one pair of networks (the lower one
    orders the transfers only when ``cfg.train_lower``, else the FIFO round filler does),
    computing each (graph, setting)'s reference on first use. The in-process loop of
    ``train`` uses one; every actor of ``agent.rollouts`` holds its own."""

    def __init__(self, pool: list[nx.Graph], cfg: TrainConfig, upper: RowScorer,
                 lower: RowScorer) -> None:
        self.pool, self.cfg, self.upper, self.lower = pool, cfg, upper, lower
        self.reference = References(cfg)

    def play(self, i: int, setting: str, greedy: bool, **kw) -> float:
        """One episode on ``pool[i]`` under ``setting``: its makespan as a multiple of the
        reference (``kw`` go to ``agent.policy.run_episode``)."""
        ref = self.reference(i, self.pool[i], setting)
        info = run_episode(self.pool[i], episode_config(self.cfg, setting), self.upper,
                           self.lower if self.cfg.train_lower else None, greedy=greedy,
                           reference_s=ref, **kw)
        return info["makespan_s"] / ref

    def sampled(self, i: int, setting: str,
                generator: torch.Generator) -> tuple[float, Rollout, Rollout]:
        """A training episode, actions sampled with ``generator``: (makespan ratio, upper
        rollout, lower rollout)."""
        up_ro, lo_ro = Rollout(), Rollout()
        ratio = self.play(i, setting, False, generator=generator, upper_ro=up_ro,
                          lower_ro=lo_ro if self.cfg.train_lower else None,
                          keep_better=self.cfg.sampled_keep_better)
        return ratio, up_ro, lo_ro

    def greedy(self, i: int, setting: str) -> float:
        """A selection episode, greedy (argmax) actions: its makespan ratio."""
        return self.play(i, setting, True)


def draw_pairs(rng: np.random.Generator, pool_size: int, cfg: TrainConfig,
               count: int) -> list[tuple[int, str]]:
    """(instance index, setting) of each of an update's ``count`` episodes: a new pair every
    ``cfg.group`` episodes, drawn from ``rng``."""
    pairs = []
    for k in range(count):
        if k % cfg.group == 0:
            pair = (int(rng.integers(pool_size)),
                    cfg.settings[int(rng.integers(len(cfg.settings)))])
        pairs.append(pair)
    return pairs


def extend(ro: Rollout, more: Rollout) -> None:
    """Append ``more``'s steps to ``ro`` (episodes merged in episode order)."""
    for name, steps in vars(more).items():
        getattr(ro, name).extend(steps)


def parse_instances(text: str) -> list[nx.Graph]:
    """Graphs from ``"bcube:n=4,k=1 jellyfish:seed=2"`` (family, then its parameters)."""
    out = []
    for item in text.split():
        family, _, rest = item.partition(":")
        params = {}
        for pair in filter(None, rest.split(",")):
            key, eq, value = pair.partition("=")
            if not eq or not value.lstrip("-").isdigit():
                raise ValueError(f"--instances: {pair!r} is not NAME=INTEGER")
            params[key] = int(value)
        out.append(make_graph(family, **params))
    if not out:
        raise ValueError("--instances names no topology")
    return out


def train(pool: nx.Graph | list[nx.Graph], cfg: TrainConfig, progress: bool = True,
          workers: int = 1, address: str | None = None):
    """Train both levels on episodes drawn (seeded) from ``pool`` x ``cfg.settings``;
    returns (upper, lower, history), history one dict per update (episodes, seconds,
    running and greedy ratios to the reference, losses). The returned networks are the
    greedy-best ones on the selection episodes (training instances only).

    ``workers`` > 1 or an ``address``: ``workers`` Ray actors (``agent.rollouts``) play the
    episodes, on a local Ray started for the run and stopped at its end (or on the cluster
    at ``address``); the driver still draws every episode's instance and setting, merges
    the rollouts in episode order and does the PPO updates. Each sampled episode then has
    its own generator, seeded from (``cfg.seed``, update, episode), so the result depends
    on the seed only, not on the number of actors nor on which ran what; it differs from
    the in-process run's (one generator for every episode), which never imports ray."""
    pool = pool if isinstance(pool, list) else [pool]
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if workers == 1 and address is None:
        return _train(pool, cfg, progress, None)
    from agent.cluster import ray_session
    from agent.rollouts import EpisodeWorkers

    with ray_session(address, workers):
        runners = EpisodeWorkers(pool, cfg, workers)
        try:
            return _train(pool, cfg, progress, runners)
        finally:
            runners.close()


def _train(pool: list[nx.Graph], cfg: TrainConfig, progress: bool, runners):
    """The training loop of ``train``; ``runners``: the Ray actors, or None to play the
    episodes in this process."""
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    upper, lower = new_models(cfg.hidden, cfg.env.slots, cfg.lower_prior, cfg.rank_prior)
    opt_up = torch.optim.Adam(upper.parameters(), lr=cfg.lr, eps=1e-5)
    opt_lo = torch.optim.Adam(lower.parameters(), lr=cfg.lr, eps=1e-5)
    episodes = Episodes(pool, cfg, upper, lower)
    firsts = FirstDecisions(pool, cfg, episodes.reference)
    draw = np.random.default_rng([cfg.seed, 1])
    selection = [(int(draw.integers(len(pool))), cfg.settings[int(draw.integers(
        len(cfg.settings)))]) for _ in range(cfg.selection)]
    history: list[dict] = []
    recent: list[float] = []
    best = (float("inf"), None)
    updates = done_eps = 0
    start = time.monotonic()
    bar = tqdm(total=cfg.episodes, desc="train", disable=not progress, unit="ep")
    if runners is not None:
        runners.broadcast(upper, lower)

    while done_eps < cfg.episodes:
        pairs = draw_pairs(rng, len(pool), cfg,
                           min(cfg.episodes_per_update, cfg.episodes - done_eps))
        if runners is None:
            played = []
            for i, setting in pairs:
                played.append(episodes.sampled(i, setting, gen))
                bar.update(1)
        else:
            played = runners.sampled(updates, pairs, on_done=lambda: bar.update(1))
        up_ro, lo_ro = Rollout(), Rollout()
        spans: list[tuple[int, int, float]] = []
        for ratio, episode_up, episode_lo in played:
            first = len(up_ro)
            extend(up_ro, episode_up)
            extend(lo_ro, episode_lo)
            spans.append((first, len(up_ro), -ratio))
            recent = (recent + [ratio])[-40:]
        done_eps += len(played)
        bar.set_postfix(ref_ratio=f"{np.mean(recent):.3f}")
        if cfg.group > 1:
            # gamma = lambda = 1: every step's advantage is its episode's return minus the
            # mean return of the other episodes of its pair.
            for g in range(0, len(spans), cfg.group):
                members = spans[g:g + cfg.group]
                for m, (first, last, ret) in enumerate(members):
                    others = [r for j, (_, _, r) in enumerate(members) if j != m] or [ret]
                    up_ro.value[first:last] = [float(np.mean(others))] * (last - first)
        common = dict(gamma=cfg.gamma, clip=cfg.clip, ent_coef=cfg.ent_coef,
                      vf_coef=cfg.vf_coef, epochs=cfg.update_epochs,
                      minibatches=cfg.minibatches, max_grad_norm=cfg.max_grad_norm, rng=rng)
        losses = {f"upper_{k}": v for k, v in
                  update(upper, opt_up, up_ro, lam=cfg.upper_lambda, **common).items()}
        if cfg.forest_temp > 0:
            for i, setting in pairs:
                firsts.add(i, setting)
            obs, ratios = firsts.batch()
            if obs:
                losses["upper_rank_kl"] = rank_update(
                    upper, opt_up, obs, ratios, temp=cfg.forest_temp,
                    epochs=cfg.forest_epochs, max_grad_norm=cfg.max_grad_norm)
        if cfg.train_lower and len(lo_ro):
            losses |= {f"lower_{k}": v for k, v in
                       update(lower, opt_lo, lo_ro, lam=cfg.lower_lambda, **common).items()}
        updates += 1
        if runners is not None:
            runners.broadcast(upper, lower)
        row = {"episodes": done_eps, "ref_ratio": float(np.mean(recent))}
        if updates % cfg.eval_every == 0 or done_eps >= cfg.episodes:
            ratios = (runners.greedy(selection) if runners is not None
                      else [episodes.greedy(i, s) for i, s in selection])
            greedy = float(np.mean(ratios))
            row["greedy_ref_ratio"] = greedy
            if greedy < best[0]:
                best = (greedy, (copy.deepcopy(upper.state_dict()),
                                 copy.deepcopy(lower.state_dict())))
        row["best_ref_ratio"] = best[0]
        row["seconds"] = time.monotonic() - start
        row |= losses
        history.append(row)
        bar.write("losses " + " ".join(f"{k}={v:.6g}" for k, v in row.items()))
        if cfg.time_budget_s and row["seconds"] >= cfg.time_budget_s:
            break
        if cfg.stop_ratio and best[0] <= cfg.stop_ratio:
            break
    bar.close()
    if best[1] is not None:
        upper.load_state_dict(best[1][0])
        lower.load_state_dict(best[1][1])
    return upper, lower, history


def main() -> int:
    """Entry point of ``python -m agent.train``."""
    parser = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[1])
    parser.add_argument("--out", required=True, metavar="FILE", help="checkpoint to write")
    parser.add_argument("--config", metavar="FILE", help="JSON file of TrainConfig fields")
    parser.add_argument("--episodes", type=int, help="episodes to run (default 3000)")
    parser.add_argument("--train-seed", type=int, help="training seed (default 0)")
    parser.add_argument("--time-budget", type=float, metavar="S",
                        help="stop after S seconds of training")
    parser.add_argument("--stop-ratio", type=float, metavar="R",
                        help="stop once the greedy makespan is within R references")
    parser.add_argument("--instances", metavar="LIST",
                        help='train on these instances instead of the training split, e.g. '
                        '"bcube:n=3,k=1 dcell:n=2,k=1 jellyfish:seed=5"')
    parser.add_argument("--topo-file", action="append", default=[], metavar="F",
                        help="train on this topology file (GraphML or node-link JSON; "
                             "repeatable), with the --instances if given, instead of the "
                             "training split")
    parser.add_argument("--no-degraded", action="store_true",
                        help="without the degraded copies of the training split")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="play each update's episodes on N Ray actors, one CPU each "
                             "(needs ray; default 1: in this process, without Ray). The "
                             "result depends on the seed and on whether Ray plays the "
                             "episodes, not on N")
    parser.add_argument("--address", metavar="ADDR",
                        help="use the Ray cluster at ADDR (e.g. auto, HOST:6379) instead "
                             "of starting a local Ray; implies Ray even with --workers 1")
    args = parser.parse_args()
    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    overrides = {k: v for k, v in (("episodes", args.episodes), ("seed", args.train_seed),
                                   ("time_budget_s", args.time_budget),
                                   ("stop_ratio", args.stop_ratio)) if v is not None}
    cfg = config_from_file(args.config, **overrides) if args.config else TrainConfig(**overrides)
    torch.set_num_threads(1)
    if args.instances or args.topo_file:
        pool = [*(parse_instances(args.instances) if args.instances else []),
                *(read_topology(f) for f in args.topo_file)]
    else:
        pool = graphs(TRAIN, degraded=not args.no_degraded, seed=cfg.seed)
    upper, lower, history = train(pool, cfg, progress=not args.no_progress,
                                  workers=args.workers, address=args.address)
    last = history[-1]
    meta = {"episodes": last["episodes"], "train_seconds": last["seconds"],
            "workers": args.workers, "ray": args.workers > 1 or args.address is not None,
            "best_ref_ratio": last["best_ref_ratio"],
            "instances": [label(g) for g in pool]}
    save_checkpoint(args.out, upper, lower, asdict(cfg), meta)
    print(f"{last['episodes']} episodes in {last['seconds']:.0f} s; greedy makespan on the "
          f"selection episodes {last['best_ref_ratio']:.3f} x the best baseline; wrote {args.out}")
    return 0


if __name__ == "__main__":
    run(main, PROG)
