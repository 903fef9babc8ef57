"""``python bench/sweep_speed.py [--points 500]``: the same simulated sweep in one process
and on Ray with two workers, in one run: both wall times (Ray's start-up included), the
ratio (goal: at least 1.8 on this 2-core machine) and the peak memory of each (this process
and everything it started: goal at most 2 GB). Figures only.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.sweep import load_spec, sweep  # noqa: E402

#: Networks, schedulers and sizes of the benchmark's points (each a few tenths of a second).
SPEC = """
name = "speed"
schedulers = ["ring", "ps-sharded", "multitree", "tree", "packing"]
sizes_mb = [1, 2, 4, 8, 16]
seeds = [{seeds}]

[[topology]]
family = "bcube"
n = [4, 5]
k = 1

[[topology]]
family = "dcell"
n = [4, 5]
k = 1

[[topology]]
family = "jellyfish"
switches = 24
ports = 5
uplinks = 3
"""


def tree_rss_bytes(root: int) -> int:
    """Resident memory of process ``root`` and all its descendants, from /proc."""
    parent: dict[int, int] = {}
    rss: dict[int, int] = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines()
                          if ":" in line)
        except OSError:
            continue
        pid = int(status.parent.name)
        parent[pid] = int(fields.get("PPid", "0").strip())
        rss[pid] = int(fields.get("VmRSS", "0 kB").split()[0]) * 1024
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack += [child for child, p in parent.items() if p == pid]
    return total


class PeakMemory:
    """Samples ``tree_rss_bytes`` of this process every 0.2 s while in the ``with`` block."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()

    def _loop(self) -> None:
        import os

        while not self._stop.wait(0.2):
            self.peak = max(self.peak, tree_rss_bytes(os.getpid()))

    def __enter__(self) -> PeakMemory:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def main() -> int:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=500,
                        help="points of the sweep (a multiple of 25, at least 125; default 500)")
    args = parser.parse_args()
    seeds = ", ".join(str(s) for s in range(max(1, args.points // 25 - 4)))
    with tempfile.TemporaryDirectory() as tmp:
        spec_file = Path(tmp) / "speed.toml"
        spec_file.write_text(SPEC.format(seeds=seeds))
        walls, peaks = {}, {}
        for mode in ("one process", "Ray, 2 workers"):
            spec = load_spec(spec_file)
            spec.out = Path(tmp) / mode.replace(" ", "-").replace(",", "")
            with PeakMemory() as memory:
                started, unix = time.monotonic(), time.time()
                run = sweep(spec, use_ray=mode != "one process", workers=2, progress=False)
                walls[mode] = time.monotonic() - started
            peaks[mode] = memory.peak
            failed = sum(1 for r in run.rows if r["status"] != "ok")
            busy = sum(float(r["seconds"]) for r in run.rows)
            first = min(float(r["started"]) for r in run.rows) - unix
            last = max(float(r["started"]) + float(r["seconds"]) for r in run.rows) - unix
            print(f"{mode:<15} {run.ran} points in {walls[mode]:6.1f} s "
                  f"({run.ran / walls[mode]:.1f} points/s; {busy:.1f} s inside the points, "
                  f"the first started after {first:.1f} s, the last ended at {last:.1f} s), "
                  f"peak memory {peaks[mode] / 2**30:.2f} GiB, {failed} failed")
    ratio = walls["one process"] / walls["Ray, 2 workers"]
    print(f"speed-up with Ray on 2 workers: {ratio:.2f} x (goal >= 1.8: "
          f"{'met' if ratio >= 1.8 else 'MISSED'}); peak memory with Ray "
          f"{peaks['Ray, 2 workers'] / 2**30:.2f} GiB (goal <= 2 GiB: "
          f"{'met' if peaks['Ray, 2 workers'] <= 2 * 2**30 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
