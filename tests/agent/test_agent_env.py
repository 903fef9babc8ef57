"""Both levels follow the Gymnasium contract, masks hold, and every schedule validates."""

import warnings

import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

import topology
from agent.env import TREE_ROWS, EnvConfig, TreeBuildingEnv, WorkloadEnv
from agent.instances import degrade
from agent.policy import new_models, run_episode
from agent.ppo import Rollout
from traffic.schedule import validate

CFG = EnvConfig(size_bytes=64 * 1024, forest_rows=False)  # forest rows: test_agent_forest.py


@pytest.fixture(scope="module")
def graph():
    return topology.make_graph("bcube", n=2, k=1)


FAMILIES = [("bcube", {"n": 2, "k": 1}), ("dcell", {"n": 2, "k": 1}),
            ("jellyfish", {"switches": 8, "seed": 0})]


@pytest.mark.parametrize("family,params", FAMILIES)
def test_check_env_upper(family, params):
    graph = topology.make_graph(family, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(TreeBuildingEnv(graph, CFG), skip_render_check=True)


def test_check_env_lower(graph):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(WorkloadEnv(graph, CFG), skip_render_check=True)


GRAPHS = [(f, p, d) for f, p in FAMILIES for d in (None, "slow", "failed", "background")]


@pytest.mark.parametrize("family,params,degraded", GRAPHS)
def test_sampled_policy_respects_masks_and_validates(family, params, degraded):
    graph = topology.make_graph(family, **params)
    if degraded:
        graph = degrade(graph, degraded, seed=1)
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
    # The first step offers one row per chunk count; the rows after them are masked.
    env = TreeBuildingEnv(topology.make_graph("dcell", n=2, k=1), CFG)
    _, info = env.reset(seed=0)
    assert info["action_mask"].sum() == len(CFG.chunk_options)
    masked = np.flatnonzero(info["action_mask"] == 0)
    _, _, _, _, info = env.step(int(masked[0]))
    assert info["invalid_action"]


@pytest.mark.parametrize("option", range(3))
def test_chunk_count_is_the_first_decision(graph, option):
    env = TreeBuildingEnv(graph, CFG)
    _, info = env.reset(seed=0)
    _, _, done, _, info = env.step(option)
    steps = 1
    while not done:
        _, _, done, _, info = env.step(0)
        steps += 1
    per_server = CFG.chunk_options[option]
    assert info["chunks_per_server"] == per_server
    # One step per chunk count, then one per server attached to each chunk's tree.
    assert steps == 1 + per_server * 4 * 3
    assert len(info["plan"].trees) == per_server * 4
    validate(info["schedule"], graph)


def test_attachment_rows_offer_tip_and_root_hops():
    graph = topology.make_graph("bcube", n=3, k=1)
    env = TreeBuildingEnv(graph, CFG)
    obs, info = env.reset(seed=0)
    obs, _, _, _, info = env.step(0)
    for _ in range(3):
        rows = info["action_mask"].sum()
        assert 0 < rows <= TREE_ROWS
        hops = env.offered[:rows]
        # Every row attaches an outside server to a tree server; ranks are sorted.
        assert (~env.inside[env.ov.hop_src[hops]]).all() and env.inside[env.ov.hop_dst[hops]].all()
        assert (np.diff(obs[:rows, 16]) > 0).all()
        assert obs[:rows, 11].any() and obs[:rows, 1].any()
        obs, _, _, _, info = env.step(int(rows) - 1)


def test_degraded_rates_show_in_the_rows():
    graph = topology.make_graph("bcube", n=2, k=1)
    slow = topology.with_link_rates(graph, {("s00", "w0_0"): 2.5})
    env = TreeBuildingEnv(slow, CFG)
    assert env.ov.cap_Bps.min() == pytest.approx(2.5e6 / 8)
    # Column 13 of a hop's row: its slowest link over the fastest link of the graph.
    crossing = [h for h, p in enumerate(env.ov.hop_path) if "w0_0" in p and "s00" in p]
    assert env.hop_rate[crossing].min() == pytest.approx(0.25)
    assert env.hop_rate.max() == pytest.approx(1.0)


def test_upper_reward_is_minus_makespan_over_lower_bound(graph):
    env = TreeBuildingEnv(graph, CFG)
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


def test_numpy_greedy_scorer_matches_torch():
    from agent.networks import GreedyScorer
    from agent.ppo import act

    torch.manual_seed(2)
    rng = np.random.default_rng(2)
    for model in new_models(32, CFG.slots, 2.0, 0.5):
        with torch.no_grad():  # make the learned part matter next to the priors
            model.score.weight.mul_(300.0)
        fast = GreedyScorer(model)
        rows = model.prior.shape[0]
        for _ in range(50):
            obs = rng.random((rows, model.n_features), dtype=np.float32)
            mask = (rng.random(rows) < 0.6).astype(np.int8)
            mask[rng.integers(rows)] = 1
            assert fast(obs, mask) == act(model, obs, mask, True)[0]
