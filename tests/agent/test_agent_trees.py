"""Trees span the servers, every hand rule's plan validates, cycles are what they claim."""

import numpy as np
import pytest

import topology
from agent.env import EnvConfig
from agent.plan import Plan
from agent.rules import RULES, rule_schedule
from agent.trees import alternating_cycle, cycle_set_load, greedy_tree, overlay_for
from traffic.schedule import validate

SMALL = [("bcube", {"n": 2, "k": 1}), ("dcell", {"n": 2, "k": 1}),
         ("jellyfish", {"switches": 8, "ports": 4, "uplinks": 3, "seed": 0})]


@pytest.mark.parametrize("family,params", SMALL)
@pytest.mark.parametrize("rule", RULES)
def test_every_hand_rule_spans_and_validates(family, params, rule):
    graph = topology.make_graph(family, **params)
    cfg = EnvConfig(size_bytes=4 * 64 * 8)
    for per_server in (1, 2):
        schedule, makespan = rule_schedule(graph, cfg, rule, per_server)
        validate(schedule, graph)
        assert makespan > 0


def test_alternating_cycle_uses_both_nics_of_every_server():
    graph = topology.make_graph("dcell", n=4, k=1)
    ov = overlay_for(graph)
    order = alternating_cycle(ov)
    assert order is not None and sorted(order) == list(range(ov.n))
    for i, v in enumerate(order):
        pred, succ = order[i - 1], order[(i + 1) % ov.n]
        first = {ov.hop_path[ov.pair_hops[(v, w)][0]][1] for w in (pred, succ)}
        assert len(first) == 2


def test_rounds_chain_sends_and_still_validate():
    graph = topology.make_graph("bcube", n=2, k=1)
    ov = overlay_for(graph)
    load = np.zeros(len(ov.cap_Bps))
    trees = [greedy_tree(ov, c % ov.n, load, 64.0, 0.25, 1.0) for c in range(2 * ov.n)]
    plan = Plan(ov, trees, 4 * 16 * 2 * ov.n)
    # One task per round, in a topological order: the strictest chaining.
    order, placed = [], set()
    while len(order) < len(plan.tasks):
        i = next(i for i, t in enumerate(plan.tasks)
                 if i not in placed and set(t.deps) <= placed)
        order.append([i])
        placed.add(i)
    schedule = plan.schedule(order)
    validate(schedule, graph)
    assert sum(len(t.deps) for t in schedule.transfers) > sum(len(t.deps) for t in plan.tasks)
    with pytest.raises(ValueError, match="exactly once"):
        plan.schedule(order[:-1])


def test_cycle_search_is_seeded():
    graph = topology.make_graph("jellyfish", switches=8, ports=4, uplinks=3, seed=1)
    from agent.trees import Overlay

    assert Overlay(graph, seed=5).cycles == Overlay(graph, seed=5).cycles


def test_ring_packing_tours_replace_unbalanced_cycles():
    # DCell(3,1) has no NIC-alternating cycle; two searched cycles load some directed link
    # 1.5x what the seven tours of the ring packing do, used both ways by 14 chunks per server.
    ov = overlay_for(topology.make_graph("dcell", n=3, k=1), turns=14)
    assert len(ov.cycles) > 2
    assert cycle_set_load(ov, ov.cycles) < 0.6
    for cycle in ov.cycles:
        assert sorted(v for v, _ in cycle) == list(range(ov.n))
        for i, (v, hop) in enumerate(cycle):
            assert ov.hop_src[hop] == v and ov.hop_dst[hop] == cycle[(i + 1) % ov.n][0]
    # Where an alternating cycle exists the searched cycles stay.
    assert len(overlay_for(topology.make_graph("dcell", n=2, k=1), turns=14).cycles) == 1


def test_ring_packing_tours_need_a_turn_per_tour_and_direction():
    # DCell(3,1)'s packing has 7 tours: with 2 chunks per server only the first would carry
    # chunks, so the two searched cycles stay; 14 chunks per server cover every tour both ways.
    graph = topology.make_graph("dcell", n=3, k=1)
    assert len(overlay_for(graph, turns=2).cycles) == 2
    assert len(overlay_for(graph, turns=13).cycles) == 2
    assert len(overlay_for(graph, turns=14).cycles) == 7
