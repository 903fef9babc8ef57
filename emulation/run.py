"""``sudo python -m emulation.run --topo {bcube,dcell,jellyfish}`` (or ``--topo-file F``):
emulate AllReduce schedules.

For each scheduler (built-in, plugin or ``--schedule`` file): build the Schedule, validate
it, simulate it, pick the link rate (``--bw-mbps auto``: within the datapath's measured
budget and the workers' budget of transfers per second), install its routes through the
controller, run one socket worker per server in the Mininet hosts under the network
conditions (background flows, failing links), verify every sum and the route counters,
then print the table scheduler | simulated s | emulated s | error % | verified.
Writes results.json, report.html (``simulator.page``) and PNG plots into --out. Everything
started is torn down, also on errors, Ctrl-C and SIGTERM; ``--clean`` removes what a crashed
run left behind.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import networkx as nx

from emulation.budget import BUDGET_SHARE, cached_budget, choose_rate, measure_forwarding
from emulation.calibration import calibrate
from emulation.features import DATAPATHS, check_link_effects, choose_datapath, detect
from emulation.ovs import parse_instances
from simulator import lower_bound, packing_bound, simulate
from simulator.page import SCHEMA, conditions, network, transfer_list
from simulator.page import versions as page_versions
from simulator.usage import link_load
from topology.cli import ArgumentParser, add_topology_args, graph_from_args, run
from topology.links import link_failures, relays, scaled
from traffic.collectives import BASELINES
from traffic.plugins import make_schedule, resolve
from traffic.runner import WorkerError, time_scale
from traffic.schedule import (
    DTYPES,
    Schedule,
    ScheduleError,
    buffer_bytes,
    read_schedule,
    routes,
    validate,
)

PROG = "python -m emulation.run"

#: Defaults sized to finish in about a minute on a 2-core laptop VM.
EMULATION_DEFAULTS = {
    "bcube": {"n": 4, "k": 1},
    "dcell": {"n": 3, "k": 1},
    "jellyfish": {"switches": 16, "ports": 4, "uplinks": 3, "seed": 0},
}
SCHEDULERS = (*BASELINES, "drl")
#: Run when --scheduler is not given. ``packing`` is left out: its thousands of small
#: messages (BCube(4,1) at 1 MB: 5 760) have not been measured for fidelity on this datapath.
DEFAULT_SCHEDULERS = tuple(s for s in SCHEDULERS if s != "packing")


class InvalidSchedule(RuntimeError):
    """A scheduler produced a schedule that validate() rejects: a bug, not bad input."""


class Interrupted(Exception):
    """SIGTERM arrived: unwind so that the network is torn down."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = ArgumentParser(
        prog=PROG,
        description="Emulate AllReduce schedules on a Mininet network through the SDN "
                    "controller and compare them with the flow-level simulator.")
    add_topology_args(parser, defaults=EMULATION_DEFAULTS, auto_rate=True)
    parser.add_argument("--scheduler", default=None,
                        help="one or a comma list of " + ", ".join(SCHEDULERS)
                             + ", a plugin's entry point name or package.module:function "
                             "(default: all built-in ones but packing, whose thousands of "
                             "small messages are opt-in; none when --schedule is given)")
    parser.add_argument("--schedule", action="append", default=[], metavar="FILE",
                        help="also run this Schedule JSON file (repeatable); it is validated "
                             "against the topology first")
    parser.add_argument("--size-mb", type=float, default=1.0,
                        help="buffer per server in MB (10^6 bytes; default 1)")
    parser.add_argument("--dtype", default="float32",
                        choices=list(DTYPES),
                        help="element type of the buffer (default float32)")
    parser.add_argument("--out", type=Path, default=None,
                        help="directory for results.json and plots (default runs/<topo>-<time>)")
    parser.add_argument("--json", action="store_true",
                        help="print results.json to stdout (progress goes to stderr)")
    parser.add_argument("--cli", action="store_true",
                        help="open the Mininet CLI with the first scheduler's routes installed "
                             "(for labs; nothing is measured)")
    parser.add_argument("--clean", action="store_true",
                        help="remove namespaces, bridges, links and processes a crashed run "
                             "left behind, then exit")
    parser.add_argument("--timeout-s", type=float, default=120.0,
                        help="a scheduler's run fails when a transfer is not done by then "
                             "(default 120)")
    parser.add_argument("--no-calibrate", action="store_true",
                        help="skip calibration (the single-flow goodput probe and the fixed-cost "
                             "probe): the simulator then uses the configured rates, no fixed "
                             "cost and no queue drain")
    parser.add_argument("--datapath", default="user", choices=DATAPATHS,
                        help="Open vSwitch datapath: user (the tested default), kernel (needs "
                             "the openvswitch kernel module) or auto (kernel where its module "
                             "loads)")
    parser.add_argument("--ovs-instances", default="auto", metavar="N|auto",
                        help="Open vSwitch instances the network's bridges are spread over, "
                             "each forwarding on a core of its own: auto (the default) is one "
                             "per core but one with the userspace datapath (1 on 2 cores), 1 "
                             "with the kernel's")
    parser.add_argument("--delay-ms", type=float, default=None,
                        help="one-way delay of every link, ms (netem: needs the sch_netem "
                             "kernel module, refused without it); the simulator adds it per "
                             "link crossed")
    parser.add_argument("--loss-pct", type=float, default=None,
                        help="random loss of every link, per cent (netem, as --delay-ms)")
    parser.add_argument("--of-port", type=int, default=6653, help="OpenFlow port (127.0.0.1)")
    parser.add_argument("--api-port", type=int, default=8080,
                        help="controller HTTP API port (127.0.0.1)")
    return parser.parse_args(argv)


