"""Emulation scale: the largest network on which a verified AllReduce runs on this machine.

``sudo python bench/scale.py [--topo bcube,dcell,jellyfish] [--scheduler ring] [--size-mb 0.2]``
runs ``python -m emulation.run --json`` on growing instances of each family, smallest first,
and prints per instance: servers, datapaths (OVS bridges), the set-up times (network up,
controller connected, base rules installed), the emulated and simulated completion, whether the
sums and route counters were verified, and the wall time. A family stops at its first instance
that fails or passes ``--max-wall-s``; the last line names the largest verified instance per
family. Prints figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import topology as tp  # noqa: E402
from topology import from_spec  # noqa: E402

#: Growing instances per family (emulation.run topology flags), smallest first.
LADDER = {
    "bcube": [["--n", "4", "--k", "1"], ["--n", "5", "--k", "1"], ["--n", "6", "--k", "1"],
              ["--n", "3", "--k", "2"], ["--n", "7", "--k", "1"], ["--n", "8", "--k", "1"],
              ["--n", "4", "--k", "2"]],
    "dcell": [["--n", "3", "--k", "1"], ["--n", "4", "--k", "1"], ["--n", "5", "--k", "1"],
              ["--n", "6", "--k", "1"], ["--n", "7", "--k", "1"], ["--n", "2", "--k", "2"]],
    "jellyfish": [[f"--switches={s}", "--ports=4", "--uplinks=3", "--seed=0"]
                  for s in (16, 32, 48, 64, 96)],
}


def main() -> int:
    """Run the ladder of each family and print what ran, verified, and how long set-up took."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topo", default=",".join(LADDER), help="comma list of families")
    parser.add_argument("--scheduler", default="ring", help="scheduler to run (default ring)")
    parser.add_argument("--size-mb", default="0.2", help="buffer per server in MB (default 0.2)")
    parser.add_argument("--max-wall-s", type=float, default=600.0,
                        help="stop a family after an instance that took longer (default 600)")
    args = parser.parse_args()
    largest: dict[str, str] = {}
    for topo in args.topo.split(","):
        if topo not in LADDER:
            parser.error(f"unknown family {topo!r}; choose from {', '.join(LADDER)}")
        for flags in LADDER[topo]:
            with tempfile.TemporaryDirectory() as tmp:
                cmd = [sys.executable, "-m", "emulation.run", "--topo", topo, *flags, "--json",
                       "--scheduler", args.scheduler, "--size-mb", args.size_mb,
                       "--no-calibrate", "--out", str(Path(tmp) / "run")]
                started = time.monotonic()
                done = subprocess.run(cmd, capture_output=True, text=True)
                wall_s = time.monotonic() - started
            label = f"{topo} {' '.join(flags)}"
            if not done.stdout.strip():
                tail = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
                print(f"{label}: FAILED (status {done.returncode}, {wall_s:.0f} s): {tail[0]}")
                break
            doc = json.loads(done.stdout)
            [row] = doc["schedulers"]
            servers, datapaths = _size(doc["topology"])
            setup = ", ".join(f"{k} {v:.1f} s" for k, v in doc["setup_s"].items())
            emulated = (f"{row['emulated_s']:.2f} s" if row["emulated_s"] is not None
                        else "not measured")
            print(f"{doc['name']}: {servers} servers, {datapaths} datapaths; set-up "
                  f"{setup}; {args.scheduler} emulated {emulated}, simulated "
                  f"{row['simulated_s']:.2f} s (raw: no calibration), verified "
                  f"{row['verified']}; wall {wall_s:.0f} s",
                  flush=True)
            if not row["verified"]:
                print(f"  failure: {row.get('failure')}")
                break
            largest[topo] = f"{doc['name']} ({servers} servers, {datapaths} datapaths)"
            if wall_s > args.max_wall_s:
                print(f"  {topo}: stopping, that took more than {args.max_wall_s:.0f} s")
                break
    for topo, name in largest.items():
        print(f"largest verified {topo}: {name}")
    return 0


def _size(spec: dict) -> tuple[int, int]:
    """Servers and OpenFlow datapaths of the emulated network of a topology spec (a server
    that relays has a datapath of its own)."""
    graph = from_spec(spec)
    servers = len(tp.servers(graph))
    switches = graph.number_of_nodes() - servers
    return servers, switches + (servers if tp.relays(graph) else 0)


if __name__ == "__main__":
    sys.exit(main())
