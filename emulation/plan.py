"""What an emulated network will be, and whether this machine can run it. No Mininet here.

``plan_links`` lists every veth pair (Mininet node names, OpenFlow port numbers, interface
names, shaping) from the layout ``controller.topofile.layout`` decided; ``preflight`` checks
root, the tools and a running Open vSwitch.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess

from controller.topofile import IFNAMSIZ, Topology
from emulation import netstate


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
        ok = netstate.vsctl("show", timeout_s=3).returncode == 0 and subprocess.run(
            ["ovs-appctl", "--timeout=3", "-t", "ovs-vswitchd", "version"],
            capture_output=True, timeout=8).returncode == 0
    except subprocess.TimeoutExpired:
        ok = False
    if not ok:
        raise EmulationError(f"Open vSwitch (ovsdb-server and ovs-vswitchd) is not running: {fix}")
    if tso:
        out = netstate.vsctl("get", "Open_vSwitch", ".", "other_config:userspace-tso-enable")
        if out.stdout.strip().strip('"') != "true":
            raise EmulationError("tso=True needs OVS started with other_config:"
                                 "userspace-tso-enable=true (OVS_TSO=1 scripts/setup.sh)")


def port_free(port: int) -> bool:
    """True when nothing listens on 127.0.0.1:``port``."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def plan_links(topo: Topology) -> list[dict]:
    """Every veth pair to create: Mininet node names, port numbers, interface names, rate.

    Graph links are shaped at their ``bw_mbps``; a server's host-to-own-bridge link is not."""
    graph, dps = topo.graph, topo.datapaths

    def node(v: str) -> str:
        return dps[v].bridge if v in dps else v

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
                      "bw_mbps": data.get("bw_mbps"), "host_link": False})
    return links
