"""Forest rows: the packed-forest and tree-family choices of the upper level's first step."""

import math

import pytest

import topology
from agent.env import EnvConfig, TreeBuildingEnv
from agent.forest import FAMILIES, FOREST_COLUMNS, FOREST_OPTIONS, schedule_features
from agent.instances import degrade
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
