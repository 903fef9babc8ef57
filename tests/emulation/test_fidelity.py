"""What makes emulated transfers follow the flow-level model: no hidden packet loss inside OVS,
control packets queued apart from data, jumbo frames, persistent worker connections."""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import pytest

import topology as tp
from emulation import netstate
from emulation.net import MTU, EmulatedNetwork, plan_links
from emulation.ovs import OvsBuffers
from emulation.plan import CONTROL_MAX_IP_BYTES, FLOW_QUEUES, shaping_commands
from traffic.collectives import build
from traffic.runner import run_workers
from traffic.schedule import BASE_TCP_PORT

OVS_LOG = Path("/var/log/openvswitch/ovs-vswitchd.log")
#: TcpExt counters that only move when a segment was lost (or reordered) on the way.
LOSS_COUNTERS = ("TCPOFOQueue", "TCPSackRecovery", "TCPFastRetrans", "TCPLostRetransmit")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_shaping_queues_control_apart_and_each_route_apart():
    lines = shaping_commands("x-eth1", 10, mtu=9000)
    assert lines[0] == "qdisc replace dev x-eth1 root handle 5: htb default 1"
    classes = {re.search(r"classid (\S+)", line).group(1): line
               for line in lines if line.startswith("class")}
    assert "rate 10Mbit ceil 10Mbit" in classes.pop("5:10")
    assert "prio 0" in classes.pop("5:2")  # control, served first
    assert len(classes) == FLOW_QUEUES + 1  # the default class and one per route
    for line in classes.values():
        assert "parent 5:10" in line and "ceil 10Mbit" in line and "prio 1" in line
        assert "burst 1b" in line and "quantum 9014" in line  # a packet a turn, no burst
    filters = [line for line in lines if line.startswith("filter")]
    mask = 0xFFFF & ~(CONTROL_MAX_IP_BYTES - 1)
    assert f"match u16 0 {mask:#06x} at 2 flowid 5:2" in filters[0]  # short packets
    assert "match u8 2 2 at 33 flowid 5:2" in filters[1]  # TCP SYNs
    assert "hashkey mask 0x000000ff at 20 link 2:" in filters[3]  # destination port
    buckets = {re.search(r"ht 2:(\w+):", f).group(1): f.split()[-1] for f in filters[4:]}
    assert len(buckets) == FLOW_QUEUES and len(set(buckets.values())) == FLOW_QUEUES
    # a route's port is BASE_TCP_PORT + its index: consecutive routes, distinct queues
    assert {(BASE_TCP_PORT + i) & 0xFF for i in range(FLOW_QUEUES)} == set(range(256))


def send_size() -> int | None:
    buffers = OvsBuffers()
    try:
        return buffers.send_size()
    finally:
        buffers.restore()  # closes the duplicate descriptor, changes nothing


def netstat(host) -> dict[str, int]:
    out = host.cmd("cat /proc/net/netstat").splitlines()
    counters = {}
    for names, values in zip(out[::2], out[1::2]):
        if names.startswith("TcpExt:"):
            counters.update(zip(names.split()[1:], map(int, values.split()[1:])))
    return counters


def packet_socket_drops(interfaces: set[str]) -> int:
    out = subprocess.run(["ss", "-0", "-a", "-m"], capture_output=True, text=True,
                         timeout=10).stdout
    drops = 0
    for name, d in re.findall(r"\*:(\S+)\s+\*.*?\n.*?skmem:\(.*?,d(\d+)\)", out):
        if name in interfaces:
            drops += int(d)
    return drops


@pytest.mark.emulation
def test_ring_moves_every_byte_without_a_loss(tmp_path):
    graph = tp.make_graph("bcube", n=2, k=1)
    schedule = build("ring", graph, 1_000_000)
    # a killed run (a cleanup test's) may have left the buffer raised: undo that first, as
    # any network's start does, so that `before` is the size to come back to
    settle = OvsBuffers()
    if settle.raise_send(0):
        settle.restore()
    before = send_size()
    log_start = OVS_LOG.stat().st_size if OVS_LOG.exists() else 0
    with EmulatedNetwork(graph, tmp_path / "net", of_port=free_port(),
                         api_port=free_port()) as net:
        links = plan_links(net.topology)
        ports = {link[f"intf_{end}"] for link in links for end in ("a", "b")
                 if link[end] not in net.topology.hosts}
        shaped = sum(1 for link in links if link["bw_mbps"])
        # OVS's transmit socket holds every shaped port's queue, each receive socket one
        assert send_size() >= 2 * shaped * 1000 * MTU
        indexes = {int(Path(f"/sys/class/net/{p}/ifindex").read_text()) for p in ports}
        sizes = OvsBuffers().receive_sizes(indexes)
        assert len(sizes) == len(ports) and min(sizes) >= 1000 * MTU
        for name in ports:
            assert int(Path(f"/sys/class/net/{name}/mtu").read_text()) == MTU
        host = net.host(net.servers[0])
        assert f"mtu {MTU}" in host.cmd(f"ip link show {host.defaultIntf().name}")

        net.client.put_routes(schedule)
        counters = {s: netstat(net.host(s)) for s in net.servers}
        drops = packet_socket_drops(ports)
        run = run_workers(schedule, {s: net.ip(s) for s in net.servers},
                          {s: graph.nodes[s]["rank"] for s in net.servers},
                          lambda s, argv: net.popen(s, argv, stdin=subprocess.PIPE,
                                                    stdout=subprocess.PIPE),
                          tmp_path / "workers", timeout_s=60)
        assert all(run.verified.values())
        for s in net.servers:
            after = netstat(net.host(s))
            moved = {k: after[k] - counters[s][k] for k in LOSS_COUNTERS}
            assert not any(moved.values()), (s, moved)
        assert packet_socket_drops(ports) == drops
        # connection set-ups and acknowledgements went through the control classes
        sent = 0
        for link in links:
            if link["bw_mbps"] and link["a"] not in net.topology.hosts:
                out = subprocess.run(["tc", "-s", "class", "show", "dev", link["intf_a"]],
                                     capture_output=True, text=True, timeout=10).stdout
                m = re.search(r"class htb 5:2 .*?\n Sent \d+ bytes (\d+) pkt", out)
                sent += int(m.group(1))
        assert sent > 0
    if OVS_LOG.exists():
        with OVS_LOG.open() as f:
            f.seek(log_start)
            assert "error sending Ethernet packet" not in f.read()
    after = send_size()
    assert after == before or before is None  # restored


@pytest.mark.emulation
def test_a_killed_runs_raised_transmit_buffer_is_restored_by_the_next(tmp_path):
    lock = netstate.NetworkLock()
    lock.acquire("test_fidelity", 600)  # no network may run meanwhile
    try:
        if send_size() is None:
            pytest.skip("ovs-vswitchd has not transmitted anything since it started")
        original = send_size()
        killed = OvsBuffers(record=tmp_path / "record")
        assert killed.raise_send(original * 4)
        assert send_size() >= original * 4
        killed.sock.close()  # the run dies: no restore()
        killed.sock = None
        assert send_size() >= original * 4
        following = OvsBuffers(record=tmp_path / "record")
        assert following.raise_send(original)  # already large enough: left as it is
        following.restore()
        assert send_size() == original
        assert not (tmp_path / "record").exists()
    finally:
        lock.release()
