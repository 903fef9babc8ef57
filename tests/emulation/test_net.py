"""Emulated networks on the real OVS userspace datapath with the real controller process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import topology as tp
from controller import rules
from controller.client import ControllerError
from controller.proof import verify_routes
from emulation import netstate, ovs
from emulation.net import EmulatedNetwork, clean, plan_links
from emulation.plan import EmulationError
from traffic.schedule import Route

pytestmark = pytest.mark.emulation
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def network(graph, tmp_path: Path) -> EmulatedNetwork:
    return EmulatedNetwork(graph, tmp_path / "net", of_port=free_port(), api_port=free_port())


@pytest.mark.parametrize("family, params", [
    ("bcube", {"n": 2, "k": 1}),
    ("dcell", {"n": 2, "k": 1}),
    ("jellyfish", {"switches": 8, "ports": 4, "uplinks": 3}),
], ids=["bcube21", "dcell21", "jellyfish843"])
def test_pingall_through_the_controllers_rules(family, params, tmp_path):
    graph = tp.make_graph(family, **params)
    with network(graph, tmp_path) as net:
        health = net.client.health()
        assert health["ready"] and health["connected"] == len(net.topology.datapaths)
        assert {"network_up_s", "controller_connected_s", "base_rules_installed_s"} <= set(
            net.timings)
        # every graph link is shaped at both ends, the host-to-own-bridge links are not
        for link in plan_links(net.topology):
            for end in ("a", "b"):
                node = link[end]
                where = net.host(node) if node in net.topology.hosts else net.net.get(node)
                classes = where.cmd(f"tc class show dev {link['intf_' + end]}")
                assert ("rate 10Mbit" in classes) == (not link["host_link"]), (link, classes)
        result = net.ping_all()
        assert result["loss_pct"] == 0.0, result["failed"]
        assert result["sent"] == len(net.servers) * (len(net.servers) - 1)
        # fail mode secure + table-miss drop: an address nobody routes goes nowhere
        out = net.host(net.servers[0]).cmd("ping -c1 -W1 10.0.99.99")
        assert "1 received" not in out
        links = plan_links(net.topology)
        hosts = set(net.topology.hosts)
    # the teardown deleted each link with a switch end in one batch, the rest through Mininet
    switched = [link for link in links if {link["a"], link["b"]} - hosts]
    batch = (tmp_path / "net" / "unlink-root.batch").read_text().splitlines()
    assert len(batch) == len(switched)
    assert not [name for link in links for name in (link["intf_a"], link["intf_b"])
                if netstate.link_exists(name)]


def base_bytes(bridge: str, ip: str) -> int:
    """Bytes counted by a datapath's base IPv4 rule toward ``ip``."""
    out = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", bridge,
                          f"ip,nw_dst={ip}"], capture_output=True, text=True, timeout=10).stdout
    # the filter also lists the more specific schedule-route rules: keep the base priority
    total = 0
    for line in out.splitlines():
        fields = line.replace(",", " ").split()
        if f"priority={rules.PRIORITY_BASE}" in fields:
            total += sum(int(f.split("=")[1]) for f in fields if f.startswith("n_bytes="))
    return total


def test_pinned_tcp_transfer_uses_its_path_only(tmp_path):
    graph = tp.make_graph("bcube", n=2, k=1)
    long_way = ("s00", "w1_0", "s10", "w0_1", "s11", "w1_1", "s01")
    route = Route("s00", "s01", long_way, 20000, (0,))
    with network(graph, tmp_path) as net:
        reply = net.client.put_routes([route])
        assert reply["installed"][0]["datapaths"] == list(long_way)
        mbps = net.measure_goodput("s00", "s01", seconds=2, port=route.tcp_port)
        assert 8.0 < mbps < 10.0
        stats = net.client.route_stats()
        proof = verify_routes([route], net.topology, stats, min_bytes={20000: 1_000_000})
        assert proof["ok"], proof["errors"]
        fwd = stats["routes"][0]["forward"]
        assert set(fwd) == set(long_way) and min(c["bytes"] for c in fwd.values()) > 1_000_000
        # the shortest path (s00 - w0_0 - s01) carried none of it: only pings, if anything
        assert base_bytes("vs00", net.ip("s01")) < 20_000
        assert base_bytes("w0_0", net.ip("s01")) < 20_000
        # a bad request is refused and changes nothing
        bad = Route("s00", "s01", ("s00", "w0_1", "s01"), 20001, (1,))
        with pytest.raises(ControllerError, match="HTTP 400.*hop s00-w0_1 is not a link") as exc:
            net.client.put_routes([route, bad])
        assert exc.value.status == 400
        with pytest.raises(ControllerError, match="HTTP 400"):
            net.client.request("PUT", "/routes", b"{not json")
        assert [r["tcp_port"] for r in net.client.routes()] == [20000]
        assert net.client.delete_routes() == {"deleted": 1}
        assert net.client.route_stats()["routes"] == []
        controller = net.controller.pid
        state = net.state.path
    assert not netstate.cmdline(controller), "controller still running after teardown"
    assert not state.exists()
    assert not [b for b, run in netstate.marked_bridges().items()]


