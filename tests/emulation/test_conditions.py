"""End-to-end runs with researchers' inputs: a topology file with a slow link and a
background flow, a plugin scheduler and a schedule file, and a link failing mid-run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LEAF_SPINE = REPO / "examples" / "topologies" / "leaf-spine.graphml"
pytestmark = pytest.mark.emulation


def run_cmd(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "emulation.run", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})


def iperf3_processes() -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if cmdline.read_bytes().startswith(b"iperf3"):
                found.append(cmdline.parent.name)
        except OSError:
            continue
    return found


def test_file_topology_background_flow_plugin_and_schedule_file(tmp_path):
    (tmp_path / "mine.py").write_text(
        "from traffic.collectives import build\n"
        "def halves(graph, size_bytes, dtype):\n"
        "    return build('ps-sharded', graph, size_bytes, dtype)\n")
    schedule = tmp_path / "ring.json"
    made = subprocess.run(
        [sys.executable, "-c", "import sys; from topology.files import read_topology; "
         "from traffic.collectives import build; g = read_topology(sys.argv[1]); "
         "s = build('ring', g, 200000, 'float32'); "
         "open(sys.argv[2], 'w').write(s.to_json())", str(LEAF_SPINE), str(schedule)],
        cwd=REPO, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    before = iperf3_processes()
    out = tmp_path / "run"
    done = run_cmd("--topo-file", str(LEAF_SPINE), "--scheduler", "mine:halves",
                   "--schedule", str(schedule), "--size-mb", "0.2",
                   "--link-rate", "h4-leaf2=5", "--background", "h1:h3=2",
                   "--out", str(out), "--json",
                   env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"})
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["topology"]["family"] == "file" and doc["name"] == "leaf-spine"
    assert doc["conditions"]["background_flows"][0]["path"][0] == "h1"
    assert [r["scheduler"] for r in doc["schedulers"]] == ["mine:halves", "ring"]
    for row in doc["schedulers"]:
        assert row["verified"], row.get("failure")
        proof = row["background_proof"]
        assert proof["ok"], proof["errors"]
        # The background flow really ran on its route: bytes on every hop, both ways.
        assert all(b > 0 for r in proof["routes"] for b in r["forward_bytes"].values())
    assert iperf3_processes() == before


def test_a_link_failing_mid_run_is_survived(tmp_path):
    out = tmp_path / "run"
    done = run_cmd("--topo", "bcube", "--n", "2", "--k", "1", "--scheduler", "ring",
                   "--size-mb", "0.5", "--fail-link-at", "s00-w0_0@0.3", "--out", str(out),
                   "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    row = json.loads(done.stdout)["schedulers"][0]
    assert row["verified"] and row["sums_verified"] and row["routes_verified"]
    failure = row["link_failure"]
    assert failure["links"] == [["s00", "w0_0"]]
    assert failure["failed_over_routes"], "no route moved to its backup path"
    assert failure["rerouted_transfers"]
    assert failure["simulated_lost_s"] > 0
    assert "link s00-w0_0 is down" in done.stderr
