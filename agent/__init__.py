"""The hierarchical deep-RL AllReduce scheduler: flow-tree building above, workload
scheduling below, two PPO policies trained on the flow-level simulator.

``schedule_for(graph, spec, size_bytes, seed)`` is what the emulation calls; torch is
imported only when it is.
"""

from __future__ import annotations


def schedule_for(graph, spec: dict, size_bytes: int, seed: int = 0):
    """The DRL Schedule for ``graph`` (any topology) from the shipped general checkpoint;
    see ``agent.policy.schedule_for``."""
    from agent.policy import schedule_for as impl

    return impl(graph, spec, size_bytes, seed)


__all__ = ["schedule_for"]
