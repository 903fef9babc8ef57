"""Distributed episode collection for ``agent.train``, on Ray.

Inside a Ray started by ``agent.cluster`` (``start_ray``, ``stop_ray``, ``ray_session``),
``EpisodeWorkers(pool, cfg, n)`` creates ``n`` actors, each holding the training pool, the
config, its own reference cache, the simulator and a copy of both networks
(``agent.train.Episodes``); the driver broadcasts the weights once per update
(``broadcast``), hands out an update's sampled episodes (``sampled``) or the greedy
selection episodes (``greedy``) and gets the results back in episode order, whichever
actor ran which episode and whenever it finished. Every sampled episode draws its actions
from its own generator (``episode_seed``), so a run depends on its seed only.

ray is imported when one of these runs (``agent.cluster.import_ray``), not with this
module; without it they raise a one-line ValueError that says how to install it. On a
cluster (``address``) every node needs this project installed, in the same version.
"""

from __future__ import annotations

from collections.abc import Callable

import networkx as nx
import numpy as np
import torch

from agent.cluster import import_ray
from agent.networks import RowScorer
from agent.policy import new_models
from agent.ppo import Rollout
from agent.train import Episodes, TrainConfig


def episode_seed(seed: int, update: int, episode: int) -> int:
    """Seed of the action generator of episode ``episode`` (0-based within its update) of
    update ``update`` in a run seeded ``seed``.

    >>> episode_seed(0, 0, 0) == episode_seed(0, 0, 0) != episode_seed(0, 0, 1)
    True
    """
    state = np.random.SeedSequence([seed, update, episode]).generate_state(1, np.uint64)
    return int(state[0])


class EpisodeWorker:
    """The state of one actor: an ``agent.train.Episodes`` over its own copy of both
    networks, loaded from the driver's latest broadcast before each episode."""

    def __init__(self, pool: list[nx.Graph], cfg: TrainConfig) -> None:
        # One thread per actor: the actors already use every CPU Ray was given.
        torch.set_num_threads(1)
        upper, lower = new_models(cfg.hidden, cfg.env.slots, cfg.lower_prior, cfg.rank_prior)
        self.episodes = Episodes(pool, cfg, upper, lower)
        self.loaded = None

    def ready(self) -> bool:
        """True once constructed (the driver waits for it)."""
        return True

    def _load(self, weights: list) -> None:
        # The reference comes wrapped in a list so that Ray does not fetch and unpickle
        # the weights for every episode, only when they changed.
        if weights[0] != self.loaded:
            upper, lower = import_ray().get(weights[0])
            self.episodes.upper.load_state_dict(upper)
            self.episodes.lower.load_state_dict(lower)
            self.loaded = weights[0]

    def sampled(self, weights: list, i: int, setting: str,
                seed: int) -> tuple[float, Rollout, Rollout]:
        """A training episode with actions drawn from a generator seeded ``seed``."""
        self._load(weights)
        return self.episodes.sampled(i, setting, torch.Generator().manual_seed(seed))

    def greedy(self, weights: list, i: int, setting: str) -> float:
        """A selection episode, greedy actions: its makespan ratio to the reference."""
        self._load(weights)
        return self.episodes.greedy(i, setting)


class EpisodeWorkers:
    """``count`` Ray actors (one CPU each) playing the episodes of one training run; the
    constructor returns once all are up. Needs a running Ray (``start_ray``)."""

    def __init__(self, pool: list[nx.Graph], cfg: TrainConfig, count: int) -> None:
        self.ray = ray = import_ray()
        self.cfg = cfg
        actor = ray.remote(num_cpus=1)(EpisodeWorker)
        shared = ray.put(pool)
        self.actors = [actor.remote(shared, cfg) for _ in range(count)]
        self.sizes = [g.number_of_nodes() for g in pool]
        #: (instance, setting) pairs each actor has played.
        self.seen: list[set[tuple[int, str]]] = [set() for _ in self.actors]
        self.weights: list = []
        ray.get([a.ready.remote() for a in self.actors])

    def broadcast(self, upper: RowScorer, lower: RowScorer) -> None:
        """Put the networks' current weights in the object store, once for every actor;
        the following episodes use them."""
        self.weights = [self.ray.put((upper.state_dict(), lower.state_dict()))]

    def sampled(self, update: int, pairs: list[tuple[int, str]],
                on_done: Callable[[], None] | None = None) -> list[tuple[float, Rollout,
                                                                         Rollout]]:
        """Play update ``update``'s training episodes, one per (instance index, setting)
        of ``pairs``, episode k with the generator seeded ``episode_seed(cfg.seed,
        update, k)``; (ratio, upper rollout, lower rollout) per episode, in episode order.
        ``on_done`` is called as each episode finishes."""
        calls = [(i, setting, episode_seed(self.cfg.seed, update, k))
                 for k, (i, setting) in enumerate(pairs)]
        return self._spread("sampled", calls, on_done)

    def greedy(self, pairs: list[tuple[int, str]]) -> list[float]:
        """Makespan ratios of greedy episodes on ``pairs``, in order."""
        return self._spread("greedy", pairs, None)

    def close(self) -> None:
        """End the actors (a Ray that keeps running does not keep them)."""
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []

    def _spread(self, method: str, calls: list[tuple],
                on_done: Callable[[], None] | None) -> list:
        """Results of ``method(*call)`` for every call, in call order, whichever actor ran
        it. An idle actor takes the next call on a pair it has played (its reference and
        paths are cached), else the next on the biggest graph, so that the last to finish
        are short."""
        results: list = [None] * len(calls)
        todo = sorted(range(len(calls)), key=lambda k: -self.sizes[calls[k][0]])
        running: dict = {}
        idle = list(range(len(self.actors)))
        while todo or running:
            while todo and idle:
                a = idle.pop(0)
                k = next((k for k in todo if calls[k][:2] in self.seen[a]), todo[0])
                todo.remove(k)
                self.seen[a].add(calls[k][:2])
                running[getattr(self.actors[a], method).remote(self.weights, *calls[k])] = (k, a)
            done, _ = self.ray.wait(list(running), num_returns=1)
            k, a = running.pop(done[0])
            results[k] = self.ray.get(done[0])
            idle.append(a)
            if on_done is not None:
                on_done()
        return results
