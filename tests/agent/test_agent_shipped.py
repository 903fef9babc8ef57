"""Every shipped checkpoint still produces a valid schedule as fast as when it was trained."""

import pytest

import topology
from agent.env import EnvConfig
from agent.policy import CHECKPOINT_DIR, build_schedule, load_checkpoint
from traffic.schedule import validate

SHIPPED = sorted(p.name for p in CHECKPOINT_DIR.glob("*.pt"))


@pytest.mark.slow
@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_checkpoint_reproduces_its_makespan(name):
    upper, lower, doc = load_checkpoint(CHECKPOINT_DIR / name)
    spec = doc["spec"]
    graph = topology.make_graph(spec["family"], bw_mbps=doc["bw_mbps"], **spec["params"])
    schedule, makespan = build_schedule(graph, upper, lower, EnvConfig(**doc["config"]["env"]))
    validate(schedule, graph)
    assert makespan <= doc["meta"]["greedy_makespan_s"] * (1 + 1e-9)
