"""Several Open vSwitch instances: the pure parts (assignment, counts, commands, flags)."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from emulation import budget, ovs
from emulation.run import main


def test_assign_spreads_ports_evenly_and_is_deterministic():
    ports = {f"b{i}": 1 + i % 3 for i in range(10)}
    first = ovs.assign(ports, 3)
    assert first == ovs.assign(dict(reversed(ports.items())), 3)
    load = [sum(p for b, p in ports.items() if first[b] == k) for k in range(3)]
    assert set(first.values()) == {0, 1, 2} and max(load) - min(load) <= max(ports.values())
    assert set(ovs.assign(ports, 1).values()) == {0}
    with pytest.raises(ValueError, match="instances must be in"):
        ovs.assign(ports, 0)


def test_auto_leaves_a_core_to_the_hosts_and_kernel_uses_one():
    assert [ovs.auto_instances("user", cores=c) for c in (1, 2, 3, 16)] == [1, 1, 2, 15]
    assert ovs.auto_instances("kernel", cores=16) == 1


@pytest.mark.parametrize("text", ["0", "-1", "x", "65", ""])
def test_bad_instance_counts_are_refused(text):
    with pytest.raises(ValueError, match="--ovs-instances must be"):
        ovs.parse_instances(text, "user")


def test_instance_commands_keep_everything_in_its_namespace_and_rundir(tmp_path):
    inst = ovs.Instance(2, tmp_path)
    cmds = inst.start_commands(tso=True)
    run = str(tmp_path / "ovs2")
    assert inst.netns == "artb-ovs2"
    assert inst.controller_target == f"unix:{run}/controller.sock"
    assert cmds[0] == ["ip", "netns", "add", "artb-ovs2"]
    assert not any(c[:3] == ["ip", "addr", "add"] or "veth" in c for c in cmds)  # no address
    server = next(c for c in cmds if c[0] == "ovsdb-server")
    assert all(a.startswith(("--detach", "--no-chdir")) or run in a for a in server[1:])
    assert any("userspace-tso-enable=true" in a for c in cmds for a in c)
    vswitchd = cmds[-1]
    assert vswitchd[:4] == ["ip", "netns", "exec", "artb-ovs2"]
    assert f"OVS_RUNDIR={run}" in vswitchd and f"unix:{run}/db.sock" in vswitchd
    assert inst.vsctl("show") == ["ovs-vsctl", f"--db=unix:{run}/db.sock", "show"]


def test_stopping_an_instance_that_never_started_does_nothing(tmp_path):
    assert ovs.Instance(5, tmp_path).stop() == []


def test_relay_pipes_unix_connections_to_the_loopback_port(tmp_path):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def echo_upper():
        for _ in range(2):
            conn, _ = listener.accept()
            with conn:
                while data := conn.recv(1024):
                    conn.sendall(data.upper())

    threading.Thread(target=echo_upper, daemon=True).start()
    relay = ovs.ControlRelay(tmp_path / "c.sock", port)
    try:
        for word in (b"hello", b"again"):
            with socket.socket(socket.AF_UNIX) as client:
                client.settimeout(5)
                client.connect(str(tmp_path / "c.sock"))
                client.sendall(word)
                assert client.recv(1024) == word.upper()
    finally:
        relay.close()
        listener.close()
    assert not (tmp_path / "c.sock").exists()
    relay.close()  # idempotent


def test_budget_is_kept_per_instance_count(tmp_path):
    assert budget.machine_key("user", 2).endswith("| 2 instances")
    assert budget.machine_key("user", 1) == budget.machine_key("user")
    assert budget.chain_length(1) == budget.CHAIN and budget.chain_length(9) == 9
    calls = []
    for n in (1, 2, 2):
        budget.cached_budget("user", lambda n=n: calls.append(n) or 1000.0 * n,
                             cache=tmp_path, instances=n)
    assert calls == [1, 2]
    assert budget.probe_graph(6).number_of_nodes() == 8


def test_help_names_the_flag(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "--ovs-instances" in capsys.readouterr().out
    assert Path(ovs.SCHEMA).name == "vswitch.ovsschema"


def test_priming_adds_then_deletes_a_marked_bridge_on_every_instance(tmp_path, monkeypatch):
    import subprocess

    from emulation import netstate

    extra = ovs.Instance(1, tmp_path)
    ran = []

    def run(argv, **kwargs):
        ran.append(argv)
        failed = len(ran) == 4 and "del-br" in argv
        return subprocess.CompletedProcess(argv, 1 if failed else 0, "", "no db")

    monkeypatch.setattr(ovs.subprocess, "run", run)
    with pytest.raises(RuntimeError, match="del-br artb-prime.*no db"):
        ovs.prime("r7", [extra])
    assert [a[0] for a in ran] == ["ovs-vsctl"] * 4
    assert [("add-br" in a, f"--db={extra.db}" in a) for a in ran] == [
        (True, False), (False, False), (True, True), (False, True)]
    # netstate.clean() finds the system instance's bridge by its mark after a crash
    assert f"external-ids:{netstate.MARK}=r7" in ran[0]
    assert len(ovs.PRIME_BRIDGE) <= 15