def choose_schedulers(text: str | None, files: bool = False) -> tuple[list[str], bool]:
    """The schedulers asked for, and whether the user named them (else: all built-in ones
    but packing, or none when schedule ``files`` are given)."""
    if text is None:
        return ([] if files else list(DEFAULT_SCHEDULERS)), False
    names = [s.strip() for s in text.split(",") if s.strip()]
    for name in names:
        resolve(name)  # ValueError naming an unknown scheduler
    if not names:
        raise ValueError(f"--scheduler {text!r} names no scheduler")
    return list(dict.fromkeys(names)), True


def offered_load_mbps(schedule: Schedule, graph: nx.Graph, makespan_s: float) -> float:
    """Average traffic the emulated datapaths forward while the schedule runs (bytes times
    the number of datapaths each crosses, over the simulated makespan)."""
    relay = relays(graph)
    bits = 0.0
    for t in schedule.transfers:
        hops = sum(1 for v in t.path if relay or graph.nodes[v]["role"] == "switch")
        bits += 8.0 * t.size_bytes(schedule.dtype) * hops
    return bits / makespan_s / 1e6


def offered_transfers_per_s(schedule: Schedule, makespan_s: float) -> float:
    """Transfers the hosts' workers complete per second on average while the schedule runs
    (over the simulated makespan)."""
    return len(schedule.transfers) / makespan_s if makespan_s > 0 else 0.0


def progress(message: str) -> None:
    """One progress line on stderr."""
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


def prepare(args: argparse.Namespace) -> tuple[nx.Graph, int, list[dict[str, Any]]]:
    """Everything that needs no network: topology, schedules, validation, simulation."""
    args.features = detect()
    args.delay_ms, args.loss_pct = check_link_effects(args.delay_ms, args.loss_pct,
                                                      args.features)
    args.datapath = choose_datapath(args.datapath, args.features)
    args.ovs_instances = parse_instances(str(args.ovs_instances), args.datapath)
    if not args.timeout_s > 0:
        raise ValueError(f"--timeout-s must be > 0, got {args.timeout_s:g}")
    time_scale()  # a bad ARTB_TIME_SCALE is refused here, not after the network is up
    graph = graph_from_args(args, EMULATION_DEFAULTS)
    size_bytes, plans = plan_all(args, graph)
    return graph, size_bytes, plans


