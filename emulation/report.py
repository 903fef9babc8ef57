"""Sim-vs-emu reports: the table, results.json, report.html and the PNG plots of an
emulation run.

``python -m emulation.report DIR`` rebuilds DIR/report.html (``simulator.page``) from
DIR/results.json.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any


def error_pct(emulated_s: float, simulated_s: float) -> float:
    """Signed relative error of the emulated makespan against the simulated one, in percent."""
    return 100.0 * (emulated_s / simulated_s - 1.0)


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median absolute raw and calibrated error over the verified rows."""
    done = [r for r in rows if r.get("verified")]
    if not done:
        return {"median_abs_error_pct": None, "median_abs_error_raw_pct": None}
    return {
        "median_abs_error_pct": statistics.median(abs(r["error_pct"]) for r in done),
        "median_abs_error_raw_pct": statistics.median(abs(r["error_raw_pct"]) for r in done),
    }


def marks(rows: list[dict[str, Any]], load_budget_mbps: float | None = None,
          bw_mbps: float | None = None, transfer_budget: float | None = None
          ) -> tuple[list[str], list[str]]:
    """The schedulers whose ``offered_load_mbps`` passes ``load_budget_mbps`` or whose
    ``offered_transfers_per_s`` passes ``transfer_budget`` (marked ``*`` in the table), and
    the table's footnotes: that CPU, not only the links, may have bounded them, and which
    ``--bw-mbps`` (scaled from the run's ``bw_mbps``) would keep every row within the
    budgets."""
    marked: dict[str, None] = {}
    notes, scale = [], 1.0
    for key, cap, text in (
            ("offered_load_mbps", load_budget_mbps,
             "offered load above the ~{cap:.0f} Mbit/s budget measured for this machine's "
             "datapath"),
            ("offered_transfers_per_s", transfer_budget,
             "more transfers per second than the ~{cap:.0f} the hosts' workers complete "
             "faithfully here")):
        if cap is None:
            continue
        over = {r["scheduler"]: r.get(key, 0.0) for r in rows if r.get(key, 0.0) > cap}
        if over:
            marked.update(dict.fromkeys(over))
            notes.append(text.format(cap=cap))
            scale = min(scale, cap / max(over.values()))
    if not marked:
        return [], []
    note = "* " + " or ".join(notes) + ": CPU, not only the links, may have bounded these runs"
    if bw_mbps:
        note += f"; for a faithful run use --bw-mbps {_round_down(bw_mbps * scale):g}"
    return list(marked), [note]


def calibration_note(calibration: dict | None, hop_latency_s: float = 0.0,
                     failures: bool = False) -> list[str]:
    """The footnote naming what the simulated column adds to the links' rates: the
    ``calibration`` (results.json's) factors, ``hop_latency_s`` per link crossed and, with
    ``failures``, the pause of a flow a failing link cut; none without a calibration.

    >>> [note] = calibration_note({"goodput_ratio": 0.99, "startup_s": 0.002,
    ...                               "frame_bytes": 9014})
    >>> note[:80]
    'simulated (error %): links at 0.990 of their rate, a fixed cost of 2.0 ms per tr'
    """
    if not calibration:
        return []
    parts = [f"links at {calibration['goodput_ratio']:.3f} of their rate",
             f"a fixed cost of {1e3 * calibration['startup_s']:.1f} ms per transfer"]
    if hop_latency_s:
        parts.append(f"{1e3 * hop_latency_s:g} ms per link crossed")
    if calibration.get("frame_bytes"):
        parts.append(f"queues draining {calibration['frame_bytes']:g}-byte frames "
                     "(simulator.frames)")
    if failures:
        parts.append(f"a flow cut by a failing link pausing {calibration['failover_s']:.2f} s")
    return [f"simulated (error %): {', '.join(parts)}; raw err %: links at their rate alone"]


