"""Routes that survive a link failure: fast-failover groups, detour rules, re-routes, proof."""

from __future__ import annotations

import pytest

import topology as tp
from controller import rules
from controller.fakeof import FakeNetwork, ForwardingError, counters, tcp
from controller.proof import check_routes, stats_reply
from controller.topofile import Topology, layout
from topology.routing import backup_path
from traffic import collectives
from traffic.schedule import Route, routes

NETWORKS = {
    "bcube41": ("bcube", {"n": 4, "k": 1}),
    "jellyfish": ("jellyfish", {}),
    "bcube21": ("bcube", {"n": 2, "k": 1}),
}


def setup(key: str):
    family, params = NETWORKS[key]
    graph = tp.make_graph(family, **params)
    topo = layout(graph)
    schedule = collectives.build("multitree", graph, 4 * 1000, "float32")
    return topo, schedule, routes(schedule)


@pytest.fixture(scope="module", params=["bcube41", "jellyfish"])
def network(request):
    topo, schedule, chosen = setup(request.param)
    built = rules.failover_rules(topo, chosen)
    return topo, schedule, chosen, built


def directions(route):
    """(path, reverse, sender, packet fields) of a route's data and of its ACKs."""
    fwd = (route.src, route.dst, 45000, route.tcp_port)
    ack = (route.dst, route.src, route.tcp_port, 45000)
    return ((tuple(route.path), False, route.src, fwd),
            (tuple(reversed(route.path)), True, route.dst, ack))


def datapaths_of(topo: Topology, path) -> list[str]:
    return [name for name, _, _ in rules.path_hops(topo, tuple(path))]


def repair(topo: Topology, path, u: str, v: str):
    """backup_path of hop u->v, and whether it repairs at u itself."""
    i = path.index(u)
    backup = backup_path(topo.graph, path, u, v)
    return backup, backup is not None and backup[:i + 1] == path[:i + 1]


def backup_counted(net: FakeNetwork, index: int, reverse: bool) -> set[str]:
    cookie = rules.route_cookie(index, reverse) | rules.FAILOVER_BIT
    return {name for (name, c), n in net.packets.items() if c == cookie and n}


def test_groups_and_detours_are_well_formed(network):
    topo, _, chosen, built = network
    assert rules.failover_rules(topo, chosen) == built  # deterministic
    ports = {dp.dpid: set(dp.ports.values()) for dp in topo.datapaths.values()}
    seen = set()
    for g in built.groups:
        assert (g.dpid, g.group_id) not in seen
        seen.add((g.dpid, g.group_id))
        assert len(g.buckets) == 2 and g.buckets[0][1] != g.buckets[1][1]
        assert all(watch == out and out in ports[g.dpid] for watch, out in g.buckets)
        assert rules.parse_group_id(g.group_id)[0] < len(chosen)
    used = {(f.dpid, a[1]) for f in built.flows for a in f.actions if a[0] == "group"}
    assert used == seen
    for f in built.flows:
        assert rules.parse_cookie(f.cookie) is not None
        if f.cookie & rules.FAILOVER_BIT:
            assert f.actions[0][0] == "output"
    keys = [(f.dpid, f.priority, frozenset(f.match.items())) for f in built.flows]
    assert len(keys) == len(set(keys))


def test_unprotected_hops_are_those_not_repaired_locally(network):
    topo, _, chosen, built = network
    expected = set()
    for index, route in enumerate(chosen):
        for path, reverse, _, _ in directions(route):
            for u, v in zip(path, path[1:]):
                if u in topo.datapaths and not repair(topo, path, u, v)[1]:
                    expected.add((index, reverse, (u, v)))
    assert {(u.route, u.reverse, u.hop) for u in built.unprotected} == expected
    assert all(u.reason in ("upstream", "no detour") for u in built.unprotected)
    if topo.family == "jellyfish":  # a ToR's link to its server has no way around
        assert expected and all(v in topo.hosts for _, _, (_, v) in expected)


def test_no_failure_follows_the_primary_path(network):
    topo, _, chosen, built = network
    net = FakeNetwork(topo, rules.base_rules(topo) + list(built.flows) + list(built.groups))
    for route in chosen:
        for path, _, sender, (s, d, sport, dport) in directions(route):
            walk = net.send(sender, tcp(topo, s, d, sport, dport))
            assert walk.delivered_to == path[-1]
            assert walk.nodes == datapaths_of(topo, path)
    assert net.packets and not any(c & rules.FAILOVER_BIT for _, c in net.packets)
    assert all(k == 0 for _, _, k in net.group_packets)


