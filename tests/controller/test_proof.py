"""The proof: per route, bytes on every hop of its path; zero anywhere is an error."""

from __future__ import annotations

import copy

import pytest

import topology as tp
from controller import rules
from controller.fakeof import FakeNetwork, counters, tcp
from controller.proof import check_routes, stats_reply, verify_routes
from controller.topofile import layout
from traffic.schedule import Schedule, Transfer, routes

LONG = ("s00", "w1_0", "s10", "w0_1", "s11", "w1_1", "s01")


@pytest.fixture
def setup():
    graph = tp.make_graph("bcube", n=2, k=1)
    topo = layout(graph)
    schedule = Schedule(
        topology=graph.graph["spec"], size_bytes=4000, dtype="int32", algo="test",
        transfers=(Transfer(0, "s00", "s01", 0, 1000, "copy", LONG),
                   Transfer(1, "s01", "s00", 0, 1000, "copy", ("s01", "w0_0", "s00"))),
    )
    chosen = routes(schedule)
    net = FakeNetwork(topo, rules.base_rules(topo) + rules.route_rules(topo, chosen))
    return topo, schedule, chosen, net


def run_traffic(topo, net, route, segments=5):
    """Segments of 1000 bytes along the route, each acknowledged."""
    for _ in range(segments):
        net.send(route.src, tcp(topo, route.src, route.dst, 45000, route.tcp_port))
        net.send(route.dst, tcp(topo, route.dst, route.src, route.tcp_port, 45000))


def test_all_routes_proven(setup):
    topo, schedule, chosen, net = setup
    for route in chosen:
        run_traffic(topo, net, route)
    stats = stats_reply(chosen, counters(net))
    report = check_routes(schedule, topo, stats)
    assert report.ok, report.summary()
    first = report.routes[0]
    assert list(first.forward_bytes) == list(LONG)
    assert all(b == 5000 for b in first.forward_bytes.values())
    doc = verify_routes(schedule, topo, stats)
    assert doc["ok"] is True and doc["errors"] == []
    assert doc["routes"][0]["forward_bytes"]["s10"] == 5000


def test_route_without_traffic_is_an_error(setup):
    topo, schedule, chosen, net = setup
    run_traffic(topo, net, chosen[0])
    report = check_routes(schedule, topo, stats_reply(chosen, counters(net)))
    assert not report.ok
    assert report.routes[0].ok
    assert any("zero packets" in e or "no rule counted" in e for e in report.routes[1].errors)


def test_zero_counter_on_one_hop_is_an_error(setup):
    topo, schedule, chosen, net = setup
    for route in chosen:
        run_traffic(topo, net, route)
    stats = stats_reply(chosen, counters(net))
    broken = copy.deepcopy(stats)
    broken["routes"][0]["forward"]["s11"] = {"packets": 0, "bytes": 0}
    report = check_routes(schedule, topo, broken)
    assert not report.ok
    assert report.routes[0].errors == ["forward: zero packets on s11"]
    doc = verify_routes(schedule, topo, broken)
    assert doc["ok"] is False
    assert doc["errors"] == ["s00->s01 port 20000: forward: zero packets on s11"]


def test_traffic_off_the_path_is_an_error(setup):
    topo, schedule, chosen, net = setup
    for route in chosen:
        run_traffic(topo, net, route)
    stats = stats_reply(chosen, counters(net))
    stats["routes"][1]["reverse"]["w1_0"] = {"packets": 3, "bytes": 3000}
    report = check_routes(schedule, topo, stats)
    assert "reverse: traffic counted off the path on w1_0" in report.routes[1].errors


def test_too_few_bytes_unchosen_and_incomplete_are_errors(setup):
    topo, schedule, chosen, net = setup
    for route in chosen:
        run_traffic(topo, net, route, segments=2)
    stats = stats_reply(chosen, counters(net), missing=["w0_0"])
    report = check_routes(schedule, topo, stats)
    assert any("less than the 4000 bytes of payload" in e for e in report.routes[0].errors)
    assert any("incomplete" in e and "w0_0" in e for e in report.errors)
    # what was installed but not chosen
    report = check_routes(chosen[:1], topo, stats_reply(chosen, counters(net)))
    assert any("was not chosen" in e for e in report.errors)
    assert report.routes[0].ok


def test_route_not_installed_is_an_error(setup):
    topo, schedule, chosen, net = setup
    report = check_routes(schedule, topo, stats_reply([], []))
    assert [r.errors for r in report.routes] == [["not installed (no rules with this route's "
                                                  "path and port)"]] * 2