def plan_all(args: argparse.Namespace, graph: nx.Graph) -> tuple[int, list[dict[str, Any]]]:
    """Every scheduler's (and schedule file's) Schedule on ``graph``, validated and
    simulated in the bandwidth model."""
    size_bytes = buffer_bytes(args.size_mb, args.dtype)
    names, explicit = choose_schedulers(args.scheduler, bool(args.schedule))
    jobs: list[tuple[str, Schedule | None]] = [(name, None) for name in names]
    for path in args.schedule:
        schedule = read_schedule(path)
        jobs.append((schedule.algo or Path(path).stem, schedule))
    plans = []
    for name, schedule in jobs:
        if schedule is None:
            try:
                schedule = make_schedule(name, graph, size_bytes, args.dtype)
            except (ImportError, ValueError, FileNotFoundError) as exc:
                if explicit:
                    raise ValueError(f"scheduler {name}: {exc}") from None
                progress(f"{name}: not available ({exc}); skipped")
                continue
        try:
            validate(schedule, graph)
        except ScheduleError as exc:
            if name in SCHEDULERS:
                raise InvalidSchedule(f"scheduler {name} produced an invalid schedule: {exc}")\
                    from None
            raise ValueError(f"schedule {name} does not fit {graph.graph['name']}: {exc}") \
                from None
        sim = simulate(graph, schedule)
        plans.append({"scheduler": name, "schedule": schedule, "raw": sim})
        progress(f"{name}: {len(schedule.transfers)} transfers, simulated "
                 f"{sim.makespan_s:.3f} s")
    names = [p["scheduler"] for p in plans]
    if len(set(names)) != len(names):
        raise ValueError(f"two schedules are both named {max(names, key=names.count)!r}; give "
                         "one file another algo name")
    return size_bytes, plans


def settle_rate(args: argparse.Namespace, graph: nx.Graph, size_bytes: int,
                plans: list[dict[str, Any]], budget: dict[str, float]
                ) -> tuple[nx.Graph, int, list[dict[str, Any]], dict[str, Any]]:
    """The graph and plans at the link rate the run uses, and why: the asked rate, or with
    ``--bw-mbps auto`` the graph's rate lowered (every link in proportion) until every
    plan's offered load fits ``budget["budget_mbps"]`` and its offered transfers per second
    fit ``budget["budget_transfers_per_s"]`` (``emulation.budget.choose_rate``; both grow
    in proportion to the rate, measured on the bandwidth-only simulation)."""
    rate = float(graph.graph["bw_mbps"])
    if args.bw_mbps != "auto":
        return graph, size_bytes, plans, {
            "bw_mbps": rate, "asked": args.bw_mbps, "why": "asked on the command line"}
    limits = []  # (rate it allows, what, unit, budget, per-Mbit/s loads)
    for what, unit, cap, load in (
            ("make the datapaths forward", "Mbit/s", budget["budget_mbps"],
             lambda p: offered_load_mbps(p["schedule"], graph, p["raw"].makespan_s)),
            ("have the workers complete", "transfers/s",
             budget.get("budget_transfers_per_s"),
             lambda p: offered_transfers_per_s(p["schedule"], p["raw"].makespan_s))):
        if cap is not None:  # (choose_rate refuses a budget that is not > 0)
            loads = {p["scheduler"]: load(p) / rate for p in plans}
            limits.append((choose_rate(loads, cap), what, unit, cap, loads))
    allowed, what, unit, cap, loads = min(limits, key=lambda item: item[0])
    chosen = min(rate, allowed)
    worst = max(loads, key=loads.get)
    if chosen >= rate * (1 - 1e-9):  # (a scaled rate may differ in the last bits)
        why = f"{rate:g} Mbit/s keeps every scheduler within the budgets (" + "; ".join(
            f"{'datapaths' if unit_ == 'Mbit/s' else 'workers'}: "
            f"{max(loads_, key=loads_.get)} {max(loads_.values()) * rate:.0f} of "
            f"{cap_:.0f} {unit_}" for _, _, unit_, cap_, loads_ in limits) + ")"
        return graph, size_bytes, plans, {"bw_mbps": rate, "asked": "auto", "why": why}
    why = (f"{worst} would {what} {loads[worst] * rate:.0f} {unit} at {rate:g} Mbit/s, over "
           f"the {cap:.0f} {unit} budget; at {chosen:g} Mbit/s about "
           f"{loads[worst] * chosen:.0f}")
    progress(f"link rate: {why}")
    slower = scaled(graph, chosen / rate)
    size_bytes, plans = plan_all(args, slower)
    # A scheduler that plans for the rate (drl) may offer more at the lower one: settle again.
    again = settle_rate(args, slower, size_bytes, plans, budget)
    if again[0] is not slower:  # lowered once more
        return again[:3] + ({**again[3], "why": f"{why}; re-planned there, {again[3]['why']}"},)
    return slower, size_bytes, plans, {"bw_mbps": chosen, "asked": "auto", "why": why}


