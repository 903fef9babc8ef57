"""Fidelity benchmark: emulated vs simulated AllReduce completion on the three defaults.

``sudo python bench/fidelity.py [--scheduler LIST] [--size-mb X]`` runs
``python -m emulation.run --json`` for BCube, DCell and Jellyfish at their emulation defaults
and prints, per run and overall, the calibration goodput ratio (measured / configured rate of
one shaped link), each scheduler's raw and calibrated error, the median |emulated/simulated - 1|
and the set-up times. Goals: median error <= 5 %, goodput ratio >= 0.93. Prints figures only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TOPOLOGIES = ("bcube", "dcell", "jellyfish")


def main() -> int:
    """Run the emulation per topology and print the fidelity figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scheduler", default=None, help="comma list (default: all available)")
    parser.add_argument("--size-mb", default=None, help="buffer per server in MB")
    parser.add_argument("--topo", default=",".join(TOPOLOGIES), help="comma list of families")
    args = parser.parse_args()
    errors, raw_errors, ratios = [], [], []
    for topo in args.topo.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, "-m", "emulation.run", "--topo", topo, "--json",
                   "--out", str(Path(tmp) / topo)]
            if args.scheduler:
                cmd += ["--scheduler", args.scheduler]
            if args.size_mb:
                cmd += ["--size-mb", args.size_mb]
            done = subprocess.run(cmd, capture_output=True, text=True)
        if not done.stdout.strip():
            print(f"{topo}: run failed (status {done.returncode}): "
                  f"{done.stderr.strip().splitlines()[-1:]}")
            continue
        doc = json.loads(done.stdout)
        cal = doc.get("calibration") or {}
        if cal:
            ratios.append(cal["goodput_ratio"])
        print(f"{doc['name']}: goodput ratio {cal.get('goodput_ratio', float('nan')):.3f}, "
              "set-up " + ", ".join(f"{k} {v:.1f} s" for k, v in doc["setup_s"].items()))
        for row in doc["schedulers"]:
            if row.get("emulated_s") is None:
                print(f"  {row['scheduler']:<11} not measured: {row.get('failure')}")
                continue
            errors.append(abs(row["error_pct"]))
            raw_errors.append(abs(row["error_raw_pct"]))
            print(f"  {row['scheduler']:<11} simulated {row['simulated_s']:7.3f} s  emulated "
                  f"{row['emulated_s']:7.3f} s  error {row['error_pct']:+6.1f}%  raw "
                  f"{row['error_raw_pct']:+6.1f}%  verified {row['verified']}")
    if errors:
        print(f"median |emulated/simulated - 1|: calibrated {statistics.median(errors):.1f}%, "
              f"raw {statistics.median(raw_errors):.1f}% over {len(errors)} runs (goal <= 5%)")
    if ratios:
        print(f"goodput / configured rate: min {min(ratios):.3f}, median "
              f"{statistics.median(ratios):.3f} (goal >= 0.93)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
