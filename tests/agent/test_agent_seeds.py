"""Training is reproducible from its seed."""

import pytest
import torch

import topology
from agent.train import TrainConfig, train


@pytest.mark.slow
def test_same_seed_same_training():
    torch.set_num_threads(1)
    graph = topology.make_graph("bcube", n=2, k=1)
    cfg = TrainConfig(seed=3, episodes=8, episodes_per_update=4, eval_every=1, selection=2,
                      settings=("calibrated 64KiB",))
    runs = [train(graph, cfg, progress=False)[2] for _ in range(2)]
    for a, b in zip(*runs):
        a = {k: v for k, v in a.items() if k != "seconds"}
        b = {k: v for k, v in b.items() if k != "seconds"}
        assert a == b
