"""A network spread over two Open vSwitch instances (the system's and one started for it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import topology as tp
from emulation import netstate, ovs
from emulation.net import EmulatedNetwork, clean
from emulation.plan import plan_links
from simulator import simulate
from traffic.collectives import build

pytestmark = pytest.mark.emulation
REPO = Path(__file__).resolve().parents[2]


def netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def in_netns(netns: str, intf: str) -> str:
    return subprocess.run(["ip", "-n", netns, "-o", "link", "show", "dev", intf],
                          capture_output=True, text=True).stdout


def test_two_instances_run_a_schedule_and_leave_nothing(tmp_path, monkeypatch):
    graph = tp.make_graph("bcube", n=2, k=1)
    schedule = build("ring", graph, 200_000, "float32")
    net = EmulatedNetwork(graph, tmp_path / "net", ovs_instances=2)
    primed, prime = [], ovs.prime
    monkeypatch.setattr(ovs, "prime", lambda run_id, instances: (
        primed.append((run_id, list(instances), netstate.marked_bridges())),
        prime(run_id, instances)))
    with net:
        # primed once, on both instances, before any bridge of the network existed
        assert [(r, [i.index for i in inst]) for r, inst, _ in primed] == [
            (net.state.run_id, [1])]
        assert net.state.run_id not in primed[0][2].values()
        extra = net.instances[0]
        pids = extra.pids()
        assert len(pids) == 2 and all(netstate.cmdline(p) for p in pids)
        assert set(net.assignment.values()) == {0, 1}
        health = net.client.health()
        assert health["ready"] and health["connected"] == len(net.topology.datapaths)
        moved = sorted(i for i, ns in net.port_netns.items() if ns == extra.netns)
        assert moved and all("state UP" in in_netns(extra.netns, i) for i in moved)
        assert not any(netstate.link_exists(i) for i in moved)  # gone from the root
        # shaped inside the instance's namespace
        shaped = [link[f"intf_{e}"] for link in plan_links(net.topology) for e in ("a", "b")
                  if link["bw_mbps"] and link[f"intf_{e}"] in moved]
        assert shaped
        for intf in shaped:
            classes = subprocess.run(["tc", "-n", extra.netns, "class", "show", "dev", intf],
                                     capture_output=True, text=True).stdout
            assert "rate 10Mbit" in classes, intf
        assert net.ping_all()["loss_pct"] == 0.0
        # the priming bridge is gone from both instances
        for argv in (["ovs-vsctl", "list-br"], extra.vsctl("list-br")):
            listed = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
            assert ovs.PRIME_BRIDGE not in listed.split()
        run = net.run(schedule, tmp_path / "workers")
        assert run.verified and run.sums_verified and run.route_proof["ok"]
        # the moved ports' counters are read too: every hop of every transfer was counted
        load = run.link_load
        widths = [b - a for a, b in zip(load.edges_s, load.edges_s[1:])]
        payload: dict = {}
        for t in schedule.transfers:
            for hop in zip(t.path, t.path[1:]):
                payload[hop] = payload.get(hop, 0.0) + 8.0 * t.size_bytes(schedule.dtype)
        for d, bits in payload.items():
            counted = 1e6 * sum(v * w for v, w in zip(load.mbps[d], widths))
            assert bits <= counted <= 1.3 * bits, d
        assert set(run.result.finish_s) == set(simulate(graph, schedule).finish_s)
        # a link whose switch port sits in the extra namespace goes down and up
        a, b = next((a, b) for a, b in graph.edges
                    if any(net.port_netns.get(i) for i in _intfs(net, a, b)))
        net.set_link(a, b, up=False)
        assert all("state DOWN" in in_netns(extra.netns, i) or "DOWN" in _root(i)
                   for i in _intfs(net, a, b) if net.port_netns.get(i))
        net.set_link(a, b, up=True)
    assert not netns_exists(extra.netns) and not extra.rundir.exists()
    assert not any(netstate.cmdline(p) for p in pids)
    assert not (netstate.STATE_DIR / f"{net.state.run_id}.json").exists()


def test_a_network_that_gives_up_leaves_the_running_ones_instances_alone(tmp_path):
    graph = tp.make_graph("bcube", n=2, k=1)
    with EmulatedNetwork(graph, tmp_path / "a", ovs_instances=2) as first:
        extra = first.instances[0]
        pids = extra.pids()
        second = EmulatedNetwork(graph, tmp_path / "b", ovs_instances=2, wait_s=0.3)
        with pytest.raises(RuntimeError, match="another emulated network is running"):
            with second:
                pass
        assert netns_exists(extra.netns) and all(netstate.cmdline(p) for p in pids)
        assert first.ping_all()["loss_pct"] == 0.0


def test_instances_never_outnumber_the_bridges(tmp_path):
    graph = tp.make_graph("bcube", n=2, k=1)  # 8 bridges: 4 servers', 4 switches
    with EmulatedNetwork(graph, tmp_path / "net", ovs_instances=12) as net:
        assert len(net.instances) == len(net.topology.datapaths) - 1
        assert sorted(set(net.assignment.values())) == list(range(len(net.instances) + 1))
        assert net.ping_all()["loss_pct"] == 0.0


def _intfs(net, a: str, b: str) -> list[str]:
    ends = {a, b}
    return [link[f"intf_{e}"] for link in plan_links(net.topology)
            if set(link.get("ends", ())) == ends for e in ("a", "b")]


def _root(intf: str) -> str:
    return subprocess.run(["ip", "-o", "link", "show", "dev", intf], capture_output=True,
                          text=True).stdout


SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import topology as tp
    from emulation.net import EmulatedNetwork
    net = EmulatedNetwork(tp.make_graph("bcube", n=2, k=1), Path(sys.argv[1]), ovs_instances=2)
    with net:
        print("READY", net.state.run_id, *net.instances[0].pids(), flush=True)
        time.sleep(120)
""")


def test_clean_removes_a_killed_runs_instances(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path / "net")],
                            stdout=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    line = proc.stdout.readline()
    assert line.startswith("READY"), line
    _, run_id, *pids = line.split()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    extra = ovs.Instance(1)
    assert netns_exists(extra.netns) and all(netstate.cmdline(int(p)) for p in pids)
    removed = clean()
    assert f"run {run_id}" in removed
    assert all(f"process {p}" in removed for p in pids)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(netstate.cmdline(int(p)) for p in pids):
        time.sleep(0.1)
    assert not any(netstate.cmdline(int(p)) for p in pids)
    assert not netns_exists(extra.netns) and not extra.rundir.exists()
