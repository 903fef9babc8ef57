"""The packing scheduler: how long its LP takes and how close its schedule comes to the optimum.

``python bench/packing.py [--size-mb 1,8] [--max-servers 64]`` prints, per instance, the
packing optimum's computation time (max-flow, ``simulator.packing_bound``), then per buffer
size: the time to build the ``packing`` schedule (LP included), the LP's rounds of column
generation, how many trees it uses and their mean height (weighted by rate, per root), the
number of transfers and the simulated makespan over the packing optimum. Instances: the
DCells up to 56 servers (where rings do not reach the optimum), BCube(4,1) with one link
failed or at a quarter of the rate, and the 64-server BCubes. Figures only; nothing is
asserted.

``--copies C --chunks-per-hop H --min-chunk-bytes B --max-transfers T`` (any of them) cut
the same trees into other schedules (``traffic.packing.packing_plan``'s options; T 0: no
limit), to see what the gap to the optimum costs in transfers, e.g. ``--size-mb 8
--copies 16 --chunks-per-hop 32 --min-chunk-bytes 64 --max-transfers 0``; build_s is then
the cutting alone.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import topology as tp  # noqa: E402
from simulator import packing_bound, simulate  # noqa: E402
from traffic.collectives import build, from_builder, optimal_rings, packing_forest  # noqa: E402
from traffic.overlay import depth  # noqa: E402
from traffic.packing import MIN_CHUNK_BYTES, emit_packing  # noqa: E402
from traffic.schedule import DTYPES, buffer_bytes  # noqa: E402
from traffic.trees import Builder  # noqa: E402

#: The plan options the command line may set: (flag, packing_plan keyword, help).
PLAN_OPTIONS = (
    ("--copies", "copies", "tree copies per root (default: the scheduler's)"),
    ("--chunks-per-hop", "chunks_per_hop", "pipeline chunks per server hop of height"),
    ("--min-chunk-bytes", "min_chunk", "smallest chunk, bytes"),
    ("--max-transfers", "max_transfers", "most transfers of a schedule; 0: no limit"),
)


def cases() -> list[tuple[str, object]]:
    """(name, graph) of every instance, smallest first."""
    bcube = tp.make_graph("bcube", n=4, k=1)
    quarter = tp.with_link_rates(bcube, {("s00", "w0_0"): 2.5})
    return [
        ("DCell(3,1)", tp.make_graph("dcell", n=3, k=1)),
        ("BCube(4,1) s00-w0_0 failed", tp.without_link(bcube, "s00", "w0_0")),
        ("BCube(4,1) s00-w0_0 at 1/4", quarter),
        ("DCell(5,1)", tp.make_graph("dcell", n=5, k=1)),
        ("DCell(2,2)", tp.make_graph("dcell", n=2, k=2)),
        ("DCell(6,1)", tp.make_graph("dcell", n=6, k=1)),
        ("DCell(7,1)", tp.make_graph("dcell", n=7, k=1)),
        ("BCube(8,1)", tp.make_graph("bcube", n=8, k=1)),
        ("BCube(4,2)", tp.make_graph("bcube", n=4, k=2)),
    ]


def main() -> None:
    """Run the benchmark and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", default="1,8", help="comma-separated buffer sizes, 10^6 "
                        "bytes (default 1,8)")
    parser.add_argument("--max-servers", type=int, default=64)
    for flag, _, text in PLAN_OPTIONS:
        parser.add_argument(flag, type=int, metavar="N", help=text)
    args = parser.parse_args()
    try:
        sizes = [buffer_bytes(float(s), "float32") for s in args.size_mb.split(",")]
    except ValueError:
        parser.error(f"--size-mb: not a list of numbers: {args.size_mb!r}")
    options = {}
    for flag, key, _ in PLAN_OPTIONS:
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is None:
            continue
        least = 0 if key == "max_transfers" else 1
        if value < least:
            parser.error(f"{flag} must be an integer >= {least}, got {value}")
        options[key] = value
    if options:  # the scheduler's floor unless told otherwise (packing_plan's is 1 element)
        options["min_chunk"] = max(1, options.get("min_chunk", MIN_CHUNK_BYTES)
                                   // DTYPES["float32"])
    if options.get("max_transfers") == 0:
        options["max_transfers"] = 2**62
    print(f"{'instance':<28} {'servers':>7} {'MB':>4} {'build_s':>8} {'rounds':>6} "
          f"{'trees':>6} {'height':>6} {'transfers':>9} {'makespan/opt':>12}")
    for name, graph in cases():
        servers = len(tp.servers(graph))
        if servers > args.max_servers:
            continue
        t0 = time.perf_counter()
        packing_bound(graph, sizes[0])
        print(f"{name:<28} {servers:>7} optimum (max-flow) in {time.perf_counter() - t0:.2f} s",
              flush=True)
        if optimal_rings(graph, sizes[0]) is not None:
            print(f"{name:<28} {servers:>7} rings reach the optimum: no LP", flush=True)
            continue
        forest = packing_forest(graph)
        trees = sum(len(items) for family in forest.families() for items in family.values())
        height = sum(w * depth(t, r) / sum(x for x, _ in items)
                     for family in forest.families() for r, items in family.items()
                     for w, t in items) / (servers * len(forest.families()))
        for size in sizes:
            t0 = time.perf_counter()
            if options:
                builder = Builder()
                emit_packing(builder, forest, size // DTYPES["float32"], **options)
                schedule = from_builder(graph, size, "float32", builder, "packing")
            else:
                schedule = build("packing", graph, size)
            built = time.perf_counter() - t0
            ratio = simulate(graph, schedule).makespan_s / packing_bound(graph, size)
            print(f"{name:<28} {servers:>7} {size / 1e6:>4.0f} {built:>8.2f} "
                  f"{forest.iterations:>6} {trees:>6} {height:>6.2f} "
                  f"{len(schedule.transfers):>9} {ratio:>12.4f}", flush=True)


if __name__ == "__main__":
    main()
