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
