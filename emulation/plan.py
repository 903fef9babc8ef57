"""What an emulated network will be, and whether this machine can run it. No Mininet here.

``plan_links`` lists every veth pair (Mininet node names, OpenFlow port numbers, interface
names, shaping) from the layout ``controller.topofile.layout`` decided, ``counted_ports`` the
switch port whose counters measure each graph link; ``shaping_commands``
is how one end of a link is shaped; ``preflight`` checks root, the tools and a running Open
vSwitch.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess

from controller.topofile import IFNAMSIZ, Topology
from emulation import netstate, ovs


class EmulationError(RuntimeError):
    """The emulated network could not be built, started or used."""


def preflight(tso: bool) -> None:
    """Raise EmulationError naming what is missing: root, mnexec, a running OVS."""
    fix = "run scripts/setup.sh"
    if os.geteuid() != 0:
        raise EmulationError("the emulation needs root")
    for tool in ("mnexec", "ovs-vsctl", "tc", "ethtool"):
        if shutil.which(tool) is None:
            raise EmulationError(f"{tool} is not on PATH: {fix}")
    try:
        ok = netstate.vsctl("show", timeout_s=3).returncode == 0 and ovs.answering()
    except subprocess.TimeoutExpired:
        ok = False
    if not ok:
        raise EmulationError(f"Open vSwitch (ovsdb-server and ovs-vswitchd) is not running: {fix}")
    if tso:
        out = netstate.vsctl("get", "Open_vSwitch", ".", "other_config:userspace-tso-enable")
        if out.stdout.strip().strip('"') != "true":
            raise EmulationError("tso=True needs OVS started with other_config:"
                                 "userspace-tso-enable=true (OVS_TSO=1 scripts/setup.sh)")


#: IPv4 packets shorter than this many bytes (IP header included; a power of two) are control
#: packets: pure TCP ACKs, FINs and the worker's one-byte acknowledgement (52-53 bytes with
#: timestamps), and no data segment but a message's last few bytes.
CONTROL_MAX_IP_BYTES = 64
#: Share of a link's rate guaranteed to control packets (they may use all of it when no data
#: waits; data may use all of it when no control packet waits).
CONTROL_SHARE = 0.1
#: Data queues per shaped link, served round robin, chosen by the low byte of the TCP
#: destination port: a route's port is BASE_TCP_PORT + its index, so up to 256 routes each
#: get a queue of their own (concurrent transfers on one route share its queue).
FLOW_QUEUES = 256


def shaping_commands(dev: str, bw_mbps: float, mtu: int = 1500, delay_ms: float = 0.0,
                     loss_pct: float = 0.0) -> list[str]:
    """``tc -batch`` lines that shape ``dev`` to ``bw_mbps`` with HTB, the way the flow-level
    model shares a link: a link class; under it a control class served first, which takes TCP
    SYNs and IPv4 packets shorter than CONTROL_MAX_IP_BYTES; FLOW_QUEUES data classes served
    round robin a packet at a time, one per route; a default class for anything else.

    With one FIFO a connection set-up, an acknowledgement or a message's last ACK would wait
    behind every data packet queued at the link (TCP keeps a whole window there: 50 ms or more
    at 10 Mbit/s, a thousandth of that at the data-centre rates the emulation scales down), and
    flows would be served a whole message after another instead of side by side. The model has
    neither: control packets skip the data, and round robin over routes is fair queueing,
    which gives every flow its max-min fair share. Data classes have no burst allowance
    (``burst 1b``): after an idle spell a queue sends one packet at once, not a burst.

    With ``delay_ms`` or ``loss_pct`` every leaf class gets a netem qdisc (needs the
    sch_netem module) that delays or drops what it releases: a link's one-way latency and
    random loss, in each direction where both ends are shaped."""
    rate = f"{bw_mbps:g}Mbit"
    exact = "burst 1b cburst 1b"
    per_queue = f"{bw_mbps * (1 - CONTROL_SHARE) / (FLOW_QUEUES + 1) * 1000:.3f}kbit"
    quantum = f"quantum {mtu + 14}"
    mask = 0xFFFF & ~(CONTROL_MAX_IP_BYTES - 1)
    lines = [
        f"qdisc replace dev {dev} root handle 5: htb default 1",
        f"class replace dev {dev} parent 5: classid 5:10 htb rate {rate} ceil {rate} {exact}",
        f"class replace dev {dev} parent 5:10 classid 5:2 htb rate "
        f"{bw_mbps * CONTROL_SHARE:g}Mbit ceil {rate} burst 4k cburst 4k prio 0",
        f"class replace dev {dev} parent 5:10 classid 5:1 htb rate {per_queue} ceil {rate} "
        f"{exact} prio 1 {quantum}",
    ]
    lines += [f"class replace dev {dev} parent 5:10 classid 5:{0x100 + q:x} htb rate "
              f"{per_queue} ceil {rate} {exact} prio 1 {quantum}" for q in range(FLOW_QUEUES)]
    lines += [
        # IPv4 total length (offset 2) below CONTROL_MAX_IP_BYTES
        f"filter add dev {dev} parent 5: protocol ip prio 1 u32 match u16 0 {mask:#06x} at 2 "
        "flowid 5:2",
        # TCP (protocol, offset 9) with SYN set (flags at 20 + 13: hosts send no IP options)
        f"filter add dev {dev} parent 5: protocol ip prio 2 u32 match u8 6 0xff at 9 "
        "match u8 2 2 at 33 flowid 5:2",
        # other TCP: hashed on the destination port's low byte (offset 20 + 3) into table 2:
        f"filter add dev {dev} parent 5: prio 3 handle 2: protocol ip u32 divisor "
        f"{FLOW_QUEUES}",
        f"filter add dev {dev} parent 5: protocol ip prio 3 u32 ht 800:: match u8 6 0xff at 9 "
        f"hashkey mask {FLOW_QUEUES - 1:#010x} at 20 link 2:",
    ]
    lines += [f"filter add dev {dev} parent 5: protocol ip prio 3 u32 ht 2:{q:x}: match u32 0 0 "
              f"flowid 5:{0x100 + q:x}" for q in range(FLOW_QUEUES)]
    if delay_ms or loss_pct:
        effect = (f" delay {delay_ms:g}ms" if delay_ms else "") + \
                 (f" loss {loss_pct:g}%" if loss_pct else "")
        leaves = ["5:2", "5:1", *(f"5:{0x100 + q:x}" for q in range(FLOW_QUEUES))]
        lines += [f"qdisc replace dev {dev} parent {leaf} handle {0x10 + i:x}: netem{effect}"
                  for i, leaf in enumerate(leaves)]
    return lines


def port_free(port: int) -> bool:
    """True when nothing listens on 127.0.0.1:``port``."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def mininet_name(topo: Topology, v: str) -> str:
    """The Mininet node of graph node ``v`` at a link's end: its datapath's bridge where it
    has one (switches, servers that relay), else the host of the same name."""
    return topo.datapaths[v].bridge if v in topo.datapaths else v


