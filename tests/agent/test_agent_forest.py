"""Forest rows: the packed-forest and tree-family choices of the upper level's first step."""

import math

import numpy as np
import pytest
import torch

import topology
from agent.chains import longest_chain
from agent.env import F_UP, TREE_ROWS, EnvConfig, TreeBuildingEnv
from agent.forest import (
    FAMILIES,
    FOREST_COLUMNS,
    FOREST_OPTIONS,
    Period,
    _rates,
    forest_features,
    forest_schedule,
    packing_for,
    schedule_features,
)
from agent.instances import degrade
from agent.networks import RowScorer
from agent.ppo import rank_update
from agent.rules import baseline_makespans, rule_schedule
from simulator import CALIBRATED
from traffic.collectives import _router
from traffic.schedule import Schedule, Transfer, validate

CFG = EnvConfig(size_bytes=64 * 1024).at(64 * 1024, CALIBRATED)
FAMILY_GRAPHS = [("bcube", {"n": 2, "k": 1}), ("dcell", {"n": 2, "k": 1}),
                 ("jellyfish", {"switches": 8, "seed": 0})]


def test_features_of_one_transfer_are_closed_form():
    graph = topology.make_graph("bcube", n=2, k=1)
    router = _router(graph)
    a, b = router.servers[:2]
    path = router.path(a, b)
    transfer = Transfer(0, a, b, 0, 1000, "reduce", tuple(path))
    schedule = Schedule({"family": "bcube", "params": {"n": 2, "k": 1}}, 4000, "float32",
                        (transfer,))
    rate_Bps = 10e6 / 8  # BCube's default 10 Mbit/s links
    link_s, critical_s, chain, per_server = schedule_features(graph, schedule, 1.0, 0.002)
    assert link_s == pytest.approx(4000 / rate_Bps)
    assert critical_s == pytest.approx(0.002 + 4000 / rate_Bps)
    assert chain == 1 and per_server == pytest.approx(1 / 4)


@pytest.mark.parametrize("family,params", FAMILY_GRAPHS)
@pytest.mark.parametrize("size", [64 * 1024, 1_000_000])
def test_forest_features_without_the_schedule_equal_the_schedules(family, params, size):
    # Rows are ranked by features measured tree copy by tree copy, without building their
    # Schedules: exactly what measuring the built Schedule gives.
    graph = degrade(topology.make_graph(family, **params), "slow", seed=3)
    memo: dict = {}
    for option in FOREST_OPTIONS:
        built = schedule_features(graph, forest_schedule(graph, option, size, "float32"),
                                  0.9, 0.002)
        assert forest_features(graph, option, size, "float32", 0.9, 0.002, memo) == built


def test_longest_chain_interpreted_equals_compiled():
    # Where numba is missing the same function runs interpreted: same answer, bit for bit.
    graph = degrade(topology.make_graph("dcell", n=2, k=1), "slow", seed=3)
    packing = packing_for(graph)[1]
    root, weighted = next(iter(packing.trees.items()))
    tree = weighted[0][1]
    period = Period(tree, None, root, _rates(graph, 0.9))
    args = (period.same_ptr, period.same_idx, period.prev_ptr, period.prev_idx, period.rate,
            np.array([4000.0, 4000.0, 3996.0]), 0.002)
    interpreted = getattr(longest_chain, "py_func", longest_chain)
    assert tuple(longest_chain(*args)) == tuple(interpreted(*args))
    assert longest_chain(*args)[1] >= 3  # three pieces pipelined along a chain


@pytest.mark.parametrize("family,params", FAMILY_GRAPHS)
@pytest.mark.parametrize("degraded", [None, "slow", "failed", "background"])
def test_every_forest_row_ends_the_episode_with_a_valid_schedule(family, params, degraded):
    graph = topology.make_graph(family, **params)
    if degraded:
        graph = degrade(graph, degraded, seed=3)
    env = TreeBuildingEnv(graph, CFG)
    obs, info = env.reset(seed=0)
    first = len(env.options)
    # The rings row only where rings reach the optimum.
    assert len(FOREST_OPTIONS) + 2 <= len(env.forests) <= len(FOREST_OPTIONS) + len(FAMILIES)
    assert info["action_mask"][: first + len(env.forests)].all()
    rows = obs[first: first + len(env.forests)][:, list(FOREST_COLUMNS)]
    assert (rows[:, 0] == 1).all() and all(math.isfinite(x) for x in rows.ravel())
    for action in range(first, first + len(env.forests)):
        env.reset()
        _, reward, done, _, info = env.step(action)
        assert done and reward < 0 and info["plan"] is None
        validate(info["schedule"], graph)
        assert info["schedule"].algo == "drl" and info["schedule"].meta["forest"]


