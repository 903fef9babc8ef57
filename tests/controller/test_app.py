"""The patched Ryu imports, the app loads, and the controller process serves its API."""

from __future__ import annotations

import importlib.util
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import topology as tp
from controller.client import ControllerClient, ControllerError
from controller.topofile import layout
from traffic.schedule import Schedule, Transfer

REPO = Path(__file__).resolve().parents[2]
needs_ryu = pytest.mark.skipif(importlib.util.find_spec("ryu") is None,
                               reason="Ryu is not installed: run scripts/setup.sh")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@needs_ryu
def test_patched_ryu_imports_and_app_loads():
    # A subprocess: Ryu's eventlet must not monkey-patch the test process.
    code = ("import ryu.app.wsgi, controller.app as a; "
            "print(a.TestbedController.OFP_VERSIONS, a.TestbedController._CONTEXTS['wsgi'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "[4]" in out.stdout and "WSGIApplication" in out.stdout


def test_only_app_imports_ryu():
    for path in (REPO / "controller").glob("*.py"):
        text = path.read_text()
        if path.name != "app.py":
            assert "import ryu" not in text and "from ryu" not in text, path


def test_api_must_be_loopback(tmp_path):
    topo = tmp_path / "topo.json"
    layout(tp.make_graph("bcube", n=2, k=1)).save(topo)
    out = subprocess.run([sys.executable, "-m", "controller", "--topology", str(topo),
                          "--api", "0.0.0.0:8080"], capture_output=True, text=True, cwd=REPO,
                         timeout=30)
    assert out.returncode == 2 and "loopback" in out.stderr
    out = subprocess.run([sys.executable, "-m", "controller", "--topology",
                          str(tmp_path / "missing.json")], capture_output=True, text=True,
                         cwd=REPO, timeout=30)
    assert out.returncode == 2 and "cannot read" in out.stderr


@needs_ryu
def test_controller_process_without_switches(tmp_path):
    topo = tmp_path / "topo.json"
    layout(tp.make_graph("bcube", n=2, k=1)).save(topo)
    api = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "controller", "--topology", str(topo),
                             "--of-port", str(free_port()), "--api", f"127.0.0.1:{api}",
                             "--log", str(tmp_path / "controller.log")], cwd=REPO)
    client = ControllerClient("127.0.0.1", api, timeout_s=10)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                health = client.health()
                break
            except ControllerError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.1)
        assert health == {"connected": 0, "expected": 8, "ready": False,
                          "missing": sorted(layout(tp.make_graph("bcube", n=2, k=1)).datapaths),
                          "routes": 0}
        good = {"src": "s00", "dst": "s11", "path": ["s00", "w1_0", "s10", "w0_1", "s11"],
                "tcp_port": 20000}
        for body, status, message in (
                (b"[1, 2]", 400, "body must be"),
                (b"\xff", 400, "Expecting value|decode"),
                (json.dumps({"routes": [{**good, "tcp_port": 0}]}).encode(), 400, "tcp_port"),
                (json.dumps({"routes": [good]}).encode(), 503, "not connected"),
                (b'{"schema_version": 1, "transfers": []}', 400, "missing the field")):
            with pytest.raises(ControllerError, match=message) as exc:
                client.request("PUT", "/routes", body)
            assert exc.value.status == status
        # a Schedule document is accepted too: it validates, then no datapath is connected
        graph = tp.make_graph("bcube", n=2, k=1)
        schedule = Schedule(graph.graph["spec"], 8, "int32", (
            Transfer(0, "s00", "s11", 0, 2, "copy", tuple(good["path"])),))
        with pytest.raises(ControllerError, match="HTTP 503") as exc:
            client.put_routes(schedule)
        stats = client.route_stats()
        assert stats["routes"] == [] and not stats["complete"]
        with pytest.raises(ControllerError, match="HTTP 404"):
            client.request("GET", "/nothing")
        with pytest.raises(ControllerError, match="not ready after"):
            client.wait_ready(timeout_s=0.3)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "listening: OpenFlow 127.0.0.1" in (tmp_path / "controller.log").read_text()


