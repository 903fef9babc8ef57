"""Flow rules checked by a fake flow table that walks packets hop by hop."""

from __future__ import annotations

import json

import pytest

import topology as tp
from controller import rules
from controller.fakeof import FakeNetwork, ForwardingError, arp_request, ipv4, tcp
from controller.topofile import Topology, host_ip, host_mac, layout
from traffic.schedule import Route

NETWORKS = {
    "bcube21": ("bcube", {"n": 2, "k": 1}),
    "bcube41": ("bcube", {"n": 4, "k": 1}),
    "dcell21": ("dcell", {"n": 2, "k": 1}),
    "dcell31": ("dcell", {"n": 3, "k": 1}),
    "jelly843": ("jellyfish", {"switches": 8, "ports": 4, "uplinks": 3}),
}


def topo_of(key: str) -> Topology:
    family, params = NETWORKS[key]
    return layout(tp.make_graph(family, **params))


@pytest.fixture(scope="module", params=sorted(NETWORKS))
def topo(request) -> Topology:
    return topo_of(request.param)


def non_shortest(topo: Topology, src: str, dst: str) -> tuple[str, ...]:
    """A path from src to dst longer than the shortest one."""
    found = tp.paths(topo.graph, src, dst, 6)
    shortest = min(len(p) for p in found)
    return tuple(next(p for p in found if len(p) > shortest))


def test_layout_addresses_and_ports(topo):
    servers = tp.servers(topo.graph)
    for r, s in enumerate(servers):
        assert topo.hosts[s].ip == host_ip(r) and topo.hosts[s].mac == host_mac(r)
    assert host_ip(0) == "10.0.0.1" and host_ip(255) == "10.0.1.0"
    assert host_mac(0) == "00:00:00:00:00:01"
    for name, dp in topo.datapaths.items():
        assert len(dp.bridge) <= 15
        assert set(dp.ports) == set(topo.graph.neighbors(name)) | (
            {name} if name in topo.hosts else set())
    server_dps = set(servers) & set(topo.datapaths)
    assert server_dps == (set(servers) if topo.family != "jellyfish" else set())


def test_topology_file_round_trip(topo, tmp_path):
    path = tmp_path / "topo.json"
    topo.save(path)
    doc = json.loads(path.read_text())
    assert doc["schema"] == 1 and set(doc) == {"schema", "graph", "datapaths", "hosts"}
    back = Topology.load(path)
    assert back.datapaths == topo.datapaths and back.hosts == topo.hosts
    assert set(back.graph.edges) == set(topo.graph.edges)
    assert back.graph.graph["spec"] == topo.graph.graph["spec"]


def test_topology_file_rejects_missing_port(tmp_path):
    doc = topo_of("bcube21").to_dict()
    del doc["datapaths"]["w0_0"]["ports"]["s00"]
    with pytest.raises(ValueError, match="w0_0.*no port to 's00'"):
        Topology.from_dict(doc)


def test_base_rules_deliver_every_pair_without_loops(topo):
    net = FakeNetwork(topo, rules.base_rules(topo))
    servers = tp.servers(topo.graph)
    for src in servers:
        for dst in servers:
            if src == dst:
                continue
            for packet in (ipv4(topo, src, dst), arp_request(topo, src, dst),
                           tcp(topo, src, dst, 40000, 20000)):
                walk = net.send(src, packet)
                assert walk.delivered_to == dst, (src, dst, packet, walk)
                # the tree follows a shortest path (in links; Jellyfish: switches only)
                links = len(walk.hops) + (1 if topo.family == "jellyfish" else -1)
                assert links == len(tp.shortest_paths(topo.graph, src, dst, 1)[0]) - 1


def test_no_rule_floods(topo):
    all_rules = rules.base_rules(topo)
    specs = [Route(s, d, non_shortest(topo, s, d), 20000 + i, (i,))
             for i, (s, d) in enumerate(pairs(topo)[:6])]
    all_rules += rules.route_rules(topo, specs)
    ports = {dp.dpid: set(dp.ports.values()) for dp in topo.datapaths.values()}
    for r in all_rules:
        assert len(r.actions) <= 1, r
        for kind, port in r.actions:
            assert kind == "output" and port in ports[r.dpid], r
    misses = [r for r in all_rules if r.match == {}]
    assert len(misses) == len(topo.datapaths) and all(r.actions == () for r in misses)


def test_unknown_traffic_is_dropped(topo):
    net = FakeNetwork(topo, rules.base_rules(topo))
    src = tp.servers(topo.graph)[0]
    v6 = {"eth_type": rules.ETH_IPV6}
    assert net.send(src, v6).dropped_at is not None
    stray = {"eth_type": rules.ETH_IPV4, "ipv4_src": topo.ip(src), "ipv4_dst": "10.9.9.9"}
    assert net.send(src, stray).dropped_at is not None


def pairs(topo: Topology) -> list[tuple[str, str]]:
    """Server pairs that have a path longer than their shortest one."""
    servers = tp.servers(topo.graph)
    out = []
    for s in servers:
        for d in reversed(servers):
            found = tp.paths(topo.graph, s, d, 6) if s != d else []
            if len({len(p) for p in found}) > 1:
                out.append((s, d))
    return out