def emulate(args: argparse.Namespace, graph: nx.Graph, size_bytes: int,
            plans: list[dict[str, Any]], out: Path) -> dict[str, Any]:
    """Bring the network up, run every plan, tear everything down; return results.json."""
    from emulation.net import RTO_MIN_MS, EmulatedNetwork

    rows = []
    doc: dict[str, Any] = {}
    started = time.monotonic()
    progress(f"building {graph.graph['name']} in Mininet (OVS {args.datapath}space datapath"
             + (f", {args.ovs_instances} instances" if args.ovs_instances > 1 else "")
             + (f", links {args.delay_ms:g} ms" if args.delay_ms else "")
             + (f", {args.loss_pct:g} % loss" if args.loss_pct else "") + ")")
    hop_s = args.delay_ms / 1e3
    with EmulatedNetwork(graph, workdir=out / "net", of_port=args.of_port,
                         api_port=args.api_port, datapath=args.datapath,
                         ovs_instances=args.ovs_instances,
                         delay_ms=args.delay_ms, loss_pct=args.loss_pct) as net:
        progress("network up, controller connected, base rules in: "
                 + ", ".join(f"{k} {v:.1f} s" for k, v in net.timings.items()))
        if args.cli:
            first = plans[0]
            net.client.put_routes(first["schedule"])
            progress(f"routes of {first['scheduler']} installed; opening the Mininet CLI "
                     "(exit it to tear the network down)")
            net.cli()
            return {}
        # Without calibration a flow cut by a failing link waits the hosts' minimum
        # retransmission timeout; the calibration measures the timeout of a loaded flow.
        goodput, startup_s, probe, failover_s = 1.0, 0.0, None, RTO_MIN_MS / 1e3
        frame_bytes = 0
        addresses = {s: net.ip(s) for s in net.servers}
        # Every server's worker starts now and imports while the calibration's flow runs (a
        # worker is idle once started), not when the first schedule needs it.
        net.workers.get(net.servers)

        if not args.no_calibrate:
            probe = calibrate(net, graph, out / "workers", args.timeout_s, hop_s)
            goodput, failover_s = probe["goodput_ratio"], probe["failover_s"]
            startup_s, frame_bytes = probe["startup_s"], probe["frame_bytes"]
            progress(f"calibration: one flow on a {probe['configured_mbps']:g} Mbit/s link "
                     f"moved {probe['measured_mbps']:.2f} Mbit/s (factor {goodput:.3f}); its "
                     f"round trip {1e3 * probe['srtt_s']:.0f} ms, retransmission timeout "
                     f"{1e3 * failover_s:.0f} ms")
            progress(f"calibration: a transfer's fixed cost (connect, frame, acknowledge) is "
                     f"{1e3 * startup_s:.1f} ms")

        failures = link_failures(graph)
        for i, plan in enumerate(plans, 1):
            name, schedule, raw = plan["scheduler"], plan["schedule"], plan["raw"]
            costs = {"goodput": goodput, "startup_s": startup_s, "hop_latency_s": hop_s,
                     "failover_s": failover_s, "frame_bytes": frame_bytes}
            sim = simulate(graph, schedule, **costs)
            # the calibrated model without the queue drain, to show what the frames add
            fluid = simulate(graph, schedule, **(costs | {"frame_bytes": 0.0})) \
                if frame_bytes else sim
            row: dict[str, Any] = {
                "scheduler": name, "transfers": len(schedule.transfers),
                "simulated_s": sim.makespan_s, "simulated_raw_s": raw.makespan_s,
                "simulated_fluid_s": fluid.makespan_s,
                "emulated_s": None, "error_pct": None, "error_raw_pct": None,
                "verified": False,
                "offered_load_mbps": offered_load_mbps(schedule, graph, raw.makespan_s),
                "offered_transfers_per_s": offered_transfers_per_s(schedule, raw.makespan_s),
                "transfer_list": transfer_list(schedule),
                "simulated_links": link_load(graph, schedule, **costs).to_dict(),
            }
            if row["offered_load_mbps"] > args.budget_mbps:
                progress(f"warning: {name} makes the datapaths forward about "
                         f"{row['offered_load_mbps']:.0f} Mbit/s, above the "
                         f"{args.budget_mbps:.0f} Mbit/s budget measured for this machine's "
                         "datapath; lower --bw-mbps (or leave it auto) for exact shaping")
            if args.budget_transfers_per_s and \
                    row["offered_transfers_per_s"] > args.budget_transfers_per_s:
                progress(f"warning: {name} asks the workers for about "
                         f"{row['offered_transfers_per_s']:.0f} transfers/s, above the "
                         f"{args.budget_transfers_per_s:.0f}/s they complete faithfully here; "
                         "lower --bw-mbps (or leave it auto) for a faithful run")
            progress(f"[{i}/{len(plans)}] {name}: installing {len(routes(schedule))} routes, "
                     f"running {len(addresses)} workers "
                     f"(simulated {sim.makespan_s:.2f} s)")
            try:
                run = net.run(schedule, out / "workers" / name, seed=i,
                              timeout_s=args.timeout_s,
                              say=lambda text, name=name: progress(f"{name}: {text}"))
            except WorkerError as exc:
                row["failure"] = str(exc)
                progress(f"{name}: FAILED: {exc}")
                rows.append(row | {"simulated": sim.to_dict()})
                continue
            measured, proof, sums_ok = run.result, run.route_proof, run.sums_verified
            row.update(
                emulated_s=measured.makespan_s,
                error_pct=100.0 * (measured.makespan_s / sim.makespan_s - 1.0),
                error_raw_pct=100.0 * (measured.makespan_s / raw.makespan_s - 1.0),
                sums_verified=sums_ok, routes_verified=proof["ok"],
                verified=run.verified, route_proof=proof,
                simulated=sim.to_dict(), emulated=measured.to_dict(),
                emulated_links=run.link_load.to_dict() if run.link_load else None,
            )
            if run.background_proof is not None:
                row["background_proof"] = run.background_proof
            if not proof["ok"]:
                row["failure"] = "route counters: " + proof["errors"][0]
            if run.background_proof is not None and not run.background_proof["ok"]:
                row["failure"] = "background route: " + run.background_proof["errors"][0]
            if failures:
                intact = graph.copy()
                intact.graph.pop("link_failures")
                without = simulate(intact, schedule, **(costs | {"failover_s": 0.0})
                                   ).makespan_s
                row["link_failure"] = {
                    "links": [f["link"] for f in failures],
                    "at_s": [f["at_s"] for f in failures],
                    "simulated_without_s": without,
                    "simulated_lost_s": sim.makespan_s - without,
                    "emulated_lost_s": measured.makespan_s - without,
                    "rerouted_transfers": list(sim.rerouted),
                    "failed_over_routes": proof.get("failed_over", []),
                }
                progress(f"{name}: {len(proof.get('failed_over', []))} route directions "
                         f"failed over, {len(sim.rerouted)} transfers re-routed in the "
                         f"simulator; time lost to the failure: simulated "
                         f"{sim.makespan_s - without:.3f} s, emulated "
                         f"{measured.makespan_s - without:.3f} s (vs the simulated run "
                         "without it)")
            progress(f"{name}: emulated {measured.makespan_s:.3f} s "
                     f"({row['error_pct']:+.1f}% vs simulated), sums "
                     f"{'verified' if sums_ok else 'WRONG'}, routes "
                     f"{'proven' if proof['ok'] else 'NOT proven'}")
            rows.append(row)
        net.client.delete_routes()
        doc.update(setup_s=net.timings, calibration=probe)
    doc["wall_s"] = time.monotonic() - started
    doc["rows"] = rows
    return doc


