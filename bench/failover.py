"""Failover benchmark: a link failing mid-AllReduce, emulated against the simulator's prediction.

``sudo python bench/failover.py [--topo bcube] [--scheduler multitree] [--link s00-w0_0]
[--bw LIST] [--at LIST] [--size-mb X]`` runs ``python -m emulation.run --json`` once without
a failure per link rate, then once per failure time (``--at``: fractions of that run's
simulated makespan) with ``--fail-link-at LINK@SECONDS``, and prints per run: the error of
the emulated time against the simulator's prediction of the same failure, the time the
failure cost (simulated, and emulated measured against the simulated run without it), the
route directions that failed over and the calibrated retransmission timeout. Goal: the
error with the failure within 10 %. Prints figures only.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def emulate(args: argparse.Namespace, bw: str, extra: list[str]) -> dict | None:
    """One ``emulation.run --json``; its results, or None (the reason printed) on failure."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "emulation.run", "--topo", args.topo, "--scheduler",
               args.scheduler, "--bw-mbps", bw, "--size-mb", args.size_mb, "--json",
               "--out", str(Path(tmp) / "run"), *extra]
        done = subprocess.run(cmd, capture_output=True, text=True)
    if not done.stdout.strip():
        print(f"  run failed (status {done.returncode}): "
              f"{done.stderr.strip().splitlines()[-1:]}")
        return None
    return json.loads(done.stdout)


def main() -> int:
    """Run the emulation with and without the failure and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topo", default="bcube")
    parser.add_argument("--scheduler", default="multitree")
    parser.add_argument("--link", default="s00-w0_0", help="link that fails (A-B)")
    parser.add_argument("--bw", default="2,4,6", help="comma list of link rates, Mbit/s")
    parser.add_argument("--at", default="0.3,0.6",
                        help="comma list of failure times, fractions of the simulated makespan")
    parser.add_argument("--size-mb", default="1")
    args = parser.parse_args()
    errors = []
    for bw in args.bw.split(","):
        base = emulate(args, bw, [])
        if base is None:
            continue
        row = base["schedulers"][0]
        print(f"{base['name']} {args.scheduler} at {bw} Mbit/s, no failure: simulated "
              f"{row['simulated_s']:.3f} s, emulated {row['emulated_s']:.3f} s, error "
              f"{row['error_pct']:+.1f}%, verified {row['verified']}")
        for fraction in args.at.split(","):
            at_s = float(fraction) * row["simulated_s"]
            doc = emulate(args, bw, ["--fail-link-at", f"{args.link}@{at_s:.3f}"])
            if doc is None:
                continue
            r = doc["schedulers"][0]
            if r.get("emulated_s") is None:
                print(f"  fails at {at_s:.3f} s: not measured: {r.get('failure')}")
                continue
            f = r["link_failure"]
            errors.append(abs(r["error_pct"]))
            print(f"  fails at {at_s:.3f} s: simulated {r['simulated_s']:.3f} s, emulated "
                  f"{r['emulated_s']:.3f} s, error {r['error_pct']:+.1f}%; time lost: simulated "
                  f"{f['simulated_lost_s']:.3f} s, emulated {f['emulated_lost_s']:.3f} s; "
                  f"{len(f['failed_over_routes'])} route directions failed over, "
                  f"{len(f['rerouted_transfers'])} transfers re-routed; timeout "
                  f"{doc['calibration']['failover_s']:.3f} s; verified {r['verified']}")
    if errors:
        within = sum(e <= 10.0 for e in errors)
        print(f"with a failure: {within} of {len(errors)} runs within 10 % of the simulator's "
              f"prediction; largest |error| {max(errors):.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