def test_schedule_route_follows_its_path_and_acks_the_reverse(topo):
    routes = []
    for i, (src, dst) in enumerate(pairs(topo)[:8]):
        routes.append(Route(src, dst, non_shortest(topo, src, dst), 20000 + i, (i,)))
    net = FakeNetwork(topo, rules.base_rules(topo) + rules.route_rules(topo, routes))
    for index, route in enumerate(routes):
        walk = net.send(route.src, tcp(topo, route.src, route.dst, 45000, route.tcp_port))
        assert walk.delivered_to == route.dst
        assert walk.nodes == rules.route_datapaths(topo, rules.as_spec(route))
        ack = net.send(route.dst, tcp(topo, route.dst, route.src, route.tcp_port, 45000))
        assert ack.delivered_to == route.src
        assert ack.nodes == list(reversed(walk.nodes))
        # cookies map the counters back to the route, on every hop of its path only
        fwd, rev = rules.route_cookie(index), rules.route_cookie(index, reverse=True)
        assert rules.parse_cookie(fwd) == (index, False)
        assert rules.parse_cookie(rev) == (index, True)
        assert {n for (n, c) in net.packets if c == fwd} == set(walk.nodes)
        assert {n for (n, c) in net.packets if c == rev} == set(walk.nodes)
        # other ports between the same servers keep the base (shortest) route
        other = net.send(route.src, tcp(topo, route.src, route.dst, 45000, 5001))
        assert other.delivered_to == route.dst and len(other.nodes) < len(walk.nodes)


def test_forward_rule_wins_over_an_overlapping_reverse_rule():
    topo = topo_of("bcube21")
    there = Route("s00", "s01", non_shortest(topo, "s00", "s01"), 20000, (0,))
    back = Route("s01", "s00", ("s01", "w0_0", "s00"), 20001, (1,))
    net = FakeNetwork(topo, rules.base_rules(topo) + rules.route_rules(topo, [there, back]))
    # a data packet of `there` whose source port happens to be `back`'s port
    walk = net.send("s00", tcp(topo, "s00", "s01", 20001, 20000))
    assert walk.nodes == list(there.path)


def test_route_rules_match_in_port():
    topo = topo_of("jelly843")
    src, dst = "s0_0", "s7_0"
    path = non_shortest(topo, src, dst)
    out = rules.route_rules(topo, [Route(src, dst, path, 20000, (0,))])
    fwd = [r for r in out if not r.cookie & rules.REVERSE_BIT]
    assert [r.datapath for r in fwd] == list(path[1:-1])
    first = topo.datapaths[path[1]]
    assert fwd[0].match["in_port"] == first.ports[src]
    assert fwd[-1].actions == (("output", topo.datapaths[path[-2]].ports[dst]),)


@pytest.mark.parametrize("change, message", [
    ({"path": ("s00", "w0_0", "s11")}, "hop w0_0-s11 is not a link"),
    ({"path": ("s00", "w0_0", "s01")}, "path must run from s00 to s11"),
    ({"dst": "s99", "path": ("s00", "s99")}, "'s99' is not a server"),
    ({"tcp_port": 70000}, "tcp_port must be in 1..65535"),
    ({"tcp_port": "x"}, "tcp_port must be an integer"),
    ({"path": "s00"}, "path must be a list"),
    ({"path": ("s00", "w0_0", "s01", "w0_0", "s00", "w1_0", "s10", "w0_1", "s11")},
     "visits a node twice"),
])
def test_bad_routes_are_rejected(change, message):
    topo = topo_of("bcube21")
    good = {"src": "s00", "dst": "s11", "path": ("s00", "w1_0", "s10", "w0_1", "s11"),
            "tcp_port": 20000}
    rules.route_rules(topo, [good])
    with pytest.raises(ValueError, match=message):
        rules.route_rules(topo, [good, {**good, "tcp_port": 20001, **change}])


def test_duplicate_route_port_and_unknown_field_rejected():
    topo = topo_of("bcube21")
    good = {"src": "s00", "dst": "s11", "path": ["s00", "w1_0", "s10", "w0_1", "s11"],
            "tcp_port": 20000}
    with pytest.raises(ValueError, match="same src, dst and tcp_port as route 0"):
        rules.validate_routes(topo, [good, good])
    with pytest.raises(ValueError, match="unknown field 'hops'"):
        rules.validate_routes(topo, [{**good, "hops": 3}])


def test_jellyfish_servers_do_not_relay():
    topo = topo_of("jelly843")
    # a path through another server is refused even where the graph has the links
    graph = topo.graph.copy()
    graph.add_edge("s0_0", "s1_0")
    graph.add_edge("s1_0", "s7_0")
    relayed = Topology(graph, topo.datapaths, topo.hosts)
    with pytest.raises(ValueError, match="s1_0 does not forward"):
        rules.validate_routes(relayed, [{"src": "s0_0", "dst": "s7_0",
                                         "path": ["s0_0", "s1_0", "s7_0"], "tcp_port": 1}])


def test_fake_network_catches_a_loop():
    topo = topo_of("bcube21")
    a, b = topo.datapaths["s00"], topo.datapaths["w0_0"]
    match = {"eth_type": rules.ETH_IPV4, "ipv4_dst": topo.ip("s11")}
    looping = [rules.FlowRule(a.dpid, 100, match, (("output", a.ports["w0_0"]),)),
               rules.FlowRule(b.dpid, 100, match, (("output", b.ports["s00"]),))]
    with pytest.raises(ForwardingError, match="loops"):
        FakeNetwork(topo, looping).send("s00", ipv4(topo, "s00", "s11"))