APP_MESSAGES = r'''
import json
from ryu.lib import hub
from ryu.ofproto import ofproto_v1_3 as ofp, ofproto_v1_3_parser as parser
import topology as tp
from controller import app, rules
from controller.topofile import layout
from traffic.schedule import Route


class FakeDatapath:
    """Serializes every message (so Ryu checks its encoding) and answers waited requests."""
    ofproto, ofproto_parser = ofp, parser

    def __init__(self, dpid, controller):
        self.id, self.sent, self.xid, self.controller = dpid, [], 0, controller

    def set_xid(self, msg):
        self.xid += 1
        msg.set_xid(self.xid)

    def send_msg(self, msg):
        if msg.xid is None:
            self.set_xid(msg)
        msg.serialize()
        self.sent.append(msg)
        waiter = self.controller.waiters.get((self.id, msg.xid))
        if waiter is not None:
            waiter.event.set()


def kinds(dp):
    out = []
    for m in dp.sent:
        if isinstance(m, parser.OFPGroupMod):
            out.append("group-" + {ofp.OFPGC_ADD: "add", ofp.OFPGC_DELETE: "delete"}[m.command])
        elif isinstance(m, parser.OFPFlowMod):
            out.append("flow-" + {ofp.OFPFC_ADD: "add", ofp.OFPFC_DELETE: "delete"}[m.command])
        else:
            out.append(type(m).__name__)
    return out


topo = layout(tp.make_graph("bcube", n=2, k=1))
c = object.__new__(app.TestbedController)
c.topo, c.names = topo, {dp.dpid: dp.name for dp in topo.datapaths.values()}
c.waiters, c.errors, c.lock, c.down = {}, {}, hub.Semaphore(1), set()
c.routes, c.current, c.rerouted, c.installed = [], [], set(), rules.RouteRules(())
c.connected = {d: FakeDatapath(d, c) for d in c.names}
route = Route("s00", "s01", ("s00", "w0_0", "s01"), 20000, (0,))
reply = c.put_routes(rules.validate_routes(topo, [route]))
s00 = c.connected[topo.datapaths["s00"].dpid]
groups = [m for m in s00.sent if isinstance(m, parser.OFPGroupMod)
          and m.command == ofp.OFPGC_ADD]
to_group = [m for m in s00.sent if isinstance(m, parser.OFPFlowMod) and any(
    isinstance(a, parser.OFPActionGroup) for i in m.instructions for a in i.actions)]
put = {"kinds": kinds(s00), "reply": {k: reply[k] for k in ("rules", "groups", "unprotected")},
       "group": [groups[0].type, groups[0].group_id,
                 [(b.watch_port, b.actions[0].port) for b in groups[0].buckets]],
       "to_group": [a.group_id for m in to_group for i in m.instructions for a in i.actions]}
for dp in c.connected.values():
    dp.sent.clear()
calls = []
real, c.link_down = c.link_down, lambda a, b: calls.append((a, b))
w00 = topo.datapaths["w0_0"]
desc = parser.OFPPort(w00.ports["s01"], "00:00:00:00:00:09", b"x", 0, ofp.OFPPS_LINK_DOWN,
                      0, 0, 0, 0, 0, 0)


class Event:
    msg = parser.OFPPortStatus(c.connected[w00.dpid], ofp.OFPPR_MODIFY, desc)


c._on_port_status(Event)
hub.sleep(0)
real("w0_0", "s01")
real("s01", "w0_0")  # the other end's port status: nothing more to do
cookies = [m.cookie for m in s00.sent if isinstance(m, parser.OFPFlowMod)
           and m.command == ofp.OFPFC_ADD]
deleted = [(m.cookie, m.cookie_mask) for m in s00.sent if isinstance(m, parser.OFPFlowMod)
           and m.command == ofp.OFPFC_DELETE]
rerouting = kinds(s00)
for dp in c.connected.values():
    dp.sent.clear()
stats = c.route_stats()
print(json.dumps({"put": put, "calls": calls, "kinds": rerouting, "deleted": deleted,
                  "rerouted": sorted(c.rerouted), "path": list(c.current[0].path),
                  "failover": all(k & rules.FAILOVER_BIT for k in cookies) and len(cookies),
                  "stats": stats["routes"][0]["rerouted"], "errors": c.errors}))
'''


@needs_ryu
def test_app_messages_groups_before_flows_and_reroute(tmp_path):
    script = tmp_path / "messages.py"
    script.write_text(APP_MESSAGES)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         cwd=REPO, timeout=60, env={"PYTHONPATH": str(REPO), "PATH": ""})
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    put = doc["put"]
    # s00 protects its hop to w0_0 (forward) and delivers the ACKs (reverse)
    assert put["kinds"] == ["flow-delete", "group-delete", "OFPBarrierRequest", "group-add",
                            "OFPBarrierRequest", "flow-add", "flow-add", "flow-add",
                            "OFPBarrierRequest"]
    assert put["group"] == [3, 1, [[2, 2], [3, 3]]] and put["to_group"] == [1]
    assert put["reply"]["groups"] > 0
    assert [u["hop"] for u in put["reply"]["unprotected"]] == [["w0_0", "s01"],
                                                               ["w0_0", "s00"]]
    assert doc["calls"] == [["w0_0", "s01"]]
    # the route is moved off the link, its old rules and groups deleted first
    assert doc["rerouted"] == [0]
    assert doc["kinds"][:3] == ["flow-delete", "group-delete", "OFPBarrierRequest"]
    # s00's only other link leads to the failed one: no group protects the new first hop
    assert doc["kinds"][-1] == "OFPBarrierRequest" and "group-add" not in doc["kinds"]
    assert doc["deleted"] == [[(1 << 63) | 1, (1 << 63) | (1 << 32) - 1]]
    assert doc["path"] == ["s00", "w1_0", "s10", "w0_1", "s11", "w1_1", "s01"]
    assert doc["stats"] == doc["path"] and doc["failover"] and doc["errors"] == {}
