"""The shipped general checkpoint serves graphs it never trained on, degraded ones too."""

import math

import pytest

import topology
from agent import schedule_for
from agent.instances import TEST, TRAIN, degrade, graphs, label
from agent.policy import GENERAL, load_checkpoint
from simulator import simulate
from traffic.schedule import validate


def test_general_checkpoint_lists_only_training_instances():
    _, _, doc = load_checkpoint(GENERAL)
    trained = set(doc["meta"]["instances"])
    assert trained == {label(g) for g in graphs(TRAIN, degraded=True, seed=doc["config"]["seed"])}
    assert not trained & {label(g) for g in graphs(TEST, degraded=True)}


@pytest.mark.parametrize("family,params", [TEST[0], TEST[3], TEST[6]])
def test_general_checkpoint_schedules_an_unseen_instance(family, params):
    graph = topology.make_graph(family, **params)
    for g in (graph, degrade(graph, "failed", seed=7)):
        schedule = schedule_for(g, g.graph["spec"], 1_000_000, seed=0)
        validate(schedule, g)
        assert schedule.algo == "drl" and schedule.meta["checkpoint"] == GENERAL.name
        assert 0 < simulate(g, schedule).makespan_s < math.inf
