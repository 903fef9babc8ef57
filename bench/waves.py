"""Which traffic pattern the flow-level model gets wrong: one wave at a time, emulated.

``sudo python bench/waves.py [--bw 4.6] [--size-kb 125] [--reps 2]`` builds BCube(4,1) at
``--bw`` Mbit/s, calibrates it as ``emulation.run`` does, and runs small AllReduces of the
four servers under one level-0 switch (s00..s03), each two waves of transfers of
``--size-kb`` over the switch (two shaped links per transfer):

- ``pair``: s00 and s01 alone (one flow per wave);
- ``ps``: s01..s03 send to s00, which sends the sum back (three flows share s00's link);
- ``mesh``: every server sends a quarter to every other, then the quarters come back
  (every link carries three flows, and every flow shares both of its links).

Per pattern and run it prints the emulated time; the calibrated fluid model's time, its
error and the extra time per wave in milliseconds and in frame times (a full frame, 9014
bytes with the Ethernet header, at ``--bw``); the time and error of the model with the queue
drain of full frames (``simulator.frames``); and the TCP retransmissions the four hosts
counted (``nstat``). Figures only.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # before bench/simulator.py

from emulation.calibration import calibrate  # noqa: E402
from emulation.net import EmulatedNetwork  # noqa: E402
from simulator import simulate  # noqa: E402
from topology import make_graph  # noqa: E402
from traffic.runner import run_workers  # noqa: E402
from traffic.schedule import Schedule, Transfer  # noqa: E402

GROUP = ("s00", "s01", "s02", "s03")
SWITCH = "w0_0"
COUNTERS = ("TcpRetransSegs", "TcpExtTCPTimeouts")


def pattern(name: str, graph, quarter: int) -> tuple[Schedule, tuple[str, ...]]:
    """The two-wave AllReduce ``name`` of GROUP (``quarter`` elements per transfer) and
    the servers it involves."""
    transfers: list[Transfer] = []

    def add(src: str, dst: str, offset: int, count: int, op: str, deps=()) -> int:
        transfers.append(Transfer(len(transfers), src, dst, offset, count, op,
                                  (src, SWITCH, dst), tuple(deps)))
        return len(transfers) - 1

    if name == "pair":
        first = add("s00", "s01", 0, quarter, "reduce")
        add("s01", "s00", 0, quarter, "copy", (first,))
        servers, elements = GROUP[:2], quarter
    elif name == "ps":
        ins = [add(s, "s00", 0, quarter, "reduce") for s in GROUP[1:]]
        for s in GROUP[1:]:
            add("s00", s, 0, quarter, "copy", ins)
        servers, elements = GROUP, quarter
    elif name == "mesh":
        got = {d: [add(s, d, j * quarter, quarter, "reduce") for s in GROUP if s != d]
               for j, d in enumerate(GROUP)}
        for j, s in enumerate(GROUP):
            for d in GROUP:
                if d != s:
                    add(s, d, j * quarter, quarter, "copy", got[s])
        servers, elements = GROUP, 4 * quarter
    else:
        raise ValueError(f"unknown pattern {name!r}; choose pair, ps or mesh")
    return Schedule(graph.graph["spec"], 4 * elements, "float32", tuple(transfers), name), \
        servers


def tcp_counters(net, servers) -> dict[str, int]:
    """Sum over ``servers`` of their TCP retransmission counters."""
    total = dict.fromkeys(COUNTERS, 0)
    for s in servers:
        out = net.host(s).cmd("nstat -az " + " ".join(COUNTERS))
        for line in out.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] in total:
                total[parts[0]] += int(parts[1])
    return total


def main() -> int:
    """Build the network, calibrate, run every pattern ``--reps`` times, print figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bw", type=float, default=4.6, help="link rate, Mbit/s")
    parser.add_argument("--size-kb", type=float, default=125.0, help="bytes per transfer / 1000")
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    graph = make_graph("bcube", bw_mbps=args.bw, n=4, k=1)
    quarter = int(args.size_kb * 1000 / 4)
    with tempfile.TemporaryDirectory() as tmp, \
            EmulatedNetwork(graph, workdir=Path(tmp) / "net") as net:
        frame_s = net.frame_bytes * 8 / (args.bw * 1e6)
        cal = calibrate(net, graph, Path(tmp), 60.0)
        costs = {"goodput": min(1.0, cal["goodput_ratio"]), "startup_s": cal["startup_s"]}
        print(f"bcube(4, 1) at {args.bw:g} Mbit/s, {args.size_kb:g} kB per transfer: goodput "
              f"{costs['goodput']:.3f}, fixed cost {1e3 * costs['startup_s']:.1f} ms, frame "
              f"time {1e3 * frame_s:.1f} ms")
        for name in ("pair", "ps", "mesh"):
            schedule, servers = pattern(name, graph, quarter)
            sim = simulate(graph, schedule, **costs).makespan_s
            framed = simulate(graph, schedule, **costs, frame_bytes=cal["frame_bytes"]).makespan_s
            for rep in range(args.reps):
                before = tcp_counters(net, servers)
                run = run_workers(schedule, {s: net.ip(s) for s in servers},
                                  {s: r for r, s in enumerate(servers)}, net.spawn_worker,
                                  Path(tmp) / f"{name}-{rep}", seed=rep, pool=net.workers)
                after = tcp_counters(net, servers)
                extra = (run.makespan_s - sim) / 2
                print(f"  {name:5s} run {rep}: emulated {run.makespan_s:.3f} s; fluid model "
                      f"{sim:.3f} s, error {100 * (run.makespan_s / sim - 1):+.1f}%, extra per "
                      f"wave {1e3 * extra:+.0f} ms = {extra / frame_s:+.1f} frames; with "
                      f"frames {framed:.3f} s, error {100 * (run.makespan_s / framed - 1):+.1f}%, "
                      f"sums {'verified' if all(run.verified.values()) else 'WRONG'}, "
                      + ", ".join(f"{k} {after[k] - before[k]}" for k in COUNTERS), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
