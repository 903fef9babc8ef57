"""Fidelity benchmark: emulated vs simulated AllReduce completion over a matrix of networks.

``sudo python bench/fidelity.py [--instances LIST] [--sizes LIST] [--scheduler LIST]``
runs ``python -m emulation.run --json`` (default settings: ``--bw-mbps auto``) once per
instance and size, and prints the matrix of calibrated errors (emulated / simulated - 1,
per cent; ``*`` marks a row the run marked: over the datapath's or the workers' budget),
the median and the largest |error|, the link rate each run chose and the calibration
goodput ratios. The default matrix:
BCube(4,1), a 2-level BCube(2,2), DCell(3,1), DCell(2,1), Jellyfish(16,4,3) seeds 0 and 1,
each at 1 MB and 0.25 MB, every scheduler the emulation runs by default. Goals (issue 14):
median <= 3 %, max <= 10 %, no row over either budget. It also prints the median and the largest
|error| against the calibrated model without the queue drain of full frames
(``simulated_fluid_s``, ``simulator.frames``). Prints figures only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

#: name -> emulation.run topology flags.
INSTANCES = {
    "bcube41": ["--topo", "bcube", "--n", "4", "--k", "1"],
    "bcube22": ["--topo", "bcube", "--n", "2", "--k", "2"],
    "dcell31": ["--topo", "dcell", "--n", "3", "--k", "1"],
    "dcell21": ["--topo", "dcell", "--n", "2", "--k", "1"],
    "jelly-s0": ["--topo", "jellyfish", "--seed", "0"],
    "jelly-s1": ["--topo", "jellyfish", "--seed", "1"],
}


def main() -> int:
    """Run the emulation per instance and size and print the matrix."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", default=",".join(INSTANCES),
                        help=f"comma list of {', '.join(INSTANCES)}")
    parser.add_argument("--sizes", default="1,0.25", help="comma list of MB per server")
    parser.add_argument("--scheduler", default=None, help="comma list (default: the run's)")
    args = parser.parse_args()
    unknown = [i for i in args.instances.split(",") if i not in INSTANCES]
    if unknown:
        parser.error(f"unknown instance {unknown[0]!r}; choose from {', '.join(INSTANCES)}")
    cells: dict[tuple[str, str], dict[str, str]] = {}
    errors, fluid_errors, ratios, schedulers = [], [], [], []
    for name in args.instances.split(","):
        for size in args.sizes.split(","):
            with tempfile.TemporaryDirectory() as tmp:
                cmd = [sys.executable, "-m", "emulation.run", *INSTANCES[name], "--size-mb",
                       size, "--json", "--out", str(Path(tmp) / "run")]
                if args.scheduler:
                    cmd += ["--scheduler", args.scheduler]
                done = subprocess.run(cmd, capture_output=True, text=True)
            if not done.stdout.strip():
                print(f"{name} {size} MB: run failed (status {done.returncode}): "
                      f"{done.stderr.strip().splitlines()[-1:]}")
                continue
            doc = json.loads(done.stdout)
            cal = doc.get("calibration") or {}
            if cal:
                ratios.append(cal["goodput_ratio"])
            row = cells.setdefault((name, size), {})
            for r in doc["schedulers"]:
                if r["scheduler"] not in schedulers:
                    schedulers.append(r["scheduler"])
                if r.get("error_pct") is None:
                    row[r["scheduler"]] = "fail"
                    continue
                over = r["scheduler"] in (doc.get("table") or {}).get("marked", [])
                errors.append(abs(r["error_pct"]))
                fluid_errors.append(abs(100 * (r["emulated_s"] / r["simulated_fluid_s"] - 1)))
                row[r["scheduler"]] = f"{r['error_pct']:+.1f}" + ("*" if over else "") + \
                    ("" if r["verified"] else "!")
            print(f"{doc['name']} {size} MB at {doc['bw_mbps']:g} Mbit/s "
                  f"({(doc.get('rate') or {}).get('why', '')}), goodput ratio "
                  f"{cal.get('goodput_ratio', float('nan')):.3f}", flush=True)
    head = f"{'instance':<10} {'MB':>5} " + " ".join(f"{s:>11}" for s in schedulers)
    print("\n" + head + "\n" + "-" * len(head))
    for (name, size), row in cells.items():
        print(f"{name:<10} {size:>5} " + " ".join(f"{row.get(s, '-'):>11}" for s in schedulers))
    print("error % = emulated / calibrated simulated - 1; * over a budget; ! not verified")
    if errors:
        print(f"|error| over {len(errors)} rows: median {statistics.median(errors):.1f} %, "
              f"max {max(errors):.1f} % (goals: median <= 3 %, max <= 10 %); against the "
              f"calibrated model without the queue drain (simulated_fluid_s): median "
              f"{statistics.median(fluid_errors):.1f} %, max {max(fluid_errors):.1f} %")
    if ratios:
        print(f"goodput / configured rate: min {min(ratios):.3f}, median "
              f"{statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
