"""Flow rules as plain records: base routing, a schedule's routes and their failover,
table-miss drop.

Pure (no Ryu): ``controller/app.py`` only turns these records (FlowRule, GroupRule) into
OpenFlow 1.3 messages, and ``controller/fakeof.py`` walks packets through them in tests.

- Base routing: per destination server, a shortest-path tree toward it (every datapath forwards
  to a neighbour strictly closer to the destination, so no loop is possible), for IPv4 (by
  ``ipv4_dst``) and ARP (by ``arp_tpa``, so even a broadcast ARP request travels one path to
  its target and is never flooded). The emulation also installs static ARP entries.
- Schedule routes, one per Route: (IPv4 src, IPv4 dst, TCP dst port, in_port) forwards along the
  route's path; (IPv4 dst, IPv4 src, TCP src port, in_port) carries its ACKs back along the
  reversed path. Matching ``in_port`` means a rule counts only packets that arrived from the
  path's previous hop, so counters prove the path hop by hop.
- Failover (``failover_rules``): every hop u->v of a route (each direction) whose
  ``topology.backup_path`` repairs at u itself is protected by a fast-failover group at u
  (bucket 1: out to v, bucket 2: out to the detour, each watching its own port); the route's
  rule at u outputs to the group, and the detour's datapaths up to and including the one where
  it rejoins the path get rules with the route's match, the detour's ``in_port`` and the
  route's cookie plus FAILOVER_BIT, so counters show which routes failed over. Group ids come
  from the route index and direction (``group_id``). A detour is not itself protected (one
  failure at a time). Hops repaired further upstream, with no detour,
  or whose detour would clash with rules already chosen for the route are returned as
  ``Unprotected``; the controller re-routes them when the link goes down (``reroute``), and
  a re-routed route's rules all carry FAILOVER_BIT.
- Table-miss drops (no flood, no packet-in); IPv6 is dropped by an explicit counted rule.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import networkx as nx

from controller.topofile import Topology
from topology.routing import backup_path, servers

ETH_IPV4 = 0x0800
ETH_ARP = 0x0806
ETH_IPV6 = 0x86DD
IP_TCP = 6

PRIORITY_MISS = 0
PRIORITY_DROP_IPV6 = 10
PRIORITY_BASE = 100
PRIORITY_ROUTE_REVERSE = 1000
#: Forward above reverse: a data packet whose ephemeral source port equals another route's
#: port must still take its own route.
PRIORITY_ROUTE_FORWARD = 1001

#: Cookie bits. Schedule routes carry SCHEDULE_BIT (deleted and counted by cookie mask);
#: REVERSE_BIT marks the ACK direction; FAILOVER_BIT a route's backup rules (a detour, or any
#: rule of a re-routed route); the low bits are the route index + 1.
SCHEDULE_BIT = 1 << 63
REVERSE_BIT = 1 << 62
BASE_BIT = 1 << 61
FAILOVER_BIT = 1 << 60
INDEX_MASK = (1 << 32) - 1
COOKIE_MISS = 0
COOKIE_DROP_IPV6 = BASE_BIT | INDEX_MASK


@dataclass(frozen=True)
class FlowRule:
    """One OpenFlow rule: where, match fields (Ryu OFPMatch names), actions, cookie.

    ``actions`` is a tuple of ``("output", port)`` or ``("group", group_id)``; empty means
    drop."""

    dpid: int
    priority: int
    match: dict[str, Any]
    actions: tuple[tuple[str, int], ...] = ()
    cookie: int = 0
    table: int = 0
    datapath: str = field(default="", compare=False)


@dataclass(frozen=True)
class GroupRule:
    """An OpenFlow 1.3 fast-failover group: ``buckets`` in order of preference, each
    ``(watch_port, out_port)``; a packet leaves by the first bucket whose watch port is up."""

    dpid: int
    group_id: int
    buckets: tuple[tuple[int, int], ...]
    datapath: str = field(default="", compare=False)


@dataclass(frozen=True)
class Unprotected:
    """A hop u->v of route ``route`` (index; ``reverse`` for the ACK direction) that no
    fast-failover group protects. ``reason``: ``"upstream"`` (backup_path repairs before u),
    ``"no detour"`` (backup_path finds none) or ``"conflict"`` (the detour needs a rule that
    clashes with one already chosen for the route)."""

    route: int
    reverse: bool
    hop: tuple[str, str]
    reason: str


@dataclass(frozen=True)
class RouteRules:
    """Everything a set of routes installs: flows, the groups they use, unprotected hops."""

    flows: tuple[FlowRule, ...]
    groups: tuple[GroupRule, ...] = ()
    unprotected: tuple[Unprotected, ...] = ()


@dataclass(frozen=True)
class RouteSpec:
    """A route to install: the fields of ``traffic.schedule.Route`` the controller needs."""

    src: str
    dst: str
    path: tuple[str, ...]
    tcp_port: int
    transfer_ids: tuple[int, ...] = ()


def route_cookie(index: int, reverse: bool = False) -> int:
    """Cookie of route ``index`` (0-based) in the forward or reverse direction."""
    return SCHEDULE_BIT | (REVERSE_BIT if reverse else 0) | (index + 1)


def parse_cookie(cookie: int) -> tuple[int, bool] | None:
    """(route index, reverse) of a schedule-route cookie (backup rules too), None for any
    other rule."""
    if not cookie & SCHEDULE_BIT:
        return None
    return (cookie & INDEX_MASK) - 1, bool(cookie & REVERSE_BIT)


def group_id(index: int, reverse: bool = False) -> int:
    """Group id of route ``index``'s fast-failover groups in one direction: 2 * index + 1
    (forward) or + 2 (reverse). A direction's path crosses a datapath once, so the id is
    unique per datapath; the same for every install of the same route list."""
    return 2 * index + (2 if reverse else 1)


def parse_group_id(gid: int) -> tuple[int, bool]:
    """(route index, reverse) of a group id from ``group_id``."""
    return (gid - 1) // 2, bool((gid - 1) % 2)


def miss_rules(topo: Topology) -> list[FlowRule]:
    """Per datapath: table-miss drop and an explicit IPv6 drop."""
    out = []
    for dp in topo.datapaths.values():
        out.append(FlowRule(dp.dpid, PRIORITY_MISS, {}, (), COOKIE_MISS, datapath=dp.name))
        out.append(FlowRule(dp.dpid, PRIORITY_DROP_IPV6, {"eth_type": ETH_IPV6}, (),
                            COOKIE_DROP_IPV6, datapath=dp.name))
    return out


def next_hops(topo: Topology, dst: str) -> dict[str, str]:
    """Shortest-path tree toward server ``dst``: datapath name -> the neighbour it forwards to
    (``dst`` itself at the datapath that delivers to the host). Ties go to the smaller name.

    Only datapaths and ``dst`` relay, so Jellyfish servers never forward for others."""
    graph = topo.graph
    usable = set(topo.datapaths) | {dst}
    sub = graph.subgraph(usable)
    dist = nx.single_source_shortest_path_length(sub, dst)
    hops = {}
    for name in topo.datapaths:
        if name == dst:
            hops[name] = dst
            continue
        if name not in dist:
            continue
        closer = [u for u in sub.neighbors(name) if dist.get(u) == dist[name] - 1]
        hops[name] = min(closer)
    return hops


def base_rules(topo: Topology) -> list[FlowRule]:
    """Table-miss drop, IPv6 drop, and shortest-path IPv4 + ARP routing to every server."""
    out = miss_rules(topo)
    for rank, dst in enumerate(servers(topo.graph)):
        ip = topo.ip(dst)
        for name, hop in next_hops(topo, dst).items():
            dp = topo.datapaths[name]
            action = (("output", dp.ports[hop]),)
            for match in ({"eth_type": ETH_IPV4, "ipv4_dst": ip},
                          {"eth_type": ETH_ARP, "arp_tpa": ip}):
                out.append(FlowRule(dp.dpid, PRIORITY_BASE, match, action,
                                    BASE_BIT | (rank + 1), datapath=name))
    return out


def rules_for(rules: list[FlowRule], dpid: int) -> list[FlowRule]:
    """The rules of one datapath."""
    return [r for r in rules if r.dpid == dpid]


def as_spec(route: Any) -> RouteSpec:
    """A RouteSpec from a traffic.schedule.Route, a RouteSpec or a JSON object; ValueError
    naming the missing or mistyped field."""
    if isinstance(route, dict):
        get = route.get
        unknown = set(route) - {"src", "dst", "path", "tcp_port", "transfer_ids"}
        if unknown:
            raise ValueError(f"route has an unknown field {sorted(unknown)[0]!r}")
    else:
        def get(key: str, default: Any = None) -> Any:
            return getattr(route, key, default)
    src, dst, path, port = get("src"), get("dst"), get("path"), get("tcp_port")
    ids = get("transfer_ids", ()) or ()
    if not isinstance(src, str) or not isinstance(dst, str):
        raise ValueError("route src and dst must be server names")
    if not isinstance(path, (list, tuple)) or not all(isinstance(v, str) for v in path):
        raise ValueError(f"route {src}->{dst}: path must be a list of node names")
    if isinstance(port, bool) or not isinstance(port, int):
        raise ValueError(f"route {src}->{dst}: tcp_port must be an integer, got {port!r}")
    if not isinstance(ids, (list, tuple)) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ValueError(f"route {src}->{dst}: transfer_ids must be a list of integers")
    return RouteSpec(src, dst, tuple(path), port, tuple(ids))


def validate_routes(topo: Topology, routes: list[Any]) -> list[RouteSpec]:
    """Check routes against the graph and the port map; ValueError naming the first fault."""
    specs = [as_spec(r) for r in routes]
    seen: dict[tuple[str, str, int], int] = {}
    for i, r in enumerate(specs):
        where = f"route {i} ({r.src}->{r.dst}, port {r.tcp_port})"
        for end in (r.src, r.dst):
            if end not in topo.hosts:
                raise ValueError(f"{where}: {end!r} is not a server")
        if r.src == r.dst:
            raise ValueError(f"{where}: src and dst are the same server")
        if not 1 <= r.tcp_port <= 65535:
            raise ValueError(f"{where}: tcp_port must be in 1..65535")
        if len(r.path) < 2 or r.path[0] != r.src or r.path[-1] != r.dst:
            raise ValueError(f"{where}: path must run from {r.src} to {r.dst}")
        if len(set(r.path)) != len(r.path):
            raise ValueError(f"{where}: path visits a node twice")
        for a, b in zip(r.path, r.path[1:]):
            if not topo.graph.has_edge(a, b):
                raise ValueError(f"{where}: hop {a}-{b} is not a link")
        for v in r.path[1:-1]:
            if v not in topo.datapaths:
                raise ValueError(f"{where}: {v} does not forward (it is not a datapath)")
        for a, b in zip(r.path, r.path[1:]):
            for x, y in ((a, b), (b, a)):
                if x in topo.datapaths and y not in topo.datapaths[x].ports:
                    raise ValueError(f"{where}: datapath {x} has no port to {y}")
        key = (r.src, r.dst, r.tcp_port)
        if key in seen:
            raise ValueError(f"{where}: same src, dst and tcp_port as route {seen[key]}")
        seen[key] = i
    return specs


def path_hops(topo: Topology, path: tuple[str, ...]) -> list[tuple[str, int, int]]:
    """(datapath, in_port, out_port) for every datapath along ``path``.

    A path end that is a datapath (BCube, DCell server) takes from / delivers to its host
    port; a path end that is a plain host (Jellyfish) is skipped."""
    hops = []
    for i, v in enumerate(path):
        dp = topo.datapaths.get(v)
        if dp is None:
            continue
        prev = path[i - 1] if i > 0 else v
        nxt = path[i + 1] if i + 1 < len(path) else v
        hops.append((v, dp.ports[prev], dp.ports[nxt]))
    return hops


def _directions(topo: Topology, r: RouteSpec) -> tuple[tuple, tuple]:
    """(path, match, reverse, priority) of a route's data direction and of its ACKs; the
    match lacks ``in_port``."""
    src_ip, dst_ip = topo.ip(r.src), topo.ip(r.dst)
    ip = {"eth_type": ETH_IPV4, "ip_proto": IP_TCP}
    return (
        (r.path, {**ip, "ipv4_src": src_ip, "ipv4_dst": dst_ip, "tcp_dst": r.tcp_port},
         False, PRIORITY_ROUTE_FORWARD),
        (tuple(reversed(r.path)),
         {**ip, "ipv4_src": dst_ip, "ipv4_dst": src_ip, "tcp_src": r.tcp_port},
         True, PRIORITY_ROUTE_REVERSE),
    )


def _pinned(topo: Topology, path: tuple[str, ...], match: dict[str, Any], priority: int,
            cookie: int) -> list[FlowRule]:
    """One rule per datapath of ``path``: packets from the previous hop go to the next."""
    return [FlowRule(topo.datapaths[name].dpid, priority, {"in_port": in_port, **match},
                     (("output", out_port),), cookie, datapath=name)
            for name, in_port, out_port in path_hops(topo, path)]


def route_rules(topo: Topology, routes: list[Any]) -> list[FlowRule]:
    """Rules pinning each route (forward data and reverse ACKs) to its path; validates first.
    No failover: see ``failover_rules``."""
    out = []
    for index, r in enumerate(validate_routes(topo, routes)):
        for path, match, reverse, priority in _directions(topo, r):
            out += _pinned(topo, path, match, priority, route_cookie(index, reverse))
    return out


def _detour(topo: Topology, path: tuple[str, ...], backup: tuple[str, ...], i: int,
            match: dict[str, Any], priority: int, cookie: int) -> list[FlowRule]:
    """Rules for the detour of ``backup`` leaving ``path`` after position ``i``: one per
    datapath it crosses, up to and including the path datapath where it rejoins."""
    rest, out = set(path[i + 1:]), []
    for t in range(i + 1, len(backup)):
        node = backup[t]
        dp = topo.datapaths.get(node)
        if dp is not None:
            nxt = backup[t + 1] if t + 1 < len(backup) else node
            out.append(FlowRule(dp.dpid, priority, {"in_port": dp.ports[backup[t - 1]], **match},
                                (("output", dp.ports[nxt]),), cookie, datapath=node))
        if node in rest:
            break
    return out


def _key(rule: FlowRule) -> tuple:
    return rule.dpid, rule.priority, frozenset(rule.match.items())


def _without(graph: nx.Graph, down: Iterable[tuple[str, str]]) -> nx.Graph:
    """``graph``, or a copy without the links in ``down``."""
    gone = [tuple(e) for e in down if graph.has_edge(*e)]
    if not gone:
        return graph
    graph = graph.copy()
    graph.remove_edges_from(gone)
    return graph


def failover_rules(topo: Topology, routes: list[Any], rerouted: Collection[int] = (),
                   down: Iterable[tuple[str, str]] = ()) -> RouteRules:
    """``route_rules`` plus fast-failover groups and detour rules for every hop whose
    ``backup_path`` repairs locally (module docstring); validates first.

    Hops are tried in path order, so of two detours that clash the first wins. Routes whose
    index is in ``rerouted`` (paths already moved off a failed link) carry FAILOVER_BIT on
    every rule. Detours avoid the links in ``down`` (links already down). Group ids come from
    ``group_id``."""
    graph = _without(topo.graph, down)
    flows, groups, unprotected = [], [], []
    for index, r in enumerate(validate_routes(topo, routes)):
        for path, match, reverse, priority in _directions(topo, r):
            cookie = route_cookie(index, reverse) | (FAILOVER_BIT if index in rerouted else 0)
            primary = _pinned(topo, path, match, priority, cookie)
            chosen = {_key(f): f for f in primary}
            extra: list[FlowRule] = []
            for i, (u, v) in enumerate(zip(path, path[1:])):
                if u not in topo.datapaths:
                    continue
                backup = backup_path(graph, path, u, v)
                reason, detour = "", []
                if backup is None:
                    reason = "no detour"
                elif backup[:i + 1] != path[:i + 1]:
                    reason = "upstream"
                else:
                    detour = _detour(topo, path, backup, i, match, priority,
                                     cookie | FAILOVER_BIT)
                    if any(chosen.get(_key(f), f).actions != f.actions for f in detour):
                        reason = "conflict"
                if reason:
                    unprotected.append(Unprotected(index, reverse, (u, v), reason))
                    continue
                for f in detour:
                    if _key(f) not in chosen:
                        chosen[_key(f)] = f
                        extra.append(f)
                dp, gid = topo.datapaths[u], group_id(index, reverse)
                to_v, to_detour = dp.ports[v], dp.ports[backup[i + 1]]
                groups.append(GroupRule(dp.dpid, gid, ((to_v, to_v), (to_detour, to_detour)),
                                        datapath=u))
                at = next(k for k, f in enumerate(primary) if f.datapath == u)
                primary[at] = replace(primary[at], actions=(("group", gid),))
            flows += primary + extra
    return RouteRules(tuple(flows), tuple(groups), tuple(unprotected))


def reroute(topo: Topology, routes: list[Any], unprotected: Iterable[Unprotected], a: str,
            b: str, down: Iterable[tuple[str, str]] = ()) -> dict[int, RouteSpec]:
    """The routes to re-install once link a-b is down, by index: each route with a hop over
    a-b (either direction) in ``unprotected``, moved to the ``backup_path`` of its forward
    path in the graph without the links in ``down`` (links already down). A route with no
    way around is left out."""
    graph = _without(topo.graph, down)
    out = {}
    for index in sorted({u.route for u in unprotected if set(u.hop) == {a, b}}):
        spec = as_spec(routes[index])
        path = backup_path(graph, spec.path, a, b)
        if path is not None and path != spec.path:
            out[index] = replace(spec, path=path)
    return out


def route_datapaths(topo: Topology, route: RouteSpec) -> list[str]:
    """Datapaths along a route's path, in forward order."""
    return [name for name, _, _ in path_hops(topo, route.path)]
