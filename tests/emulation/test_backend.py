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
    # The switches' port counters saw every transfer's bytes on every link of its path:
    # the payload plus the TCP/IP and Ethernet headers, and little else.
    load = run.link_load
    assert load is not None and load.source == "emulation"
    assert load.edges_s[0] <= 0.0 and load.edges_s[-1] >= run.result.makespan_s
    widths = [b - a for a, b in zip(load.edges_s, load.edges_s[1:])]
    payload: dict[tuple[str, str], float] = {}
    for t in schedule.transfers:
        for hop in zip(t.path, t.path[1:]):
            payload[hop] = payload.get(hop, 0.0) + 8.0 * t.size_bytes(schedule.dtype)
    for d, values in load.mbps.items():
        counted = 1e6 * sum(v * w for v, w in zip(values, widths))
        if d in payload:
            assert payload[d] <= counted <= 1.3 * payload[d], d
        else:
            assert counted <= 0.05 * max(payload.values()), d  # acknowledgements only
