"""The calibration of a running emulated network: what the simulator's calibrated model
takes from it (``simulator.CostModel``'s factors), measured by probes on the network itself.

No Mininet import here: ``net`` (an ``emulation.net.EmulatedNetwork``) does the network work.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import networkx as nx

from traffic.runner import run_workers
from traffic.schedule import Schedule, Transfer

#: Chains of one-element transfers the calibration times (``startup_probe``); the fixed
#: cost is their median.
STARTUP_PROBES = 3


def calibrate(net: Any, graph: nx.Graph, workdir: Path, timeout_s: float,
              hop_s: float = 0.0) -> dict[str, Any]:
    """The calibration of a running network (``net``, an EmulatedNetwork): its single-flow
    probe (``EmulatedNetwork.calibrate``: goodput factor, round trip, retransmission timeout)
    plus ``startup_s``, the fixed cost of one transfer: the median over STARTUP_PROBES chains
    (``startup_probe``) of a chain's time per transfer less ``hop_s`` per link crossed, and
    ``startup_probes_s``, every chain's figure, and ``frame_bytes``, the size of a full
    frame on the links (the simulator's queue drain, ``simulator.frames``)."""
    probe = net.calibrate()
    probe["frame_bytes"] = net.frame_bytes
    a, b = probe["src"], probe["dst"]
    chain = startup_probe(graph, a, b)
    # Each transfer of the chain waits for the previous one's arrival: a fixed cost plus the
    # path's one-way delay, which the simulator adds per link. The median of STARTUP_PROBES
    # chains: one short chain now and then runs several times slower.
    there = len(chain.transfers[0].path) - 1
    each = []
    for k in range(STARTUP_PROBES):
        measured = run_workers(chain, {a: net.ip(a), b: net.ip(b)}, {a: 0, b: 1},
                               net.spawn_worker, workdir / f"startup-probe-{k}",
                               timeout_s=timeout_s, pool=net.workers)
        each.append(max(0.0, measured.makespan_s / len(chain.transfers) - there * hop_s))
    probe["startup_s"], probe["startup_probes_s"] = statistics.median(each), each
    return probe


def startup_probe(graph: nx.Graph, a: str, b: str, rounds: int = 12) -> Schedule:
    """A two-server AllReduce of one element followed by copies bouncing back and forth:
    ``rounds`` transfers in one dependency chain, each too small to take measurable
    transmission time, so the chain's length over ``rounds`` is the fixed cost of one transfer
    (connection set-up, framing, acknowledgement, waking the dependent sender)."""
    there = tuple(nx.shortest_path(graph, a, b))
    back = there[::-1]
    transfers = [Transfer(0, a, b, 0, 1, "reduce", there)]
    for i in range(1, rounds):
        src, dst, path = (b, a, back) if i % 2 else (a, b, there)
        transfers.append(Transfer(i, src, dst, 0, 1, "copy", path, (i - 1,)))
    return Schedule(graph.graph["spec"], 4, "float32", tuple(transfers), "startup-probe")
