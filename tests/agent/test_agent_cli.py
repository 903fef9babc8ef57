"""Command-line smoke runs: training keeps finite losses, evaluate --json has its shape,
schedule_for serves any topology."""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

import topology
from agent import schedule_for

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ckpt")
    out = tmp / "bcube-2-1.pt"
    config = tmp / "train.json"
    config.write_text(json.dumps({"episodes_per_update": 4, "eval_every": 1, "selection": 2,
                                  "group": 2, "settings": ["calibrated 64KiB"]}))
    # 12 episodes of two small instances, 3 PPO updates.
    proc = _run("agent.train", "--instances", "bcube:n=2,k=1 jellyfish:switches=8,seed=0",
                "--episodes", "12", "--config", str(config), "--no-progress", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout + proc.stderr


@pytest.mark.slow
def test_training_smoke_losses_stay_finite(trained):
    out, text = trained
    lines = [line for line in text.splitlines() if line.startswith("losses ")]
    assert len(lines) >= 3
    for line in lines:
        values = dict(re.findall(r"(\w+)=(\S+)", line))
        # The upper level updates every time; the lower one only when some episode of the
        # update grew trees hop by hop (a forest row ends the episode with nothing to order).
        for key in ("upper_pg", "upper_v", "upper_ent", "upper_rank_kl"):
            assert math.isfinite(float(values[key])), line
        for key in ("lower_pg", "lower_v", "lower_ent"):
            assert math.isfinite(float(values.get(key, 0.0))), line
    assert out.exists() and out.stat().st_size < 200_000
    assert "x the best baseline" in text


@pytest.mark.slow
def test_evaluate_json_structure(trained):
    out, _ = trained
    proc = _run("agent.evaluate", "--topo", "bcube", "--n", "2", "--k", "1", "--json",
                "--checkpoint", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    algos = [row["algo"] for row in rows]
    assert algos == ["drl", "ring", "ps", "ps-sharded", "tree", "multitree", "packing",
                     "lower-bound", "optimum"]
    for row in rows:
        assert set(row) == {"algo", "makespan_s", "ratio_to_lower_bound", "ratio_to_optimum"}
        assert row["makespan_s"] > 0 and row["ratio_to_lower_bound"] >= 1 - 1e-9
        # BCube(2,1) has no cut thinner than a server's links: the optimum is the bound.
        assert row["ratio_to_optimum"] == pytest.approx(row["ratio_to_lower_bound"])


def test_config_with_unknown_key_is_an_error(tmp_path):
    config = tmp_path / "bad.json"
    config.write_text(json.dumps({"episodes": 2, "learning_rate": 1.0}))
    proc = _run("agent.train", "--instances", "bcube:n=2,k=1", "--config",
                str(config), "--out", str(tmp_path / "x.pt"), timeout=60)
    assert proc.returncode == 2 and "learning_rate" in proc.stderr


@pytest.mark.parametrize("doc,match", [({"settings": ["fast"]}, "unknown setting 'fast'"),
                                       ({"group": 0}, "group must be >= 1"),
                                       ({"env": {"chunk_options": []}}, "chunk_options")])
def test_bad_config_values_are_one_line_errors(tmp_path, doc, match):
    config = tmp_path / "bad.json"
    config.write_text(json.dumps(doc))
    proc = _run("agent.train", "--instances", "bcube:n=2,k=1", "--config", str(config),
                "--out", str(tmp_path / "x.pt"), timeout=60)
    assert proc.returncode == 2 and match in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_bad_flag_is_one_line_and_exit_2():
    proc = _run("agent.evaluate", "--topo", "bcube", "--switches", "4", timeout=60)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("family,params", [("bcube", {"n": 3, "k": 1}),
                                           ("jellyfish", {"switches": 9, "seed": 41})])
def test_schedule_for_serves_any_topology(family, params):
    from traffic.schedule import validate

    graph = topology.make_graph(family, **params)
    schedule = schedule_for(graph, graph.graph["spec"], 1 << 20, seed=0)
    validate(schedule, graph)
    assert schedule.algo == "drl" and schedule.size_bytes == 1 << 20
