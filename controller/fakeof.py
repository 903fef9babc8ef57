"""A fake OpenFlow network that walks packets hop by hop through FlowRule records.

For tests: no switch needed (in the spirit of FAUCET's ``clib/fakeoftable.py``). Each datapath
picks its highest-priority matching rule, counts the packet under the rule's cookie and follows
the output port through the port map to the next datapath or a host. Pure.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from controller.rules import ETH_ARP, ETH_IPV4, IP_TCP, SCHEDULE_BIT, FlowRule
from controller.topofile import Topology


class ForwardingError(AssertionError):
    """A packet looped, was flooded, or left through a port that does not exist."""


@dataclass
class Walk:
    """Where a packet went: the datapaths it crossed (with in/out ports) and where it ended."""

    hops: list[tuple[str, int, int]] = field(default_factory=list)
    delivered_to: str | None = None
    dropped_at: str | None = None

    @property
    def nodes(self) -> list[str]:
        """Datapath names crossed, in order."""
        return [h[0] for h in self.hops]


class FakeNetwork:
    """The rules of a whole network, with per-(datapath, cookie) packet counters."""

    def __init__(self, topo: Topology, rules: list[FlowRule]):
        self.topo = topo
        self.tables: dict[int, list[FlowRule]] = {dp.dpid: [] for dp in topo.datapaths.values()}
        for rule in rules:
            if rule.dpid not in self.tables:
                raise ForwardingError(f"rule for unknown dpid {rule.dpid}: {rule}")
            self.tables[rule.dpid].append(rule)
        for table in self.tables.values():
            table.sort(key=lambda r: -r.priority)
        self.names = {dp.dpid: dp.name for dp in topo.datapaths.values()}
        self.packets: Counter[tuple[str, int]] = Counter()

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

    def send(self, src: str, packet: dict, max_hops: int = 64) -> Walk:
        """Inject ``packet`` from server ``src``'s NIC and follow it to a host or a drop."""
        topo, walk = self.topo, Walk()
        if src in topo.datapaths:
            name, in_port = src, topo.datapaths[src].ports[src]
        else:
            (tor,) = list(topo.graph.neighbors(src))
            name, in_port = tor, topo.datapaths[tor].ports[src]
        while True:
            if len(walk.hops) >= max_hops:
                raise ForwardingError(f"packet {packet} from {src} loops: {walk.nodes[:12]}...")
            if name in walk.nodes:
                raise ForwardingError(f"packet {packet} from {src} loops: {walk.nodes + [name]}")
            dp = topo.datapaths[name]
            rule = self.lookup(dp.dpid, {**packet, "in_port": in_port})
            outputs = [port for kind, port in (rule.actions if rule else ())]
            if rule is not None:
                self.packets[(name, rule.cookie)] += 1
            if len(outputs) > 1 or any(kind != "output" for kind, _ in (rule.actions if rule
                                                                          else ())):
                raise ForwardingError(f"{name}: rule {rule} does not output to one port")
            if not outputs:
                walk.hops.append((name, in_port, 0))
                walk.dropped_at = name
                return walk
            out = outputs[0]
            walk.hops.append((name, in_port, out))
            try:
                peer = dp.neighbour(out)
            except KeyError:
                raise ForwardingError(f"{name}: output to port {out}, which does not exist") \
                    from None
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
