"""Link load from the simulator: exact per-bin Mbit/s of every directed link."""

from __future__ import annotations

import math

import pytest

import topology as tp
from simulator import simulate
from simulator.usage import LinkLoad, directed_links, link_load
from topology.links import with_background_flow, with_link_failure
from traffic.plugins import make_schedule
from traffic.schedule import Schedule, Transfer


def carried_bits(load: LinkLoad) -> dict[tuple[str, str], float]:
    widths = [b - a for a, b in zip(load.edges_s, load.edges_s[1:])]
    return {d: 1e6 * sum(v * w for v, w in zip(values, widths))
            for d, values in load.mbps.items()}


def expected_bits(schedule: Schedule) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for t in schedule.transfers:
        for hop in zip(t.path, t.path[1:]):
            out[hop] = out.get(hop, 0.0) + 8.0 * t.size_bytes(schedule.dtype)
    return out


@pytest.mark.parametrize("family,params,algo", [
    ("bcube", {"n": 4, "k": 1}, "ring"),
    ("bcube", {"n": 4, "k": 1}, "multitree"),
    ("dcell", {"n": 3, "k": 1}, "ps-sharded"),
    ("jellyfish", {"switches": 8, "ports": 5, "uplinks": 3, "seed": 1}, "double-tree"),
])
def test_every_link_carries_exactly_the_bits_routed_over_it(family, params, algo):
    graph = tp.make_graph(family, **params)
    schedule = make_schedule(algo, graph, 200_000, "float32")
    load = link_load(graph, schedule, startup_s=0.002, hop_latency_s=0.0005)
    carried, expected = carried_bits(load), expected_bits(schedule)
    assert set(load.mbps) == set(directed_links(graph))
    for d, bits in carried.items():
        assert bits == pytest.approx(expected.get(d, 0.0), rel=1e-9, abs=1e-3), d
    # the bins end where the simulated run ends
    result = simulate(graph, schedule, startup_s=0.002, hop_latency_s=0.0005)
    assert load.edges_s[-1] == pytest.approx(result.makespan_s)


def test_no_link_goes_above_its_rate_and_a_ring_fills_its_links():
    graph = tp.make_graph("bcube", n=4, k=1)
    schedule = make_schedule("ring", graph, 1_000_000, "float32")
    load = link_load(graph, schedule, goodput=0.9)
    cap = 0.9 * graph.graph["bw_mbps"]
    busiest = max(max(values) for values in load.mbps.values())
    assert busiest == pytest.approx(cap)
    assert all(v <= cap * (1 + 1e-9) for values in load.mbps.values() for v in values)


def test_given_bins_and_mean():
    graph = tp.make_graph("bcube", n=2, k=1)
    schedule = make_schedule("ring", graph, 100_000, "float32")
    end = simulate(graph, schedule).makespan_s
    load = link_load(graph, schedule, edges_s=[0.0, end / 2, end, 2 * end])
    assert load.edges_s == (0.0, end / 2, end, 2 * end)
    for (a, b), values in load.mbps.items():
        assert values[2] == 0.0  # nothing after the run
        assert load.mean_mbps(a, b, end) == pytest.approx((values[0] + values[1]) / 2)
    with pytest.raises(ValueError, match="increasing"):
        link_load(graph, schedule, edges_s=[0.0, 0.0])


def test_background_flows_load_their_links_for_the_whole_run():
    graph = tp.make_graph("bcube", n=2, k=1)
    busy = with_background_flow(graph, "s00", "s01", 4.0)
    schedule = make_schedule("ring", busy, 100_000, "float32")
    load = link_load(busy, schedule)
    path = busy.graph["background_flows"][0]["path"]
    for hop in zip(path, path[1:]):
        assert min(load.mbps[hop]) >= 4.0 * (1 - 1e-9)  # capped at 4, never starved


def test_a_failed_link_carries_nothing_after_it_fails():
    graph = tp.make_graph("bcube", n=4, k=1)
    schedule = make_schedule("ring", graph, 400_000, "float32")
    at = simulate(graph, schedule).makespan_s / 2
    broken = with_link_failure(graph, "s00", "w0_0", at)
    result = simulate(broken, schedule)
    edges = [at * i / 10 for i in range(11)] + [at * (1 + i / 10) for i in range(1, 30)]
    edges = [t for t in edges if t < result.makespan_s] + [result.makespan_s]
    load = link_load(broken, schedule, edges_s=edges)
    after = [i for i in range(len(edges) - 1) if edges[i] >= at]
    assert after and all(load.mbps[("s00", "w0_0")][i] == 0.0 for i in after)
    carried = sum(carried_bits(load).values())
    assert carried >= sum(expected_bits(schedule).values())  # detours are longer
    assert result.rerouted


def test_round_trip_and_malformed_documents():
    graph = tp.make_graph("bcube", n=2, k=1)
    schedule = make_schedule("ring", graph, 100_000, "float32")
    load = link_load(graph, schedule, bins=5)
    again = LinkLoad.from_dict(load.to_dict())
    assert again.edges_s == pytest.approx(load.edges_s)
    for d, values in load.mbps.items():
        assert again.mbps[d] == pytest.approx(values, rel=1e-3)
    doc = load.to_dict()
    with pytest.raises(ValueError, match="malformed"):
        LinkLoad.from_dict({k: v for k, v in doc.items() if k != "links"})
    with pytest.raises(ValueError, match="increase"):
        LinkLoad.from_dict(doc | {"edges_s": list(reversed(doc["edges_s"]))})
    with pytest.raises(ValueError, match="values for"):
        LinkLoad.from_dict(doc | {"links": [doc["links"][0] | {"mbps": [1.0]}]})


def test_an_empty_schedule_has_an_empty_load():
    graph = tp.make_graph("bcube", n=2, k=1)
    empty = Schedule(graph.graph["spec"], 4, "float32", (), "nothing")
    load = link_load(graph, empty)
    assert all(not any(values) for values in load.mbps.values())
    assert not math.isnan(load.edges_s[-1])


def test_transfers_without_links_or_bytes_are_fine():
    graph = tp.make_graph("bcube", n=2, k=1)
    t = Transfer(0, "s00", "s01", 0, 0, "copy", ("s00", "w0_0", "s01"))
    load = link_load(graph, Schedule(graph.graph["spec"], 4, "float32", (t,), "x"))
    assert all(not any(values) for values in load.mbps.values())