def versions() -> dict[str, str]:
    """Versions of what the run depends on."""
    out = page_versions("mininet.net", "ryu")
    try:
        ovs = subprocess.run(["ovs-vsctl", "--version"], capture_output=True, text=True,
                             timeout=5).stdout.splitlines()
        out["openvswitch"] = ovs[0].split()[-1] if ovs else "?"
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m emulation.run``."""
    args = parse_args(argv)
    if args.clean:
        from emulation.net import clean

        removed = clean()
        print(f"removed {len(removed)} leftovers" + (": " + ", ".join(removed) if removed else ""))
        return 0
    graph, size_bytes, plans = prepare(args)
    if not plans:
        raise ValueError("no scheduler is available for this topology")
    if os.geteuid() != 0:
        raise ValueError("the emulation needs root (network namespaces, Open vSwitch): "
                         f"run it as 'sudo {PROG} ...'")
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    # Absolute: the controller and the workers run with other working directories.
    stem = Path(args.topo_file).stem if args.topo_file else args.topo
    out = (args.out or Path("runs") / f"{stem}-{stamp}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.cli:  # let the CLI's host commands (ping, iperf3, net) print their output
        os.environ.setdefault("ARTB_MININET_LOG", "output")
        budget = None
    else:
        budget = cached_budget(args.datapath, lambda: measure_forwarding(
            out / "budget-probe", args.datapath, instances=args.ovs_instances),
            instances=args.ovs_instances)
        progress(f"datapath budget: {budget['budget_mbps']:.0f} Mbit/s of forwarding "
                 f"({BUDGET_SHARE:g} of the {budget['raw_mbps']:.0f} Mbit/s one flow gets "
                 f"through {'the cache' if budget['cached'] else 'a probe just now'}); "
                 f"workers' budget: {budget['budget_transfers_per_s']:.0f} transfers/s")
        graph, size_bytes, plans, args.rate = settle_rate(args, graph, size_bytes, plans,
                                                          budget)
    args.budget_mbps = budget["budget_mbps"] if budget else None
    args.budget_transfers_per_s = budget["budget_transfers_per_s"] if budget else None

    def on_sigterm(signum: int, frame: Any) -> None:
        raise Interrupted()

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        doc = emulate(args, graph, size_bytes, plans, out)
    except Interrupted:
        progress("terminated: the network has been torn down; no result was written")
        return 143
    if args.cli:
        return 0
    from emulation.report import (
        calibration_note,
        marks,
        plot,
        summarise,
        table,
        write_json,
        write_page,
    )

    rows = doc.pop("rows")
    marked, footnotes = marks(rows, args.budget_mbps, graph.graph["bw_mbps"],
                              args.budget_transfers_per_s)
    notes = calibration_note(doc.get("calibration"), args.delay_ms / 1e3,
                             bool(link_failures(graph)))
    result = {
        "schema": SCHEMA, "source": "emulation",
        "command": f"sudo {PROG} "
                   + shlex.join(sys.argv[1:] if argv is None else argv),
        "topology": graph.graph["spec"], "name": graph.graph["name"],
        "bw_mbps": graph.graph["bw_mbps"], "size_bytes": size_bytes, "dtype": args.dtype,
        "conditions": conditions(graph),
        "lower_bound_s": lower_bound(graph, size_bytes),
        "optimum_s": packing_bound(graph, size_bytes),
        "parameters": {k: v for k, v in vars(args).items()
                       if k not in ("features", "rate", "budget_mbps",
                                    "budget_transfers_per_s")} | {"out": str(out)},
        "budget": budget, "rate": args.rate,
        "datapath": args.datapath, "ovs_instances": args.ovs_instances,
        "features": args.features.to_dict(),
        "link_delay_ms": args.delay_ms, "link_loss_pct": args.loss_pct,
        "versions": versions(), **doc, **summarise(rows),
        "network": network(graph), "table": {"marked": marked, "footnotes": footnotes + notes},
        "schedulers": rows,
    }
    write_json(out / "results.json", result)
    files = plot(out, rows, graph.graph["name"])
    files.append(write_page(result, out / "report.html"))
    if args.json:
        print(json.dumps(result, default=str))
    else:
        print(table(rows, args.budget_mbps, graph.graph["bw_mbps"], notes,
                    args.budget_transfers_per_s))
        print(f"lower bound {result['lower_bound_s']:.3f} s, packing optimum "
              f"{result['optimum_s']:.3f} s; results in {out / 'results.json'}; "
              f"open the report {out / 'report.html'}; plots: "
              + ", ".join(f.name for f in files if f.suffix == ".png"))
    return 0 if all(r["verified"] for r in rows) else 1


if __name__ == "__main__":
    from emulation.plan import EmulationError

    try:
        run(main, PROG)
    except (InvalidSchedule, EmulationError) as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        raise SystemExit(1) from None
