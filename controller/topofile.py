"""The controller's topology file: the graph, its datapaths with their port maps, and the hosts.

The emulation decides the layout here (pure: datapath ids, bridge names, port numbers, host
addresses), builds its Mininet network to match, and writes the file; the controller reads it.
Format (docs/design.md)::

    {"schema": 1,
     "graph": <networkx node_link_data, edges under "links">,
     "datapaths": {"s00": {"dpid": 5, "bridge": "vs00", "ports": {"s00": 1, "w0_0": 2}}},
     "hosts": {"s00": {"ip": "10.0.0.1", "mac": "00:00:00:00:00:01"}}}

A datapath's port keyed by its own name is the port to its host (BCube, DCell); in Jellyfish a
ToR's port keyed by a server's name is the port to that host.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from topology.links import relays
from topology.routing import servers as topology_servers

SCHEMA = 1

#: Linux interface names (and so OVS bridge names) hold at most 15 characters.
IFNAMSIZ = 15


@dataclass(frozen=True)
class Datapath:
    """One OpenFlow switch: its graph name, datapath id, OVS bridge name and port map."""

    name: str
    dpid: int
    bridge: str
    ports: dict[str, int]

    def neighbour(self, port: int) -> str:
        """The node (graph name) behind ``port``; KeyError when the port does not exist."""
        for name, number in self.ports.items():
            if number == port:
                return name
        raise KeyError(f"datapath {self.name} has no port {port}")


@dataclass(frozen=True)
class HostAddress:
    """A server's IPv4 and MAC address."""

    ip: str
    mac: str


@dataclass(frozen=True)
class Topology:
    """Everything the controller knows about the emulated network."""

    graph: nx.Graph
    datapaths: dict[str, Datapath]
    hosts: dict[str, HostAddress]

    @property
    def family(self) -> str:
        """The topology family (``bcube``, ``dcell``, ``jellyfish``...)."""
        return self.graph.graph.get("spec", {}).get("family", "")

    def by_dpid(self) -> dict[int, Datapath]:
        """Datapaths keyed by datapath id."""
        return {dp.dpid: dp for dp in self.datapaths.values()}

    def ip(self, name: str) -> str:
        """The IPv4 address of server ``name``."""
        return self.hosts[name].ip

    def to_dict(self) -> dict:
        """The JSON document of the topology file."""
        return {
            "schema": SCHEMA,
            "graph": nx.node_link_data(self.graph, edges="links"),
            "datapaths": {
                dp.name: {"dpid": dp.dpid, "bridge": dp.bridge, "ports": dict(dp.ports)}
                for dp in self.datapaths.values()
            },
            "hosts": {n: {"ip": h.ip, "mac": h.mac} for n, h in self.hosts.items()},
        }

    def save(self, path: Path) -> None:
        """Write the topology file."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def from_dict(cls, doc: dict) -> Topology:
        """Parse a topology document; ValueError naming the first faulty field."""
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            raise ValueError(f"topology file: schema must be {SCHEMA}")
        for key in ("graph", "datapaths", "hosts"):
            if not isinstance(doc.get(key), dict):
                raise ValueError(f"topology file: {key!r} must be an object")
        graph = nx.node_link_graph(doc["graph"], edges="links")
        datapaths = {}
        for name, d in doc["datapaths"].items():
            try:
                ports = {str(k): int(v) for k, v in d["ports"].items()}
                datapaths[name] = Datapath(name, int(d["dpid"]), str(d["bridge"]), ports)
            except (KeyError, TypeError, ValueError, AttributeError):
                raise ValueError(f"topology file: datapath {name!r} is malformed") from None
        hosts = {}
        for name, h in doc["hosts"].items():
            try:
                hosts[name] = HostAddress(str(h["ip"]), str(h["mac"]))
            except (KeyError, TypeError):
                raise ValueError(f"topology file: host {name!r} is malformed") from None
        topo = cls(graph, datapaths, hosts)
        check(topo)
        return topo

    @classmethod
    def load(cls, path: Path) -> Topology:
        """Read a topology file."""
        return cls.from_dict(json.loads(Path(path).read_text()))


def host_ip(rank: int) -> str:
    """IPv4 address of the server of ``rank``: 10.0.0.0/16, rank r -> host number r + 1."""
    n = rank + 1
    if not 0 < n < 65535:
        raise ValueError(f"rank {rank} does not fit in 10.0.0.0/16")
    return f"10.0.{n // 256}.{n % 256}"


def host_mac(rank: int) -> str:
    """Deterministic MAC of the server of ``rank`` (rank 0 -> 00:00:00:00:00:01)."""
    n = rank + 1
    return ":".join(f"{b:02x}" for b in n.to_bytes(6, "big"))


def layout(graph: nx.Graph) -> Topology:
    """Decide datapaths, dpids, bridge names, port numbers and host addresses for ``graph``.

    Switches come first (graph order), then server datapaths by rank; dpids count from 1.
    Ports count from 1 per datapath: a server's own host first, then neighbours by name.
    Bridge names are the switch names and ``v`` + the server name for server datapaths (an OVS
    bridge name is a Linux interface name: ``dp<dpid>`` replaces one that is too long).
    """
    servers = list(enumerate(topology_servers(graph)))
    hosts = {v: HostAddress(host_ip(r), host_mac(r)) for r, v in servers}
    nodes = [v for v, role in graph.nodes(data="role") if role == "switch"]
    if relays(graph):  # a server that relays is a host plus a datapath of its own
        nodes += [v for _, v in servers]
    datapaths = {}
    for dpid, name in enumerate(nodes, start=1):
        bridge = ("v" + name) if name in hosts else name
        if len(bridge) + len("-eth") + len(str(graph.degree(name) + 1)) > IFNAMSIZ:
            bridge = f"dp{dpid}"
        order = ([name] if name in hosts else []) + sorted(graph.neighbors(name))
        ports = {n: i for i, n in enumerate(order, start=1)}
        datapaths[name] = Datapath(name, dpid, bridge, ports)
    topo = Topology(graph, datapaths, hosts)
    check(topo)
    return topo


def check(topo: Topology) -> None:
    """Raise ValueError unless the port map covers every link and ids are unique."""
    graph = topo.graph
    dpids = [dp.dpid for dp in topo.datapaths.values()]
    if len(set(dpids)) != len(dpids) or any(d < 1 for d in dpids):
        raise ValueError("topology file: dpids must be distinct and >= 1")
    for name, dp in topo.datapaths.items():
        if name not in graph:
            raise ValueError(f"topology file: datapath {name!r} is not a graph node")
        numbers = list(dp.ports.values())
        if len(set(numbers)) != len(numbers) or any(p < 1 for p in numbers):
            raise ValueError(f"topology file: datapath {name!r} has duplicate or bad ports")
        for peer in dp.ports:
            if peer != name and not graph.has_edge(name, peer):
                raise ValueError(f"topology file: datapath {name!r} has a port to {peer!r}, "
                                 "which is not a neighbour")
        for peer in graph.neighbors(name):
            if peer not in dp.ports:
                raise ValueError(f"topology file: datapath {name!r} has no port to {peer!r}")
    for v, role in graph.nodes(data="role"):
        if role == "server" and v not in topo.hosts:
            raise ValueError(f"topology file: server {v!r} has no address")
        if role == "switch" and v not in topo.datapaths:
            raise ValueError(f"topology file: switch {v!r} has no datapath")
