"""Smoke test of the emulator stack itself: Mininet + userspace Open vSwitch + HTB shaping.

h1 -- s1 -- s2 -- h2, every link TCLink(bw=10) with checksum offload off (TCP stalls through
the userspace datapath otherwise). The switches run fail_mode=standalone (plain L2 learning,
fine without loops), so no controller is involved.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import time
from functools import partial

import pytest

pytestmark = [pytest.mark.emulation, pytest.mark.slow]

PREFIX = f"at{os.getpid() % 10000}"  # unique per run: never collides with other nodes or runs
BW_MBPS = 10
SIZE_BYTES = 1 << 20
SEED = 7
PORT = 9000

PEER = r"""
import hashlib, socket, sys, time
mode, ip, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if mode == "server":
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, port)); s.listen(1); print("ready", flush=True)
    s.settimeout(30); c, _ = s.accept(); c.settimeout(30)
    h, got = hashlib.sha256(), 0
    while got < n:
        b = c.recv(65536)
        if not b:
            break
        h.update(b); got += len(b)
    c.sendall(h.hexdigest().encode()); c.close()
    print(got, h.hexdigest(), flush=True)
else:
    import random
    data = random.Random(int(sys.argv[5])).randbytes(n)
    c = socket.create_connection((ip, port), timeout=30)
    t0 = time.monotonic(); c.sendall(data)
    digest = c.recv(64).decode(); dt = time.monotonic() - t0
    print(digest, dt, flush=True)
"""


def _links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}


def _bridges() -> set[str]:
    cmd = ["ovs-vsctl", "--timeout=5", "list-br"]
    return set(subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.split())


def _wait_listening(host, port: int, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while f":{port} " not in host.cmd(f"ss -Hltn 'sport = :{port}'"):
        assert time.monotonic() < deadline, f"nothing listens on {host.name}:{port}"
        time.sleep(0.1)


def _stop(procs: list[subprocess.Popen]) -> None:
    # host.popen detaches (mnexec -d): net.stop() would not end these, so end them here.
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def test_two_userspace_switches_ping_tcp_and_htb():
    from mininet.link import TCLink
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.node import OVSSwitch

    setLogLevel("warning")
    net = Mininet(
        topo=None,
        build=False,
        controller=None,
        switch=partial(OVSSwitch, datapath="user", protocols="OpenFlow13", failMode="standalone"),
        link=partial(TCLink, bw=BW_MBPS, txo=False, rxo=False),
        autoSetMacs=True,
    )
    h1 = net.addHost(f"{PREFIX}h1", ip="10.0.0.1/24")
    h2 = net.addHost(f"{PREFIX}h2", ip="10.0.0.2/24")
    s1 = net.addSwitch(f"{PREFIX}s1", dpid="1")
    s2 = net.addSwitch(f"{PREFIX}s2", dpid="2")
    for a, b in ((h1, s1), (s1, s2), (s2, h2)):
        net.addLink(a, b)
    names = {n.name for n in (h1, h2, s1, s2)}
    procs: list[subprocess.Popen] = []
    try:
        net.build()
        net.start()

        h1.cmd(f"ping -c 1 -W 3 {h2.IP()}")  # warm-up: ARP and MAC learning
        out = h1.cmd(f"ping -c 3 -i 0.2 -W 2 {h2.IP()}")
        assert " 0% packet loss" in out, out

        peer = [sys.executable, "-c", PEER]
        args = [h2.IP(), str(PORT), str(SIZE_BYTES)]
        server = h2.popen([*peer, "server", *args], text=True)
        procs.append(server)
        assert server.stdout.readline().strip() == "ready"
        client = h1.popen([*peer, "client", *args, str(SEED)], text=True)
        procs.append(client)
        client_out, client_err = client.communicate(timeout=60)
        server_out, _ = server.communicate(timeout=30)
        expected = hashlib.sha256(random.Random(SEED).randbytes(SIZE_BYTES)).hexdigest()
        assert server_out.split() == [str(SIZE_BYTES), expected], (server_out, client_err)
        assert client_out.split()[0] == expected, (client_out, client_err)
        transfer_s = float(client_out.split()[1])

        iperf_server = h2.popen(["iperf3", "-s", "-1", "-B", h2.IP(), "-p", "5201"], text=True)
        procs.append(iperf_server)
        _wait_listening(h2, 5201)
        iperf = h1.popen(["iperf3", "-J", "-c", h2.IP(), "-p", "5201", "-t", "4"], text=True)
        procs.append(iperf)
        report, _ = iperf.communicate(timeout=30)
        mbps = json.loads(report)["end"]["sum_received"]["bits_per_second"] / 1e6
        print(f"iperf3 {mbps:.2f} Mbit/s; {SIZE_BYTES} B socket transfer {transfer_s:.2f} s")
        assert 7 < mbps < 10.5, f"goodput {mbps:.2f} Mbit/s on a {BW_MBPS} Mbit/s link"
    finally:
        _stop(procs)
        net.stop()

    assert not names & _bridges(), "OVS bridges left behind"
    assert not {link for link in _links() if link.startswith(PREFIX)}, "links left behind"
