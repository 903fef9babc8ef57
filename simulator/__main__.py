"""``python -m simulator --topo bcube --n 4 --k 1 --algo ring --size-mb 8 --bw-mbps 100``

Builds a baseline AllReduce schedule (or reads one with ``--schedule FILE``), simulates it and
prints its makespan next to the bandwidth lower bound and the packing optimum (the best
tree-based time; equal to the bound where no cut is thinner than a server's links): a JSON
object with ``--json`` (``--algo all``: a JSON list, one object per algorithm), a table
without.
"""

from __future__ import annotations

import json
import math
import shlex
import sys
from pathlib import Path

from simulator import lower_bound, packing_bound, simulate
from simulator.page import SCHEMA, conditions, network, transfer_list, versions, write
from simulator.usage import link_load
from topology import FAMILIES, from_spec
from topology.cli import (
    ArgumentParser,
    add_topology_args,
    graph_from_args,
    run,
    with_conditions,
)
from topology.links import link_failures
from traffic.collectives import ALGORITHMS
from traffic.plugins import make_schedule, resolve
from traffic.schedule import DTYPES, ScheduleError, buffer_bytes, read_schedule, validate

PROG = "python -m simulator"

def _parser() -> ArgumentParser:
    parser = ArgumentParser(prog=PROG, description="Simulate an AllReduce schedule on a "
                            "data-center topology (flow-level, max-min fair).")
    add_topology_args(parser)
    parser.add_argument("--algo", "--scheduler", dest="algo", default="all",
                        help="scheduler: " + ", ".join(ALGORITHMS) + ", drl, a plugin's entry "
                             "point name, package.module:function, or all built-in "
                             "collectives (default: all)")
    parser.add_argument("--size-mb", type=float, default=8.0,
                        help="buffer per server in MB of 10^6 bytes, rounded to whole "
                             "elements (default 8)")
    parser.add_argument("--dtype", default="float32", choices=list(DTYPES),
                        help="element type (default float32)")
    parser.add_argument("--schedule", metavar="FILE",
                        help="simulate this Schedule JSON instead of building one; the "
                             "topology comes from --topo/--topo-file, else from the "
                             "schedule's own spec (generated families only)")
    parser.add_argument("--validate", action="store_true",
                        help="also validate built schedules (files are always validated)")
    parser.add_argument("--startup-s", type=float, default=0.0,
                        help="start-up cost of every transfer, seconds (default 0)")
    parser.add_argument("--hop-latency-s", type=float, default=0.0,
                        help="latency of every link a transfer crosses, seconds (default 0)")
    parser.add_argument("--goodput", type=float, default=1.0,
                        help="fraction of each link's rate that carries payload (default 1)")
    parser.add_argument("--failover-s", type=float, default=0.0,
                        help="with --fail-link-at: pause of a transfer that was crossing the "
                             "link when it failed, seconds (a retransmission timeout; "
                             "default 0)")
    parser.add_argument("--frame-bytes", type=float, default=0.0,
                        help="bytes of a full frame on the links: adds the drain of full "
                             "round-robin queues fed by full links (simulator.frames; the "
                             "emulation's frames are 9014; default 0: the fluid model alone)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--report", metavar="FILE", type=Path,
                        help="also write the run's report page (HTML) to FILE and its "
                             "results document next to it (FILE with suffix .json)")
    return parser


