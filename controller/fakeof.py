"""A fake OpenFlow network that walks packets hop by hop through FlowRule records.

For tests: no switch needed (in the spirit of FAUCET's ``clib/fakeoftable.py``). Each datapath
picks its highest-priority matching rule, counts the packet under the rule's cookie and follows
the output port (or the fast-failover group's first bucket whose watch port is up) through the
port map to the next datapath or a host. ``link_down`` takes a link's ports down on both ends;
a packet sent out of a down port is lost. Pure.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from controller.rules import ETH_ARP, ETH_IPV4, IP_TCP, SCHEDULE_BIT, FlowRule, GroupRule
from controller.topofile import Topology


class ForwardingError(AssertionError):
    """A packet looped, was flooded, or left through a port that does not exist."""


@dataclass
class Walk:
    """Where a packet went: the datapaths it crossed (with in/out ports) and where it ended."""

    hops: list[tuple[str, int, int]] = field(default_factory=list)
    delivered_to: str | None = None
    dropped_at: str | None = None
    #: True when the packet was dropped because it left through a down port.
    lost: bool = False

    @property
    def nodes(self) -> list[str]:
        """Datapath names crossed, in order."""
        return [h[0] for h in self.hops]


class FakeNetwork:
    """The rules and groups of a whole network, with per-(datapath, cookie) packet counters
    and per-(datapath, group id, bucket index) group counters."""

    def __init__(self, topo: Topology, rules: list[FlowRule | GroupRule]):
        self.topo = topo
        self.tables: dict[int, list[FlowRule]] = {dp.dpid: [] for dp in topo.datapaths.values()}
        self.groups: dict[int, dict[int, GroupRule]] = {d: {} for d in self.tables}
        for rule in rules:
            if rule.dpid not in self.tables:
                raise ForwardingError(f"rule for unknown dpid {rule.dpid}: {rule}")
            if isinstance(rule, GroupRule):
                if rule.group_id in self.groups[rule.dpid]:
                    raise ForwardingError(f"group {rule.group_id} defined twice: {rule}")
                self.groups[rule.dpid][rule.group_id] = rule
            else:
                self.tables[rule.dpid].append(rule)
        for table in self.tables.values():
            table.sort(key=lambda r: -r.priority)
        self.names = {dp.dpid: dp.name for dp in topo.datapaths.values()}
        self.packets: Counter[tuple[str, int]] = Counter()
        self.group_packets: Counter[tuple[str, int, int]] = Counter()
        self.down: set[frozenset[str]] = set()

    def link_down(self, a: str, b: str) -> None:
        """Take link a-b down (its port on both ends); KeyError when it is not a link."""
        if not self.topo.graph.has_edge(a, b):
            raise KeyError(f"{a}-{b} is not a link")
        self.down.add(frozenset((a, b)))

    def link_up(self, a: str, b: str) -> None:
        """Bring link a-b back up."""
        self.down.discard(frozenset((a, b)))

    def port_up(self, name: str, port: int) -> bool:
        """Whether datapath ``name``'s ``port`` is up (a host port always is)."""
        peer = self.topo.datapaths[name].neighbour(port)
        return frozenset((name, peer)) not in self.down

    def lookup(self, dpid: int, packet: dict) -> FlowRule | None:
        """The rule a datapath applies to ``packet`` (fields plus ``in_port``); ties among
        overlapping rules of one priority are an error (OpenFlow leaves them undefined)."""
        hits = [r for r in self.tables[dpid] if all(packet.get(k) == v
                                                    for k, v in r.match.items())]
        if not hits:
            return None
        best = [r for r in hits if r.priority == hits[0].priority]
        if len({(r.actions, r.cookie) for r in best}) > 1:
            raise ForwardingError(f"{self.names[dpid]}: overlapping rules at priority "
                                  f"{best[0].priority}: {best}")
        return best[0]

    def _out_port(self, name: str, rule: FlowRule | None) -> int | None:
        """The port a rule sends to (None: drop); a group picks its first live bucket."""
        actions = rule.actions if rule else ()
        if len(actions) > 1 or any(kind not in ("output", "group") for kind, _ in actions):
            raise ForwardingError(f"{name}: rule {rule} does not output to one port or group")
        if not actions:
            return None
        kind, value = actions[0]
        if kind == "output":
            return value
        dpid = self.topo.datapaths[name].dpid
        group = self.groups[dpid].get(value)
        if group is None:
            raise ForwardingError(f"{name}: rule {rule} uses group {value}, which is missing")
        for k, (watch, out) in enumerate(group.buckets):
            if self.port_up(name, watch):
                self.group_packets[(name, value, k)] += 1
                return out
        return None

    def send(self, src: str, packet: dict, max_hops: int = 64) -> Walk:
        """Inject ``packet`` from server ``src``'s NIC and follow it to a host or a drop."""
        topo, walk = self.topo, Walk()
        if src in topo.datapaths:
            name, in_port = src, topo.datapaths[src].ports[src]
        else:
            (tor,) = list(topo.graph.neighbors(src))
            name, in_port = tor, topo.datapaths[tor].ports[src]
            if frozenset((src, tor)) in self.down:
                walk.lost = True
                return walk
        while True:
            if len(walk.hops) >= max_hops:
                raise ForwardingError(f"packet {packet} from {src} loops: {walk.nodes[:12]}...")
            if name in walk.nodes:
                raise ForwardingError(f"packet {packet} from {src} loops: {walk.nodes + [name]}")
            dp = topo.datapaths[name]
            rule = self.lookup(dp.dpid, {**packet, "in_port": in_port})
            if rule is not None:
                self.packets[(name, rule.cookie)] += 1
            out = self._out_port(name, rule)
            if out is None:
                walk.hops.append((name, in_port, 0))
                walk.dropped_at = name
                return walk
            walk.hops.append((name, in_port, out))
            try:
                peer = dp.neighbour(out)
            except KeyError:
                raise ForwardingError(f"{name}: output to port {out}, which does not exist") \
                    from None
            if not self.port_up(name, out):
                walk.dropped_at, walk.lost = name, True
                return walk
            if peer == name or peer not in topo.datapaths:
                walk.delivered_to = peer
                return walk
            name, in_port = peer, topo.datapaths[peer].ports[name]


def counters(net: FakeNetwork, packet_bytes: int = 1000) -> list[tuple[str, int, int, int]]:
    """The schedule-route counters of a fake network, in the shape the switches report:
    (datapath, cookie, packets, bytes), every packet ``packet_bytes`` long."""
    return [(name, cookie, n, n * packet_bytes) for (name, cookie), n in sorted(net.packets.items())
            if cookie & SCHEDULE_BIT]


def ipv4(topo: Topology, src: str, dst: str) -> dict:
    """Header fields of an IPv4 (non-TCP) packet from server src to server dst."""
    return {"eth_type": ETH_IPV4, "ipv4_src": topo.ip(src), "ipv4_dst": topo.ip(dst),
            "ip_proto": 1}


def tcp(topo: Topology, src: str, dst: str, sport: int, dport: int) -> dict:
    """Header fields of a TCP segment."""
    return {"eth_type": ETH_IPV4, "ipv4_src": topo.ip(src), "ipv4_dst": topo.ip(dst),
            "ip_proto": IP_TCP, "tcp_src": sport, "tcp_dst": dport}


def arp_request(topo: Topology, src: str, dst: str) -> dict:
    """Header fields of an ARP request (broadcast) from src asking for dst."""
    return {"eth_type": ETH_ARP, "arp_spa": topo.ip(src), "arp_tpa": topo.ip(dst),
            "eth_dst": "ff:ff:ff:ff:ff:ff"}
