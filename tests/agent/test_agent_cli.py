"""Command-line smoke runs: training keeps finite losses, evaluate --json has its shape,
schedule_for refuses an instance without a checkpoint."""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

import topology
from agent import schedule_for
from agent.policy import CHECKPOINT_DIR

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ckpt")
    out = tmp / "bcube-2-1.pt"
    config = tmp / "train.json"
    config.write_text(json.dumps({"episodes_per_update": 4, "eval_every": 1,
                                  "env": {"size_bytes": 1 << 20}}))
    # 12 episodes of BCube(2, 1): about 700 decisions of the two levels, 3 PPO updates.
    proc = _run("agent.train", "--topo", "bcube", "--n", "2", "--k", "1", "--episodes", "12",
                "--config", str(config), "--no-progress", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout + proc.stderr


@pytest.mark.slow
def test_training_smoke_losses_stay_finite(trained):
    out, text = trained
    lines = [line for line in text.splitlines() if line.startswith("losses ")]
    assert len(lines) >= 3
    for line in lines:
        values = dict(re.findall(r"(\w+)=(\S+)", line))
        for key in ("upper_pg", "upper_v", "upper_ent", "lower_pg", "lower_v", "lower_ent"):
            assert math.isfinite(float(values[key])), line
    assert out.exists() and out.stat().st_size < 200_000
    assert "greedy DRL makespan" in text


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
    proc = _run("agent.train", "--topo", "bcube", "--n", "2", "--k", "1", "--config",
                str(config), "--out", str(tmp_path / "x.pt"), timeout=60)
    assert proc.returncode == 2 and "learning_rate" in proc.stderr


def test_bad_flag_is_one_line_and_exit_2():
    proc = _run("agent.evaluate", "--topo", "bcube", "--switches", "4", timeout=60)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1


def test_schedule_for_names_the_topology_without_checkpoint():
    graph = topology.make_graph("bcube", n=3, k=1)
    assert not (CHECKPOINT_DIR / "bcube-3-1.pt").exists()
    with pytest.raises(ValueError, match="bcube"):
        schedule_for(graph, graph.graph["spec"], 1 << 20, seed=0)


@pytest.mark.skipif(not (CHECKPOINT_DIR / "bcube-2-1.pt").exists(),
                    reason="no shipped BCube(2,1) checkpoint")
def test_schedule_for_shipped_checkpoint_validates():
    from traffic.schedule import validate

    graph = topology.make_graph("bcube", n=2, k=1)
    schedule = schedule_for(graph, graph.graph["spec"], 1 << 20, seed=0)
    validate(schedule, graph)
    assert schedule.algo == "drl" and schedule.size_bytes == 1 << 20
