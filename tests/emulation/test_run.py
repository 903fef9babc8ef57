"""End-to-end: ``python -m emulation.run`` on the smallest networks, as a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import network_state

from emulation.net import ETHERNET_HEADER_BYTES, MTU
from simulator.page import check

REPO = Path(__file__).resolve().parents[2]


def run_cmd(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "emulation.run", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def our_processes(word: bytes) -> list[str]:
    """PIDs of processes whose command line contains ``word`` (e.g. b"traffic.worker")."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if word in cmdline.read_bytes():
                found.append(cmdline.parent.name)
        except OSError:
            continue
    return found


@pytest.mark.emulation
@pytest.mark.parametrize("family", ["bcube", "dcell"])
def test_ring_and_ps_verified_end_to_end(tmp_path, family):
    out = tmp_path / "a run (1)"  # a shell-unsafe directory name works too
    done = run_cmd("--topo", family, "--n", "2", "--k", "1", "--scheduler", "ring,ps",
                   "--size-mb", "0.25", "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert json.loads((out / "results.json").read_text()) == json.loads(json.dumps(doc))
    assert doc["topology"] == {"family": family, "params": {"n": 2, "k": 1}}
    assert {"network_up_s", "controller_connected_s", "base_rules_installed_s"} <= set(
        doc["setup_s"])
    cal = doc["calibration"]
    assert 0 < cal["measured_mbps"] <= cal["configured_mbps"] * 1.1
    probes = cal["startup_probes_s"]  # the fixed cost: the median of the probe chains
    assert len(probes) == 3 and cal["startup_s"] == sorted(probes)[1]
    assert cal["frame_bytes"] == MTU + ETHERNET_HEADER_BYTES  # the network's own frames
    assert [r["scheduler"] for r in doc["schedulers"]] == ["ring", "ps"]
    for row in doc["schedulers"]:
        assert row["verified"] and row["sums_verified"] and row["routes_verified"]
        assert row["route_proof"]["ok"] and row["route_proof"]["routes"]
        for hop in row["route_proof"]["routes"]:
            assert all(v > 0 for v in hop["forward_bytes"].values())
        emu, sim = row["emulated"], row["simulated"]
        assert set(emu["start_s"]) == set(emu["finish_s"]) == set(sim["finish_s"])
        assert len(emu["finish_s"]) == row["transfers"]
        assert row["emulated_s"] == pytest.approx(max(emu["finish_s"].values()))
        assert row["simulated_s"] > 0 and row["error_pct"] is not None
    assert (out / "makespan.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "timeline-ring.png").exists() and (out / "timeline-ps.png").exists()
    assert doc["versions"]["python"]
    check(doc)  # the report page's schema
    assert all(row["emulated_links"] and row["simulated_links"] for row in doc["schedulers"])
    assert "vegaEmbed" in (out / "report.html").read_text()


@pytest.mark.parametrize(
    "args",
    [["--topo", "bcube", "--n", "1"], ["--topo", "torus"], ["--topo", "dcell", "--switches", "3"],
     ["--scheduler", "ring,magic"], ["--size-mb", "0"], ["--delay-ms", "5"],
     ["--ovs-instances", "0"]],
)
def test_bad_arguments_one_line_exit_2(args):
    done = run_cmd(*args, timeout=60)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_bad_time_scale_refused_before_the_network(tmp_path):
    # Read by the workers' start-up limit, deep in the run: refused up front instead, in one
    # line, and nothing (not even the run directory) is made.
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "emulation.run", "--topo", "bcube", "--n",
                           "2", "--scheduler", "ring", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=60,
                          env=os.environ | {"ARTB_TIME_SCALE": "slow"})
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "python -m emulation.run: error: ARTB_TIME_SCALE='slow': expected a number >= 1"]
    assert done.stdout == "" and not out.exists()


@pytest.mark.emulation
def test_missing_mininet_is_one_line_exit_1(tmp_path):
    # An interpreter without Mininet (a user's python instead of the venv's): one line that
    # names the interpreter and the fix, status 1, no traceback and nothing left behind.
    argv = ["emulation.run", "--topo", "bcube", "--n", "2", "--scheduler", "ring", "--out",
            str(tmp_path / "run"), "--no-calibrate"]
    code = ("import runpy, sys; sys.modules['mininet'] = None; "
            f"sys.argv = {argv!r}; runpy.run_module('emulation.run', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("python -m emulation.run: error: Mininet is not importable by "
                           f"{sys.executable}"), last
    assert "scripts/setup.sh" in last
    assert done.stdout == ""


@pytest.mark.emulation
def test_sigterm_mid_run_leaves_nothing(tmp_path):
    before = network_state()
    proc = subprocess.Popen(
        [sys.executable, "-m", "emulation.run", "--topo", "bcube", "--n", "2", "--k", "1",
         "--scheduler", "ps", "--size-mb", "2", "--no-calibrate", "--out", str(tmp_path)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Wait until the workers are running, then terminate.
    deadline = time.monotonic() + 120
    seen = ""
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen += line
        if "running" in line and "workers" in line:
            break
        assert line, f"run ended early: {seen}"
    time.sleep(1.0)
    os.kill(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert not (tmp_path / "results.json").exists()  # nothing measured, nothing reported
    after = network_state()
    extra = {k: after[k] - v for k, v in before.items() if after[k] - v}
    assert not extra, extra
    assert not our_processes(b"traffic.worker")
    assert not our_processes(str(tmp_path / "net").encode())  # the controller of this run