def main() -> int:
    """Entry point of ``python -m simulator``."""
    args = _parser().parse_args()
    if args.schedule:
        schedule = read_schedule(args.schedule)
        if args.topo or args.topo_file:
            graph = graph_from_args(args)
        elif schedule.topology.get("family") in FAMILIES:
            graph = with_conditions(from_spec(schedule.topology, bw_mbps=args.bw_mbps), args)
        else:
            raise ValueError(f"--schedule {args.schedule} was made for "
                             f"{schedule.topology.get('family')!r} topology "
                             f"{schedule.topology.get('params')}; give its --topo-file")
        try:
            validate(schedule, graph)
        except ScheduleError as exc:
            raise ValueError(f"--schedule {args.schedule}: {exc}") from None
        jobs = [(schedule.algo or "schedule", schedule)]
        size = schedule.size_bytes
    else:
        graph = graph_from_args(args)
        size = buffer_bytes(args.size_mb, args.dtype)
        names = list(ALGORITHMS) if args.algo == "all" else [args.algo]
        for name in names:
            resolve(name)  # ValueError naming an unknown scheduler
        jobs = [(name, None) for name in names]
    bound = lower_bound(graph, size, goodput=args.goodput)
    optimum = packing_bound(graph, size, goodput=args.goodput)
    rows, report_rows = [], []
    for name, schedule in jobs:
        if schedule is None:
            schedule = make_schedule(name, graph, size, args.dtype)
            if args.validate or name not in ALGORITHMS:  # plugins' schedules are checked
                try:
                    validate(schedule, graph)
                except ScheduleError as exc:
                    raise ValueError(f"scheduler {name}: {exc}") from None
        result = simulate(graph, schedule, **costs(args))
        row = {"algo": name, "makespan_s": result.makespan_s, "lower_bound_s": bound,
               "optimum_s": optimum, "transfers": len(schedule.transfers)}
        if link_failures(graph):
            row["rerouted"] = len(result.rerouted)
        rows.append(row)
        if args.report:
            report_rows.append({
                "scheduler": name, "transfers": len(schedule.transfers),
                "simulated_s": result.makespan_s, "emulated_s": None,
                "simulated": result.to_dict(),
                "simulated_links": link_load(graph, schedule, **costs(args)).to_dict(),
                "transfer_list": transfer_list(schedule)})
    if args.report:
        dtype = jobs[0][1].dtype if args.schedule else args.dtype
        page = write_report(args, graph, size, dtype, bound, optimum, report_rows)
        sys.stderr.write(f"report: {page} (results document {page.with_suffix('.json')})\n")
    if args.json:
        print(json.dumps(rows if args.algo == "all" and not args.schedule else rows[0]))
        return 0
    print(f"{graph.graph['name']}, {size} bytes per server, "
          f"{graph.graph['bw_mbps']:g} Mbit/s links")
    print(f"lower bound {bound:.4f} s, packing optimum {optimum:.4f} s")
    for change in graph.graph.get("degraded", []):
        print(f"network: {change}")
    w = max(12, *(len(row["algo"]) for row in rows))
    print(f"{'algo':<{w}} {'transfers':>9} {'makespan_s':>11} {'x lower bound':>13} "
          f"{'x optimum':>9}")
    for row in rows:
        ratio = row["makespan_s"] / bound if bound else math.nan
        to_opt = row["makespan_s"] / optimum if optimum else math.nan
        print(f"{row['algo']:<{w}} {row['transfers']:>9} {row['makespan_s']:>11.4f} "
              f"{ratio:>13.3f} {to_opt:>9.3f}"
              + (f"  ({row['rerouted']} transfers re-routed)" if "rerouted" in row else ""))
    return 0


def costs(args) -> dict[str, float]:
    """The cost model's options on the command line (``simulate``'s keyword arguments)."""
    return {"startup_s": args.startup_s, "hop_latency_s": args.hop_latency_s,
            "goodput": args.goodput, "failover_s": args.failover_s,
            "frame_bytes": args.frame_bytes}


def write_report(args, graph, size: int, dtype: str, bound: float, optimum: float,
                 rows: list[dict]) -> Path:
    """Write the results document and the report page of a simulated run."""
    page = args.report
    if page.suffix == ".json":
        raise ValueError(f"--report {page}: give the page's name (.html); the results "
                         "document is written next to it")
    doc = {
        "schema": SCHEMA, "source": "simulator",
        "command": f"{PROG} {shlex.join(sys.argv[1:])}",
        "topology": graph.graph["spec"], "name": graph.graph["name"],
        "bw_mbps": float(graph.graph["bw_mbps"]), "size_bytes": size,
        "dtype": dtype,
        "lower_bound_s": bound, "optimum_s": optimum,
        "costs": costs(args),
        "conditions": conditions(graph),
        "versions": versions(), "network": network(graph), "schedulers": rows,
    }
    try:
        page.with_suffix(".json").write_text(json.dumps(doc, indent=2) + "\n")
        return write(doc, page)
    except OSError as exc:
        raise ValueError(f"--report {page}: {exc.strerror}") from None


if __name__ == "__main__":
    run(main, PROG)