def table(rows: list[dict[str, Any]], load_budget_mbps: float | None = None,
          bw_mbps: float | None = None, notes: list[str] | None = None,
          transfer_budget: float | None = None) -> str:
    """The run's table: scheduler | simulated s | emulated s | error % | verified, with the
    ``marks`` and footnotes of ``load_budget_mbps`` and ``transfer_budget``, then ``notes``
    (``calibration_note``)."""
    head = f"{'scheduler':<12} {'simulated s':>11} {'emulated s':>10} {'error %':>8} " \
           f"{'raw err %':>9}  verified"
    lines = [head, "-" * len(head)]
    marked, footnotes = marks(rows, load_budget_mbps, bw_mbps, transfer_budget)
    for r in rows:
        emu = f"{r['emulated_s']:.3f}" if r.get("emulated_s") is not None else "-"
        err = f"{r['error_pct']:+.1f}" if r.get("error_pct") is not None else "-"
        err += "*" if r["scheduler"] in marked else " "
        raw = f"{r['error_raw_pct']:+.1f}" if r.get("error_raw_pct") is not None else "-"
        verdict = "yes" if r.get("verified") else f"NO: {r.get('failure', 'not run')}"
        lines.append(f"{r['scheduler']:<12} {r['simulated_s']:>11.3f} {emu:>10} {err:>9}"
                     f"{raw:>9}  {verdict}")
    return "\n".join(lines + footnotes + list(notes or ()))


def _round_down(value: float) -> float:
    """``value`` rounded down to two significant digits, and at least 0.1."""
    if value < 0.1:
        return 0.1
    digits = 1 - math.floor(math.log10(value))
    return round(math.floor(value * 10.0**digits + 1e-9) / 10.0**digits, max(digits, 0))


def write_json(path: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` as indented JSON."""
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")


def write_page(doc: dict[str, Any], path: Path) -> Path:
    """Write the run's report page (``simulator.page``) to ``path``; returns ``path``."""
    from simulator.page import write

    return write(doc, path)


def plot(out: Path, rows: list[dict[str, Any]], title: str) -> list[Path]:
    """Draw makespan.png (simulated vs emulated per scheduler) and one timeline per scheduler
    (every transfer's simulated and emulated start-to-arrival interval). Returns the files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection

    files = []
    done = [r for r in rows if r.get("emulated_s") is not None]
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(rows)), 3.6))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["simulated_s"] for r in rows], 0.4, label="simulated",
           color="#4c78a8")
    ax.bar([x + 0.2 for x in xs], [r.get("emulated_s") or 0.0 for r in rows], 0.4,
           label="emulated", color="#f58518")
    for x, r in zip(xs, rows, strict=True):
        if r.get("error_pct") is not None:
            ax.annotate(f"{r['error_pct']:+.1f}%", (x + 0.2, r["emulated_s"]), ha="center",
                        va="bottom", fontsize=7)
    ax.set_xticks(list(xs), [r["scheduler"] for r in rows])
    ax.set_ylabel("AllReduce completion (s)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    files.append(out / "makespan.png")
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)
    for r in done:
        fig, ax = plt.subplots(figsize=(7.0, 3.8))
        ids = sorted(int(k) for k in r["emulated"]["start_s"])
        sim, emu = r["simulated"], r["emulated"]
        # one collection of segments, simulated and emulated interleaved by transfer (as
        # many line artists as transfers draw slowly on large schedules)
        ax.add_collection(LineCollection(
            [[(result["start_s"][str(t)], y + dy), (result["finish_s"][str(t)], y + dy)]
             for y, t in enumerate(ids) for result, dy in ((sim, -0.15), (emu, 0.15))],
            colors=["#4c78a8", "#f58518"] * len(ids), linewidths=1.2))
        ax.plot([], [], color="#4c78a8", label="simulated")
        ax.plot([], [], color="#f58518", label="emulated")
        ax.autoscale_view()
        ax.set_xlabel("seconds after the start")
        ax.set_ylabel("transfer (id order)")
        ax.set_title(f"{title}: {r['scheduler']} timeline")
        ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        files.append(out / f"timeline-{r['scheduler']}.png")
        fig.savefig(files[-1], dpi=110)
        plt.close(fig)
    return files


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m emulation.report``."""
    from simulator.page import read

    parser = argparse.ArgumentParser(
        prog="python -m emulation.report",
        description="Rebuild the report page of a run from its results.json.")
    parser.add_argument("dir", type=Path, help="a run's directory (or its results.json)")
    parser.add_argument("--out", type=Path, default=None,
                        help="where to write the page (default DIR/report.html)")
    args = parser.parse_args(argv)
    doc = read(args.dir)
    where = args.dir if args.dir.is_dir() else args.dir.parent
    page = write_page(doc, args.out or where / "report.html")
    print(f"{page} ({page.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    from topology.cli import run

    try:
        run(main, "python -m emulation.report")
    except OSError as exc:
        sys.stderr.write(f"python -m emulation.report: error: {exc}\n")
        raise SystemExit(2) from None