def test_a_failed_link_is_repaired_along_backup_path(network):
    topo, _, chosen, built = network
    net = FakeNetwork(topo, rules.base_rules(topo) + list(built.flows) + list(built.groups))
    unprotected = {(u.route, u.reverse, u.hop) for u in built.unprotected}
    repaired = 0
    for index, route in enumerate(chosen):
        for a, b in zip(route.path, route.path[1:]):
            net.link_down(a, b)
            for path, reverse, sender, (s, d, sport, dport) in directions(route):
                u, v = (a, b) if not reverse else (b, a)
                net.packets.clear()
                walk = net.send(sender, tcp(topo, s, d, sport, dport))
                backup, local = repair(topo, path, u, v)
                if u not in topo.datapaths:
                    assert walk.lost  # the sending server's only link
                    continue
                assert local == ((index, reverse, (u, v)) not in unprotected)
                if not local:
                    assert walk.lost and walk.delivered_to is None
                    continue
                repaired += 1
                assert walk.delivered_to == path[-1]
                assert walk.nodes == datapaths_of(topo, backup)
                # backup rules count exactly where the packet arrived off the primary path
                primary = {n: i for n, i, _ in rules.path_hops(topo, path)}
                detour = {n for n, i, _ in rules.path_hops(topo, backup) if primary.get(n) != i}
                assert detour and backup_counted(net, index, reverse) == detour
                assert not backup_counted(net, index, not reverse)
            net.link_up(a, b)
    assert repaired > 0


def test_proof_reports_failed_over_routes(network):
    topo, schedule, chosen, built = network
    net = FakeNetwork(topo, rules.base_rules(topo) + list(built.flows) + list(built.groups))
    # a switch-to-switch link crossed by the first route, repaired locally both ways
    route = chosen[0]
    a, b = next((a, b) for a, b in zip(route.path, route.path[1:])
                if a in topo.datapaths and b in topo.datapaths)
    net.link_down(a, b)
    crossing = set()
    for r in chosen:
        hops = set(zip(r.path, r.path[1:]))
        if (a, b) in hops or (b, a) in hops:
            crossing.add(f"{r.src}->{r.dst} port {r.tcp_port}")
        for _ in range(10):  # 1000-byte packets: more than any route's payload
            for _, _, sender, (s, d, sport, dport) in directions(r):
                net.send(sender, tcp(topo, s, d, sport, dport))
    report = check_routes(schedule, topo, stats_reply(chosen, counters(net)))
    assert report.ok, report.summary()
    assert {line.rsplit(":", 1)[0] for line in report.all_failed_over()} == crossing
    assert report.summary().endswith(f", {len(crossing)} failed over")
    doc = report.to_dict()
    assert doc["ok"] and doc["failed_over"] == report.all_failed_over()
    # no failure: the same proof as without failover rules, nothing failed over
    net = FakeNetwork(topo, rules.base_rules(topo) + list(built.flows) + list(built.groups))
    for r in chosen:
        for _ in range(10):  # 1000-byte packets: more than any route's payload
            for _, _, sender, (s, d, sport, dport) in directions(r):
                net.send(sender, tcp(topo, s, d, sport, dport))
    report = check_routes(schedule, topo, stats_reply(chosen, counters(net)))
    assert report.ok and report.summary() == f"ok: {len(chosen)} routes proven"
    assert report.to_dict()["failed_over"] == []


