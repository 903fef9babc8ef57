"""Both levels follow the Gymnasium contract, masks hold, and every schedule validates."""

import warnings

import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

import topology
from agent.env import EnvConfig, TreeSelectionEnv, WorkloadEnv
from agent.policy import new_models, run_episode
from agent.ppo import Rollout
from traffic.schedule import validate

CFG = EnvConfig(size_bytes=64 * 1024)


@pytest.fixture(scope="module")
def graph():
    return topology.make_graph("bcube", n=2, k=1)


def test_check_env_upper(graph):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(TreeSelectionEnv(graph, CFG), skip_render_check=True)


def test_check_env_lower(graph):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(WorkloadEnv(graph, CFG), skip_render_check=True)


@pytest.mark.parametrize("family,params", [("bcube", {"n": 2, "k": 1}),
                                           ("dcell", {"n": 2, "k": 1}),
                                           ("jellyfish", {"switches": 8, "seed": 0})])
def test_sampled_policy_respects_masks_and_validates(family, params):
    graph = topology.make_graph(family, **params)
    torch.manual_seed(0)
    upper, lower = new_models(16, CFG.slots, 2.0)
    up, lo = Rollout(), Rollout()
    gen = torch.Generator().manual_seed(0)
    for greedy in (False, True):
        info = run_episode(graph, CFG, upper, lower, greedy=greedy, generator=gen,
                           upper_ro=up, lower_ro=lo)
        validate(info["schedule"], graph)
        assert info["makespan_s"] > 0
    for ro in (up, lo):
        for mask, action in zip(ro.mask, ro.action):
            assert mask[action], "a masked action was chosen"
        assert sum(ro.done) == 2


def test_rounds_never_share_a_directed_link(graph):
    env = WorkloadEnv(graph, CFG)
    _, info = env.reset(seed=3)
    rng = np.random.default_rng(3)
    done = False
    while not done:
        action = rng.choice(np.flatnonzero(info["action_mask"]))
        _, reward, done, _, info = env.step(action)
        assert not info["invalid_action"]
    for rnd in env.rounds:
        links = env.plan.links[rnd]
        links = links[links != env.ov.dummy]
        assert len(links) == len(set(links.tolist()))
    validate(info["schedule"], graph)
    assert reward == pytest.approx((info["baseline_s"] - info["rounds_makespan_s"]) / env.lb_s)
    # The result is the better of the rounds and the data dependencies alone.
    assert info["makespan_s"] == min(info["baseline_s"], info["rounds_makespan_s"])


def test_masked_action_falls_back_and_is_flagged():
    # DCell(2, 1) has a single cycle, so the second cycle's chain slots are masked.
    env = TreeSelectionEnv(topology.make_graph("dcell", n=2, k=1), CFG)
    _, info = env.reset(seed=0)
    masked = np.flatnonzero(info["action_mask"] == 0)
    assert masked.size
    _, _, _, _, info = env.step(int(masked[0]))
    assert info["invalid_action"]


def test_upper_reward_is_minus_makespan_over_lower_bound(graph):
    env = TreeSelectionEnv(graph, CFG)
    _, info = env.reset(seed=0)
    done = False
    while not done:
        _, reward, done, _, info = env.step(int(np.flatnonzero(info["action_mask"])[0]))
    validate(info["schedule"], graph)
    assert reward == pytest.approx(-info["ratio_to_lower_bound"])


def test_keep_better_takes_the_dependency_only_schedule_where_rounds_lose(graph, monkeypatch):
    # Make the dependency-only schedule look twice as fast as any rounds: an episode that
    # keeps the better one (as deployed) takes it; one scored by its rounds does not.
    import agent.env

    real = agent.env.simulate_plan

    def fake(plan, rounds, cfg, *args, **kwargs):
        schedule, makespan = real(plan, rounds, cfg, *args, **kwargs)
        return schedule, makespan if rounds is not None else makespan / 2

    monkeypatch.setattr(agent.env, "simulate_plan", fake)
    torch.manual_seed(0)
    upper, lower = new_models(16, CFG.slots, 1.0)
    for keep_better in (False, True):
        info = run_episode(graph, CFG, upper, lower, greedy=False, keep_better=keep_better,
                           generator=torch.Generator().manual_seed(1))
        validate(info["schedule"], graph)
        dependency_only_s = real(info["plan"], None, CFG)[1]
        if keep_better:
            assert info["makespan_s"] == pytest.approx(dependency_only_s / 2)
        else:
            assert info["makespan_s"] != pytest.approx(dependency_only_s / 2)
