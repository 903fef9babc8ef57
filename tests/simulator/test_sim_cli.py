"""Smoke runs of ``python -m simulator``: JSON shapes, the table, and one-line usage errors."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

import topology as tp
from simulator import simulate
from traffic.collectives import ALGORITHMS, build

ROOT = pathlib.Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simulator", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_one_algo_json():
    out = cli("--topo", "bcube", "--n", "4", "--k", "1", "--algo", "ring", "--size-mb", "8",
              "--bw-mbps", "100", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert set(doc) == {"algo", "makespan_s", "lower_bound_s", "optimum_s", "transfers"}
    assert doc["algo"] == "ring" and doc["transfers"] == 480
    assert doc["makespan_s"] == pytest.approx(2 * 15 / 16 * 64e6 / 100e6)
    assert doc["lower_bound_s"] == pytest.approx(doc["makespan_s"] / 2)
    assert doc["optimum_s"] == pytest.approx(doc["lower_bound_s"])


@pytest.mark.parametrize("family", tp.FAMILIES)
def test_all_algos_json_list(family):
    out = cli("--topo", family, "--algo", "all", "--size-mb", "0.1", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [row["algo"] for row in rows] == list(ALGORITHMS)
    for row in rows:
        assert row["makespan_s"] >= row["lower_bound_s"] * (1 - 1e-9) > 0
        assert row["optimum_s"] >= row["lower_bound_s"] * (1 - 1e-9)


def test_table():
    out = cli("--topo", "dcell", "--size-mb", "0.1", "--startup-s", "0.001",
              "--hop-latency-s", "0.0001", "--dtype", "float64")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("dcell(4, 1), 100000 bytes per server")
    assert lines[1].startswith("lower bound ") and "packing optimum" in lines[1]
    assert lines[2].split() == ["algo", "transfers", "makespan_s", "x", "lower", "bound", "x",
                                "optimum"]
    assert [line.split()[0] for line in lines[3:]] == list(ALGORITHMS)


def test_schedule_file(tmp_path):
    g = tp.make_graph("jellyfish", bw_mbps=20.0)
    schedule = build("tree", g, 40_000)
    path = tmp_path / "tree.json"
    path.write_text(schedule.to_json())
    out = cli("--schedule", str(path), "--bw-mbps", "20", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["algo"] == "tree"
    assert doc["makespan_s"] == pytest.approx(simulate(g, schedule).makespan_s, rel=1e-12)


@pytest.mark.parametrize("args", [
    ["--size-mb", "0"],
    ["--size-mb", "-3"],
    ["--size-mb", "nan"],
    ["--algo", "nccl"],
    ["--topo", "jellyfish", "--n", "4"],
    ["--n", "1"],
    ["--bw-mbps", "0"],
    ["--goodput", "1.5"],
    ["--startup-s", "-1"],
    ["--schedule", "/nonexistent/schedule.json"],
])
def test_bad_input_is_one_line_and_exit_2(args):
    out = cli(*args)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stderr.startswith("python -m simulator: error:")


def test_bad_schedule_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"schema_version": 1, "colour": 2}')
    out = cli("--schedule", str(path))
    assert out.returncode == 2
    assert "colour" in out.stderr and len(out.stderr.strip().splitlines()) == 1
