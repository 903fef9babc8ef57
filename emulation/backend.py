"""The emulation as a backend: run one Schedule on a running EmulatedNetwork and get the
simulator's ``Result`` shape back, with the proofs that it ran as scheduled.

``run_schedule(net, schedule, workdir)`` installs the schedule's routes (and those of the
graph's background flows), starts the background flows, runs one worker per server, takes
the graph's failing links down on time, samples the switches' port counters (the load of
every link) and proves the routes by their counters. No Mininet
import here: ``net`` does the network work.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.proof import verify_routes
from emulation.linkstats import PortCounters
from emulation.plan import counted_ports
from simulator.result import Result
from simulator.usage import LinkLoad
from topology.links import background_flows, link_failures
from traffic.runner import run_workers
from traffic.schedule import Schedule, routes

#: TCP port of the first background flow (below the schedule routes' ports).
BACKGROUND_PORT = 5301


@dataclass
class Emulated:
    """What one emulated run measured and proved."""

    result: Result
    sums_verified: bool
    route_proof: dict
    background_proof: dict | None = None
    failed_links: list[list[str]] = field(default_factory=list)
    #: Load of every link during the run, from the switches' port counters.
    link_load: LinkLoad | None = None

    @property
    def verified(self) -> bool:
        """Every sum right, every route (and background route) proven by its counters."""
        return (self.sums_verified and self.route_proof["ok"]
                and (self.background_proof or {"ok": True})["ok"])


def background_routes(graph: Any) -> list[dict]:
    """The controller routes of the graph's background flows, ports from BACKGROUND_PORT."""
    return [{"src": f["src"], "dst": f["dst"], "path": list(f["path"]),
             "tcp_port": BACKGROUND_PORT + k, "transfer_ids": []}
            for k, f in enumerate(background_flows(graph))]


def run_schedule(net: Any, schedule: Schedule, workdir: Path, *, seed: int = 0,
                 timeout_s: float = 120.0, say: Callable[[str], None] = lambda _: None
                 ) -> Emulated:
    """Run ``schedule`` on ``net`` under the network conditions of its graph; WorkerError
    (traffic.runner) when a worker fails or times out. The links that fail during the run
    are up again, and the background flows ended, when this returns or raises."""
    graph = net.graph
    flows = background_flows(graph)
    background = background_routes(graph)
    failures = link_failures(graph)
    net.client.delete_routes()
    net.client.put_routes([*routes(schedule), *background])
    if flows:
        net.start_background([(f, r["tcp_port"]) for f, r in zip(flows, background)])
        say(f"{len(flows)} background flow(s) running")
        time.sleep(1.0)  # the flows reach their rates before the collective starts

    def down(link: list[str]) -> Callable[[], None]:
        def action() -> None:
            net.set_link(*link, up=False)
            say(f"link {link[0]}-{link[1]} is down")
        return action

    addresses = {s: net.ip(s) for s in net.servers}
    ranks = {s: r for r, s in enumerate(net.servers)}

    counters = PortCounters(counted_ports(net.topology), more=net.counter_files()).start()
    try:
        measured = run_workers(schedule, addresses, ranks, net.spawn_worker, workdir, seed=seed,
                               timeout_s=timeout_s,
                               events=[(f["at_s"], down(f["link"])) for f in failures],
                               pool=net.workers)
    finally:
        counters.stop()
        net.stop_background()
        for failure in failures:
            net.set_link(*failure["link"], up=True)
    ours = {r["tcp_port"] for r in background}
    for _ in range(3):
        # Counters only grow, and no traffic flows now: when the proof falls short, the
        # revalidation cycle the read waited for may have begun before the last bytes (see
        # emulation.net.SyncedClient), so it is read again, each read after one more
        # cycle, before the run is declared unproven.
        stats = net.client.route_stats()
        proof = verify_routes(schedule, net.topology, {
            **stats, "routes": [e for e in stats.get("routes", []) if e["tcp_port"] not in ours]})
        if proof["ok"]:
            break
    background_proof = None
    if background:
        background_proof = verify_routes(background, net.topology, {
            **stats, "stray": [], "routes": [e for e in stats.get("routes", [])
                                             if e["tcp_port"] in ours]})
    result = Result(measured.makespan_s, dict(measured.start_s), dict(measured.finish_s),
                    source="emulation")
    return Emulated(result, all(measured.verified.values()), proof, background_proof,
                    [f["link"] for f in failures],
                    counters.load(measured.t0, measured.makespan_s))