def test_upstream_repair_is_a_controller_reroute():
    topo, _, chosen = setup("bcube21")
    built = rules.failover_rules(topo, chosen)
    upstream = [u for u in built.unprotected if u.reason == "upstream"]
    assert upstream
    for hole in upstream:
        a, b = hole.hop
        moved = rules.reroute(topo, chosen, built.unprotected, a, b)
        assert hole.route in moved
        current = [moved.get(i, r) for i, r in enumerate(chosen)]
        again = rules.failover_rules(topo, current, rerouted=set(moved))
        net = FakeNetwork(topo, list(again.flows) + list(again.groups))
        net.link_down(a, b)
        for index, spec in moved.items():
            assert spec.path == backup_path(topo.graph, chosen[index].path, a, b)
            for path, _, sender, (s, d, sport, dport) in directions(spec):
                walk = net.send(sender, tcp(topo, s, d, sport, dport))
                assert walk.delivered_to == path[-1]
                assert walk.nodes == datapaths_of(topo, path)
        # rebuilt knowing the link is down, no detour or group leads into it
        aware = rules.failover_rules(topo, current, set(moved), down=[(a, b)])
        into = {(topo.datapaths[x].dpid, topo.datapaths[x].ports[y]) for x, y in ((a, b), (b, a))
                if x in topo.datapaths}
        assert not {(g.dpid, out) for g in aware.groups for _, out in g.buckets} & into
        assert not {(f.dpid, f.actions[0][1]) for f in aware.flows
                    if f.cookie & rules.FAILOVER_BIT and f.actions} & into
        counted = {rules.parse_cookie(c)[0]: c for (_, c) in net.packets}
        assert all(c & rules.FAILOVER_BIT for i, c in counted.items() if i in moved)
        stats = stats_reply(chosen, counters(net), rerouted={i: s.path for i, s in moved.items()})
        report = check_routes([chosen[i] for i in moved], topo, {
            **stats, "routes": [stats["routes"][i] for i in moved]})
        assert report.ok, report.summary()
        assert all(r.failed_over == ["forward", "reverse"] for r in report.routes)


def test_a_server_link_without_detour_is_not_rerouted():
    topo, _, chosen = setup("jellyfish")
    built = rules.failover_rules(topo, chosen)
    hole = next(u for u in built.unprotected if u.reason == "no detour")
    assert rules.reroute(topo, chosen, built.unprotected, *hole.hop) == {}


def test_clashing_detours_keep_the_first():
    topo, _, _ = setup("jellyfish")
    path = ("s0_0", "w0", "w13", "w9", "w10", "w7", "w1", "s1_0")
    route = Route("s0_0", "s1_0", path, 20000, (0,))
    built = rules.failover_rules(topo, [route])
    clashes = [u for u in built.unprotected if u.reason == "conflict"]
    assert clashes and all(not u.reverse or u.hop == ("w7", "w1") for u in clashes)
    net = FakeNetwork(topo, list(built.flows) + list(built.groups))
    (clash,) = [u for u in clashes if not u.reverse]
    net.link_down(*clash.hop)
    assert net.send("s0_0", tcp(topo, "s0_0", "s1_0", 45000, 20000)).lost
    moved = rules.reroute(topo, [route], built.unprotected, *clash.hop)
    again = rules.failover_rules(topo, [moved[0]], rerouted={0})
    net = FakeNetwork(topo, list(again.flows) + list(again.groups))
    net.link_down(*clash.hop)
    walk = net.send("s0_0", tcp(topo, "s0_0", "s1_0", 45000, 20000))
    assert walk.delivered_to == "s1_0" and walk.nodes == list(moved[0].path[1:-1])


def test_fake_network_groups_and_down_links():
    topo, _, _ = setup("bcube21")
    dp = topo.datapaths["s00"]
    match = {"eth_type": rules.ETH_IPV4}
    group = rules.GroupRule(dp.dpid, 7, ((dp.ports["w0_0"], dp.ports["w0_0"]),
                                         (dp.ports["w1_0"], dp.ports["w1_0"])))
    net = FakeNetwork(topo, [rules.FlowRule(dp.dpid, 1, match, (("group", 7),)), group])
    # the next datapath has no rules: it drops
    assert net.send("s00", match).hops == [("s00", 1, dp.ports["w0_0"]), ("w0_0", 1, 0)]
    net.link_down("s00", "w0_0")
    assert net.send("s00", match).nodes == ["s00", "w1_0"]
    net.link_down("s00", "w1_0")
    walk = net.send("s00", match)
    assert walk.hops == [("s00", 1, 0)] and not walk.lost
    assert net.group_packets == {("s00", 7, 0): 1, ("s00", 7, 1): 1}
    with pytest.raises(KeyError, match="not a link"):
        net.link_down("s00", "s01")
    with pytest.raises(ForwardingError, match="defined twice"):
        FakeNetwork(topo, [group, group])
    with pytest.raises(ForwardingError, match="group 8, which is missing"):
        FakeNetwork(topo, [rules.FlowRule(dp.dpid, 1, match, (("group", 8),))]).send(
            "s00", match)
