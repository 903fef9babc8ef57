"""Several Open vSwitch instances: forwarding budget and error, by instance count.

``sudo python bench/instances.py [--instances 1,2] [--rounds 3] [--topo bcube]
[--scheduler multitree,ps-sharded] [--bw-mbps 4.5] [--no-runs]``

1. The budget probe (``emulation.budget.measure_forwarding``: one TCP flow through a chain of
   datapaths spread over the instances), taken ``--rounds`` times per count, the counts
   interleaved so that the machine's noise falls on all alike. Prints every figure, the median
   per count and its ratio to the first count's. The issue's goal: 2 instances >= 1.7 x one.
2. Unless ``--no-runs``: ``python -m emulation.run --json`` per count at one fixed link rate,
   printing each scheduler's error against the calibrated simulator: whether the extra
   forwarding buys fidelity at a given rate.

Prints figures only; nothing is asserted. Do not run it beside a training run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", default="1,2", help="instance counts (default 1,2)")
    parser.add_argument("--rounds", type=int, default=3, help="probes per count (default 3)")
    parser.add_argument("--topo", default="bcube")
    parser.add_argument("--scheduler", default="multitree,ps-sharded")
    parser.add_argument("--bw-mbps", default="4.5", help="link rate of the runs (default 4.5)")
    parser.add_argument("--no-runs", action="store_true", help="probe only")
    args = parser.parse_args()
    counts = [int(c) for c in args.instances.split(",")]
    from emulation.budget import BUDGET_SHARE, chain_length, measure_forwarding

    raw: dict[int, list[float]] = {n: [] for n in counts}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for n in counts:
                mbps = measure_forwarding(Path(tmp) / f"probe-{n}-{r}", instances=n)
                raw[n].append(mbps)
                print(f"probe round {r + 1}, {n} instance(s), chain of {chain_length(n)}: "
                      f"{mbps:.0f} Mbit/s of forwarding", flush=True)
    base = statistics.median(raw[counts[0]])
    print(f"\n{'instances':>9} {'median raw Mbit/s':>18} {'budget Mbit/s':>14} {'ratio':>6}")
    for n in counts:
        med = statistics.median(raw[n])
        print(f"{n:>9} {med:>18.0f} {BUDGET_SHARE * med:>14.0f} {med / base:>6.2f}")
    if args.no_runs:
        return 0
    print(f"\nerror % of {args.scheduler} on {args.topo} at {args.bw_mbps} Mbit/s "
          "(emulated / calibrated simulated - 1)")
    for n in counts:
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run(
                [sys.executable, "-m", "emulation.run", "--topo", args.topo, "--scheduler",
                 args.scheduler, "--bw-mbps", args.bw_mbps, "--ovs-instances", str(n),
                 "--json", "--out", str(Path(tmp) / "run")],
                capture_output=True, text=True, cwd=REPO)
        if done.returncode != 0 or not done.stdout.strip():
            print(f"{n} instance(s): run failed: {done.stderr.strip()[-300:]}")
            continue
        doc = json.loads(done.stdout.strip().splitlines()[-1])
        rows = ", ".join(f"{r['scheduler']} {r['error_pct']:+.1f}" for r in doc["schedulers"])
        print(f"{n} instance(s): {rows}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
