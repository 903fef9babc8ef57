"""The emulation as a backend: ``EmulatedNetwork.run`` returns the simulator's Result shape."""

from __future__ import annotations

import pytest

import topology as tp
from emulation.net import EmulatedNetwork
from simulator import Result, simulate
from traffic.collectives import build

pytestmark = pytest.mark.emulation


def test_run_returns_a_result_like_the_simulators(tmp_path):
    graph = tp.make_graph("bcube", n=2, k=1)
    schedule = build("ring", graph, 100_000, "float32")
    with EmulatedNetwork(graph, workdir=tmp_path / "net") as net:
        run = net.run(schedule, tmp_path / "workers")
    simulated = simulate(graph, schedule)
    assert isinstance(run.result, Result) and run.result.source == "emulation"
    assert set(run.result.finish_s) == set(simulated.finish_s)
    assert run.result.makespan_s == max(run.result.finish_s.values()) > 0
    assert run.verified and run.sums_verified and run.route_proof["ok"]
    assert run.background_proof is None and run.failed_links == []