def test_a_family_row_runs_that_collective():
    graph = topology.make_graph("dcell", n=2, k=1)
    env = TreeBuildingEnv(graph, CFG)
    env.reset()
    base = baseline_makespans(graph, CFG, FAMILIES[1:])
    names = [f.name for f in env.forests]
    for algo in FAMILIES[1:]:
        env.reset()
        _, _, _, _, info = env.step(len(env.options) + names.index(algo))
        assert info["forest"] == algo
        assert info["makespan_s"] == pytest.approx(base[algo], rel=1e-9)


def test_the_rings_row_is_the_packing_where_rings_reach_the_optimum():
    graph = topology.make_graph("bcube", n=3, k=1)  # rings reach the optimum on BCube
    env = TreeBuildingEnv(graph, CFG)
    env.reset()
    names = [f.name for f in env.forests]
    _, _, _, _, info = env.step(len(env.options) + names.index("rings"))
    assert info["makespan_s"] == pytest.approx(
        baseline_makespans(graph, CFG, ("packing",))["packing"], rel=1e-9)


def test_forest_rows_can_be_switched_off():
    graph = topology.make_graph("bcube", n=2, k=1)
    env = TreeBuildingEnv(graph, EnvConfig(size_bytes=64 * 1024, forest_rows=False))
    _, info = env.reset()
    assert info["action_mask"].sum() == len(env.options) and not env.forests


def test_predicted_rule_picks_a_forest_row():
    graph = topology.make_graph("jellyfish", switches=8, seed=0)
    schedule, makespan = rule_schedule(graph, CFG, "predicted", 1)
    validate(schedule, graph)
    assert makespan > 0 and schedule.meta["forest"]


def test_first_decisions_score_every_forest_row_as_playing_it_does():
    from agent.train import FirstDecisions, References, TrainConfig

    graph = topology.make_graph("dcell", n=2, k=1)
    cfg = TrainConfig(settings=("calibrated 64KiB",))
    references = References(cfg)
    firsts = FirstDecisions([graph], cfg, references)
    firsts.add(0, "calibrated 64KiB")
    (obs,), (ratios,) = firsts.batch()
    ref = references(0, graph, "calibrated 64KiB")
    env = TreeBuildingEnv(graph, CFG, reference_s=ref)
    first = len(env.options)
    assert np.isinf(ratios[:first]).all()
    assert np.isfinite(ratios[first:first + len(env.forests)]).all()
    for j in range(len(env.forests)):
        env.reset()
        _, reward, done, _, _ = env.step(first + j)
        assert done and ratios[first + j] == pytest.approx(-reward, rel=1e-12)


def test_rank_update_moves_the_choice_to_the_best_known_row():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = RowScorer(F_UP, 32, TREE_ROWS)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    obs = [rng.random((TREE_ROWS, F_UP)).astype(np.float32) for _ in range(4)]
    ratios = []
    for _ in range(4):
        r = np.full(TREE_ROWS, np.inf)
        r[2:8] = 1.0 + 0.1 * rng.permutation(6)
        ratios.append(r)
    before = rank_update(model, opt, obs, ratios, temp=0.05, epochs=1, max_grad_norm=0.5)
    after = rank_update(model, opt, obs, ratios, temp=0.05, epochs=300, max_grad_norm=0.5)
    assert after < before
    with torch.no_grad():
        logits, _ = model(torch.as_tensor(np.stack(obs)),
                          torch.as_tensor(np.isfinite(np.stack(ratios))))
    assert (logits.argmax(1).numpy() == np.stack(ratios).argmin(1)).all()
