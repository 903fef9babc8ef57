"""bench.waves: its three patterns are correct AllReduces of the servers they involve."""

from __future__ import annotations

import pytest

from bench import waves
from topology import make_graph
from traffic.schedule import validate


@pytest.mark.parametrize("name", ["pair", "ps", "mesh"])
def test_each_pattern_is_an_allreduce_of_its_servers(name):
    graph = make_graph("bcube", n=4, k=1)
    schedule, servers = waves.pattern(name, graph, quarter=1000)
    validate(schedule, graph.subgraph([*servers, waves.SWITCH]).copy())
    assert {t.src for t in schedule.transfers} == set(servers)
    assert all(t.count == 1000 and t.path[1] == waves.SWITCH for t in schedule.transfers)
    waves_of = {len(t.deps) > 0 for t in schedule.transfers}
    assert waves_of == {False, True}  # two waves: the second waits for the first


def test_a_pattern_not_known_is_refused():
    with pytest.raises(ValueError, match="ring"):
        waves.pattern("ring", make_graph("bcube", n=4, k=1), quarter=10)
