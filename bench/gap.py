"""Where a run's extra time goes: emulated against simulated, wave by wave.

``python bench/gap.py RUN_DIR [--scheduler multitree] [--waves 12]`` reads an
``emulation.run`` results.json and, for one scheduler, groups its transfers into waves (those
the calibrated simulator starts at the same millisecond: the steps of a tree or ring schedule)
and prints per wave: its transfers, the simulated start and finish, the emulated starts and
finishes (median and last), and how much later than simulated the wave's last transfer
arrived (the lag), so that the growth of the lag from wave to wave shows where the emulation
loses time: at the start, inside waves (its links moved less than the fluid model says), or at
the tails (a wave's last transfer behind its median). Then the distribution of the
transfers' emulated / simulated durations. Figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a run directory (or its results.json)")
    parser.add_argument("--scheduler", default="multitree")
    parser.add_argument("--waves", type=int, default=12, help="waves printed (default 12)")
    args = parser.parse_args()
    path = args.run / "results.json" if args.run.is_dir() else args.run
    try:
        doc = json.loads(path.read_text())
        row = next(r for r in doc["schedulers"] if r["scheduler"] == args.scheduler)
        sim, emu = row["simulated"], row["emulated"]
    except (OSError, ValueError, KeyError, StopIteration) as exc:
        sys.exit(f"bench/gap.py: no {args.scheduler} row with timelines in {path}: {exc!r}")
    ids = [str(t[0]) for t in row["transfer_list"]]
    waves: dict[float, list[str]] = defaultdict(list)
    for i in ids:
        waves[round(sim["start_s"][i], 3)].append(i)
    print(f"{args.scheduler}: {len(ids)} transfers in {len(waves)} waves; simulated "
          f"{sim['makespan_s']:.3f} s, emulated {emu['makespan_s']:.3f} s "
          f"({100 * (emu['makespan_s'] / sim['makespan_s'] - 1):+.1f} %)")
    print(f"{'wave':>4} {'n':>5} {'sim start':>9} {'sim end':>8} {'emu start':>9} "
          f"{'(last)':>7} {'emu end':>8} {'(last)':>7} {'lag':>7} {'tail':>6}")
    for k, start in enumerate(sorted(waves)[:args.waves]):
        group = waves[start]
        s_end = max(sim["finish_s"][i] for i in group)
        e_starts = [emu["start_s"][i] for i in group]
        e_ends = [emu["finish_s"][i] for i in group]
        med_end = statistics.median(e_ends)
        print(f"{k + 1:>4} {len(group):>5} {start:>9.3f} {s_end:>8.3f} "
              f"{statistics.median(e_starts):>9.3f} {max(e_starts):>7.3f} {med_end:>8.3f} "
              f"{max(e_ends):>7.3f} {max(e_ends) - s_end:>+7.3f} {max(e_ends) - med_end:>6.3f}")
    ratio = sorted((emu["finish_s"][i] - emu["start_s"][i])
                   / max(sim["finish_s"][i] - sim["start_s"][i], 1e-9) for i in ids)
    q = [ratio[int(p * (len(ratio) - 1))] for p in (0.1, 0.5, 0.9)]
    print(f"transfer durations, emulated / simulated: p10 {q[0]:.3f}, median {q[1]:.3f}, "
          f"p90 {q[2]:.3f}")
    print("lag: the wave's last emulated arrival minus its simulated end; tail: its last "
          "arrival minus its median one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