def _broken_shaping(self, links):
    raise RuntimeError("injected failure after the bridges exist")


def _broken_priming(run_id, instances):
    raise RuntimeError("`ovs-vsctl add-br artb-prime` failed: injected")


@pytest.mark.parametrize("owner, name, broken, error, message", [
    (EmulatedNetwork, "_shape_switch_ports", _broken_shaping, RuntimeError, "injected"),
    # a failed priming (emulation.ovs.prime) is an EmulationError naming the command
    (ovs, "prime", _broken_priming, EmulationError,
     "preparing Open vSwitch's datapath: .*injected"),
])
def test_failed_start_leaves_nothing(tmp_path, monkeypatch, owner, name, broken, error,
                                     message):
    monkeypatch.setattr(owner, name, broken)
    net = network(tp.make_graph("bcube", n=2, k=1), tmp_path)
    with pytest.raises(error, match=message):
        with net:
            pass
    assert net.controller is None and net.net is None
    assert not net.state.path.exists()
    assert net.state.run_id not in netstate.marked_bridges().values()
    net.stop()  # idempotent


def test_one_network_at_a_time(tmp_path):
    other = netstate.NetworkLock()
    other.acquire("someone-else", timeout_s=5)
    try:
        net = EmulatedNetwork(tp.make_graph("bcube", n=2, k=1), tmp_path, wait_s=0.5)
        with pytest.raises(RuntimeError, match="another emulated network is running "
                                               r"\(run someone-else"):
            net.start()
        net.stop()
    finally:
        other.release()


def test_name_clash_is_refused_before_anything_starts(tmp_path):
    subprocess.run(["ip", "link", "add", "w0_0-eth1", "type", "veth", "peer", "name",
                    "artb-clash0"], check=True)
    try:
        net = network(tp.make_graph("bcube", n=2, k=1), tmp_path)
        with pytest.raises(RuntimeError, match="w0_0-eth1 already exist"):
            net.start()
        assert net.controller is None
        net.stop()
    finally:
        subprocess.run(["ip", "link", "del", "w0_0-eth1"], check=True)


SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import topology as tp
    from emulation.net import EmulatedNetwork
    net = EmulatedNetwork(tp.make_graph("bcube", n=2, k=1), Path(sys.argv[1]),
                          of_port=int(sys.argv[2]), api_port=int(sys.argv[3]))
    with net:
        print("READY", net.controller.pid, net.state.run_id, flush=True)
        time.sleep(120)
""")


def start_run(tmp_path: Path) -> tuple[subprocess.Popen, int, str]:
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path / "net"),
                             str(free_port()), str(free_port())], stdout=subprocess.PIPE,
                            text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    line = proc.stdout.readline()
    assert line.startswith("READY"), line
    _, controller, run_id = line.split()
    return proc, int(controller), run_id


def test_sigterm_tears_everything_down(tmp_path):
    proc, controller, run_id = start_run(tmp_path)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) != 0
    assert not netstate.cmdline(controller)
    assert run_id not in netstate.marked_bridges().values()
    assert not (netstate.STATE_DIR / f"{run_id}.json").exists()


def test_clean_removes_a_killed_runs_leftovers(tmp_path):
    proc, controller, run_id = start_run(tmp_path)
    proc.kill()
    proc.wait(timeout=10)
    assert netstate.cmdline(controller), "the controller outlives a killed run"
    assert run_id in netstate.marked_bridges().values()
    removed = clean()
    assert f"run {run_id}" in removed and f"process {controller}" in removed
    assert not netstate.cmdline(controller)
    assert run_id not in netstate.marked_bridges().values()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(
            netstate.link_exists(n) for n in ("vs00-eth1", "w0_0-eth1")):
        time.sleep(0.1)
    assert not netstate.link_exists("vs00-eth1")
