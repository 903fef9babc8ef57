"""Flow-level AllReduce simulator: max-min fair fluid model of a Schedule on a topology.

``simulate(graph, schedule, ...) -> Result`` (with the graph's background flows and link
failures, see ``topology.links``), ``lower_bound(graph, size_bytes)`` (no AllReduce
is faster) and ``packing_bound(graph, size_bytes)`` (no tree-based AllReduce is faster). Pure:
standard library, networkx and numpy, plus numba for the compiled event loop when installed.
"""

from simulator.bounds import lower_bound, packing_bound
from simulator.costs import BANDWIDTH_ONLY, CALIBRATED, CostModel
from simulator.fluid import simulate
from simulator.maxmin import max_min_rates
from simulator.result import Result

__all__ = [
    "BANDWIDTH_ONLY",
    "CALIBRATED",
    "CostModel",
    "Result",
    "lower_bound", "max_min_rates", "packing_bound", "simulate"]