def plan_links(topo: Topology) -> list[dict]:
    """Every veth pair to create: Mininet node names, port numbers, interface names, rate.

    Graph links are shaped at their ``bw_mbps``; a server's host-to-own-bridge link is not."""
    graph, dps = topo.graph, topo.datapaths

    def node(v: str) -> str:
        return mininet_name(topo, v)

    def port(v: str, peer: str) -> int:
        return dps[v].ports[peer] if v in dps else 0

    def intf(v: str, number: int) -> str:
        name = f"{node(v)}-eth{number}"
        if len(name) > IFNAMSIZ:
            short = f"d{dps[v].dpid}" if v in dps else f"h{graph.nodes[v]['rank']}"
            name = f"{short}-eth{number}"
        return name

    links = []
    for v in topo.hosts:
        if v in dps:
            links.append({"a": v, "b": dps[v].bridge, "port_a": 0, "port_b": dps[v].ports[v],
                          "intf_a": intf(v, 0), "intf_b": intf(v, dps[v].ports[v]),
                          "bw_mbps": None, "host_link": True})
    for a, b, data in graph.edges(data=True):
        if a not in dps:
            a, b = b, a
        pa, pb = port(a, b), port(b, a)
        links.append({"a": node(a), "b": node(b), "port_a": pa, "port_b": pb,
                      "intf_a": intf(a, pa), "intf_b": intf(b, pb),
                      "bw_mbps": data.get("bw_mbps"), "host_link": False, "ends": (a, b)})
    return links


def counted_ports(topo: Topology) -> list[tuple[str, str, str]]:
    """(a, b, interface) for every graph link with an end on a datapath: the interface is
    that end's switch port (in the root network namespace, or in the namespace of its Open
    vSwitch instance), so its transmit counter counts what went from a to b and its receive
    counter what came back. Links between two hosts (servers that do not relay, linked
    directly) have no such port and are left out."""
    return [(*link["ends"], link["intf_a"]) for link in plan_links(topo)
            if not link["host_link"] and link["ends"][0] in topo.datapaths]
