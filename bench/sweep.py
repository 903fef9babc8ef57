"""``python -m bench.sweep SPEC.toml``: one study — schedulers × topologies × sizes × seeds ×
scenarios, simulated (thousands of points) and emulated (tens) — into one tidy table, a
summary and plots.

The spec is a TOML file; every key is listed in ``KEYS`` and explained in docs/sweeps.md, and
an unknown key is an error. Each simulated point runs as a Ray task; each emulated point runs
``python -m emulation.run`` as a Ray task that needs the custom resource ``emulation``, which a
node that can emulate advertises once, so emulated points never overlap on one machine. Without
``--address`` Ray starts on this machine, memory-conscious (``agent.cluster.start_ray``); with
it the sweep runs on that cluster. ``--no-ray`` runs every point in this process, one after the
other.

Results go to ``OUT/points.csv``, one row per point, appended as points finish, so an
interrupted sweep restarted with the same spec skips the points already in it. At the end:
a summary table (each scheduler's makespan as a multiple of the bound, per topology and
scenario) and ``makespan.png``, ``ratio.png`` and, with emulated points, ``emu_vs_sim.png``.
"""

from __future__ import annotations

import argparse
import csv
import functools
import io
import itertools
import json
import math
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROG = "python -m bench.sweep"

#: Every key a spec may have, per table.
KEYS = {
    "": {"name", "out", "schedulers", "sizes_mb", "seeds", "dtype", "costs", "bw_mbps",
         "topology", "scenario", "emulation"},
    "topology": {"family", "file", "n", "k", "switches", "ports", "uplinks", "seed"},
    "scenario": {"name", "families", "link_rate", "fail_link", "background", "fail_link_at"},
    "emulation": {"schedulers", "sizes_mb", "families", "scenarios", "bw_mbps", "timeout_s"},
    "costs": {"startup_s", "hop_latency_s", "goodput", "failover_s", "frame_bytes"},
}
#: Columns of points.csv, in order.
COLUMNS = ("key", "kind", "topology", "family", "params", "scenario", "scheduler", "size_mb",
           "dtype", "servers", "transfers", "simulated_s", "emulated_s", "error_pct",
           "verified", "lower_bound_s", "optimum_s", "ratio_to_bound", "bw_mbps", "costs",
           "status", "error", "node", "host", "started", "seconds", "versions")
CLEAN = {"name": "clean"}


class SpecError(ValueError):
    """A spec the sweep cannot run; the message names the file and the key."""


@dataclass(frozen=True)
class Point:
    """One simulation or emulation of one scheduler on one network at one size."""

    kind: str  # "simulated" or "emulated"
    topology: dict  # {"family": ..., "params": {...}} or {"file": absolute path}
    scenario: dict  # {"name": ..., and the conditions' lists}
    scheduler: str
    size_mb: float
    dtype: str
    costs: dict = field(default_factory=dict)  # simulated points: the cost model
    bw_mbps: float | str = 10.0
    timeout_s: float = 300.0

    @property
    def label(self) -> str:
        """The network, e.g. ``bcube(n=4,k=1)`` or the file's name."""
        if "file" in self.topology:
            return Path(self.topology["file"]).name
        params = ",".join(f"{k}={v}" for k, v in self.topology["params"].items())
        return f"{self.topology['family']}({params})"

    @property
    def key(self) -> str:
        """What identifies the point in points.csv."""
        return "|".join([self.kind, self.label, self.scenario["name"], self.scheduler,
                         f"{self.size_mb:g}", self.dtype, str(self.bw_mbps)])


@dataclass
class Spec:
    """A parsed spec: the points it expands to and where their results go."""

    name: str
    out: Path
    points: list[Point]


# ---------------------------------------------------------------------------------- spec

def _check_keys(table: Any, kind: str, where: str) -> dict:
    if not isinstance(table, dict):
        raise SpecError(f"{where} must be a table")
    unknown = sorted(set(table) - KEYS[kind])
    if unknown:
        raise SpecError(f"{where} has an unknown key {unknown[0]!r} (known: "
                        f"{', '.join(sorted(KEYS[kind]))})")
    return table


def _list(value: Any, where: str, kind: type | tuple, empty: bool = False) -> list:
    items = value if isinstance(value, list) else [value]
    if not items and not empty:
        raise SpecError(f"{where} is empty")
    for item in items:
        if isinstance(item, bool) or not isinstance(item, kind):
            raise SpecError(f"{where} has {item!r}, not a {getattr(kind, '__name__', kind)}")
    return items


def _sizes(value: Any, where: str) -> list[float]:
    sizes = [float(x) for x in _list(value, where, (int, float))]
    for size in sizes:
        if not (math.isfinite(size) and size > 0):
            raise SpecError(f"{where} has {size:g}: sizes must be > 0")
    return sizes


def _schedulers(value: Any, where: str) -> list[str]:
    from traffic.plugins import resolve

    names = _list(value, where, str)
    for name in names:
        try:
            resolve(name)
        except (ValueError, ImportError) as exc:
            raise SpecError(f"{where}: {exc}") from None
    return names


def _networks(table: dict, where: str, seeds: list[int], base: Path) -> list[dict]:
    from topology import DEFAULTS, FAMILIES

    _check_keys(table, "topology", where)
    if ("family" in table) == ("file" in table):
        raise SpecError(f"{where} needs either family or file")
    if "file" in table:
        extra = sorted(set(table) - {"file"})
        if extra:
            raise SpecError(f"{where}: {extra[0]!r} does not apply to a topology file")
        path = (base / _list(table["file"], f"{where}.file", str)[0]).resolve()
        if not path.is_file():
            raise SpecError(f"{where}.file: {path} does not exist")
        return [{"file": str(path)}]
    family = table["family"]
    if family not in FAMILIES:
        raise SpecError(f"{where}.family {family!r} is not one of {', '.join(FAMILIES)}")
    names = list(DEFAULTS[family])
    extra = sorted(set(table) - {"family", *names})
    if extra:
        raise SpecError(f"{where}: {family} has no parameter {extra[0]!r} "
                        f"(it has {', '.join(names)})")
    choices = {}
    for name in names:
        if name in table:
            choices[name] = _list(table[name], f"{where}.{name}", int)
        elif name == "seed":
            choices[name] = seeds
        else:
            choices[name] = [DEFAULTS[family][name]]
    out = []
    for combo in itertools.product(*choices.values()):
        params = dict(zip(names, combo))
        out.append({"family": family, "params": params})
    return out


def _scenario(table: dict, where: str) -> dict:
    _check_keys(table, "scenario", where)
    if "name" not in table or not isinstance(table["name"], str) or not table["name"]:
        raise SpecError(f"{where} needs a name")
    out = {"name": table["name"]}
    for key in ("families", "link_rate", "fail_link", "background", "fail_link_at"):
        if key in table:
            out[key] = _list(table[key], f"{where}.{key}", str)
    return out


def _costs(value: Any, where: str) -> dict:
    from simulator import BANDWIDTH_ONLY, CALIBRATED, CostModel

    if value == "bandwidth":
        return BANDWIDTH_ONLY.kwargs()
    if value == "calibrated":
        return CALIBRATED.kwargs()
    table = _check_keys(value, "costs", where) if isinstance(value, dict) else None
    if table is None:
        raise SpecError(f"{where} must be bandwidth, calibrated or a table of "
                        f"{', '.join(sorted(KEYS['costs']))}")
    try:
        return CostModel(**{k: float(v) for k, v in table.items()}).kwargs()
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{where}: {exc}") from None


def load_spec(path: Path) -> Spec:
    """Parse and expand the spec in ``path``; SpecError naming the file and key."""
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot read it ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not TOML ({exc})") from None
    try:
        return _expand(doc, path)
    except SpecError as exc:
        raise SpecError(f"{path}: {exc}") from None


def _expand(doc: dict, path: Path) -> Spec:
    from traffic.schedule import DTYPES

    _check_keys(doc, "", "the spec")
    for key in ("schedulers", "sizes_mb", "topology"):
        if key not in doc:
            raise SpecError(f"the spec needs {key!r}")
    name = str(doc.get("name", path.stem))
    dtype = doc.get("dtype", "float32")
    if dtype not in DTYPES:
        raise SpecError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    seeds = _list(doc.get("seeds", [0]), "seeds", int)
    schedulers = _schedulers(doc["schedulers"], "schedulers")
    sizes = _sizes(doc["sizes_mb"], "sizes_mb")
    costs = _costs(doc.get("costs", "bandwidth"), "costs")
    bw = doc.get("bw_mbps", 10.0)
    if isinstance(bw, bool) or not isinstance(bw, int | float) or not bw > 0:
        raise SpecError(f"bw_mbps must be a number > 0, got {bw!r}")
    tables = doc["topology"] if isinstance(doc["topology"], list) else [doc["topology"]]
    networks = [net for i, t in enumerate(tables)
                for net in _networks(t, f"topology[{i}]", seeds, path.parent)]
    scenarios = [_scenario(t, f"scenario[{i}]") for i, t in enumerate(doc.get("scenario", []))]
    names = [s["name"] for s in scenarios]
    if len(set(names)) != len(names):
        raise SpecError(f"two scenarios are named {max(names, key=names.count)!r}")
    scenarios = scenarios or [CLEAN]

    def applies(scenario: dict, net: dict) -> bool:
        family = "file" if "file" in net else net["family"]
        return family in scenario.get("families", [family])

    points = [Point("simulated", net, sc, sched, size, dtype, costs, float(bw))
              for net in networks for sc in scenarios if applies(sc, net)
              for sched in schedulers for size in sizes]
    if "emulation" in doc:
        emu = _check_keys(doc["emulation"], "emulation", "emulation")
        e_scheds = _schedulers(emu.get("schedulers", schedulers), "emulation.schedulers")
        e_sizes = _sizes(emu["sizes_mb"], "emulation.sizes_mb") if "sizes_mb" in emu \
            else sizes
        families = _list(emu.get("families", []), "emulation.families", str, empty=True)
        only = _list(emu.get("scenarios", []), "emulation.scenarios", str, empty=True)
        for s in only:
            if s not in [sc["name"] for sc in scenarios]:
                raise SpecError(f"emulation.scenarios: no scenario is named {s!r}")
        e_bw = emu.get("bw_mbps", "auto")
        if e_bw != "auto" and (isinstance(e_bw, bool) or not isinstance(e_bw, int | float)
                               or not e_bw > 0):
            raise SpecError(f"emulation.bw_mbps must be auto or a number > 0, got {e_bw!r}")
        timeout = float(emu.get("timeout_s", 300.0))
        for net in networks:
            family = "file" if "file" in net else net["family"]
            if families and family not in families:
                continue
            for sc in scenarios:
                if (only and sc["name"] not in only) or not applies(sc, net):
                    continue
                points += [Point("emulated", net, sc, sched, size, dtype, {}, e_bw, timeout)
                           for sched in e_scheds for size in e_sizes]
    keys = [p.key for p in points]
    if len(set(keys)) != len(keys):
        raise SpecError(f"the point {max(keys, key=keys.count)!r} appears twice")
    out = Path(doc.get("out", Path("sweeps") / name))
    return Spec(name, out, points)


# -------------------------------------------------------------------------------- points

def graph_of(point: Point):
    """The point's network with its scenario applied."""
    from topology import make_graph
    from topology.cli import with_conditions
    from topology.files import read_topology

    rate = point.bw_mbps if isinstance(point.bw_mbps, int | float) else 10.0
    if "file" in point.topology:
        graph = read_topology(point.topology["file"], bw_mbps=rate)
    else:
        graph = make_graph(point.topology["family"], bw_mbps=rate, **point.topology["params"])
    args = argparse.Namespace(**{k: point.scenario.get(k, []) for k in
                                 ("link_rate", "fail_link", "background", "fail_link_at")})
    return with_conditions(graph, args)


@functools.cache
def _versions() -> str:
    from simulator.page import versions

    return json.dumps(versions("numba", "ray"))


def _base(point: Point) -> dict[str, Any]:
    family = "file" if "file" in point.topology else point.topology["family"]
    return {"key": point.key, "kind": point.kind, "topology": point.label, "family": family,
            "params": json.dumps(point.topology.get("params", {})),
            "scenario": point.scenario["name"], "scheduler": point.scheduler,
            "size_mb": point.size_mb, "dtype": point.dtype, "bw_mbps": point.bw_mbps,
            "costs": json.dumps(point.costs), "host": socket.gethostname(),
            "started": round(time.time(), 3),
            "node": _node_id(), "versions": _versions()}


def _node_id() -> str:
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return ray.get_runtime_context().get_node_id()
    return "local"


def simulate_point(point: Point) -> dict[str, Any]:
    """Simulate one point: its row of points.csv (status ``error`` and the message when the
    scheduler or the scenario does not fit the network)."""
    from simulator import lower_bound, packing_bound, simulate
    from traffic.plugins import make_schedule
    from traffic.schedule import buffer_bytes

    started = time.monotonic()
    row = _base(point)
    try:
        graph = graph_of(point)
        size = buffer_bytes(point.size_mb, point.dtype)
        schedule = make_schedule(point.scheduler, graph, size, point.dtype)
        result = simulate(graph, schedule, **point.costs)
        bound = lower_bound(graph, size, goodput=point.costs.get("goodput", 1.0))
        row.update(servers=sum(1 for _, r in graph.nodes(data="role") if r == "server"),
                   transfers=len(schedule.transfers), simulated_s=result.makespan_s,
                   lower_bound_s=bound,
                   optimum_s=packing_bound(graph, size, goodput=point.costs.get("goodput", 1.0)),
                   ratio_to_bound=result.makespan_s / bound, status="ok")
    except (ValueError, ImportError, FileNotFoundError) as exc:
        row.update(status="error", error=str(exc))
    row["seconds"] = time.monotonic() - started
    return row


def emulate_point(point: Point, out: Path) -> dict[str, Any]:
    """Emulate one point with ``python -m emulation.run`` (its run directory under
    ``out``): its row of points.csv. The run gets SIGTERM (and tears its network down) when
    this task is interrupted or its process dies."""
    started = time.monotonic()
    row = _base(point)
    where = out / "emulated" / re.sub(r"[^A-Za-z0-9._-]+", "_", point.key)
    argv = [sys.executable, "-m", "emulation.run", "--scheduler", point.scheduler,
            "--size-mb", f"{point.size_mb:g}", "--dtype", point.dtype,
            "--bw-mbps", str(point.bw_mbps), "--out", str(where), "--json",
            "--timeout-s", f"{point.timeout_s:g}"]
    if "file" in point.topology:
        argv += ["--topo-file", point.topology["file"]]
    else:
        argv += ["--topo", point.topology["family"]]
        for k, v in point.topology["params"].items():
            argv += [f"--{k}", str(v)]
    for key, flag in (("link_rate", "--link-rate"), ("fail_link", "--fail-link"),
                      ("background", "--background"), ("fail_link_at", "--fail-link-at")):
        for value in point.scenario.get(key, []):
            argv += [flag, value]
    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen(argv, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=_terminate_with_parent)
    try:
        stdout, stderr = proc.communicate()
    except BaseException:  # cancelled or interrupted: let the run tear its network down
        proc.terminate()
        proc.wait()
        raise
    try:
        doc = json.loads(stdout.strip().splitlines()[-1])
        r = doc["schedulers"][0]
        row.update(servers=len([n for n in doc["network"]["nodes"] if n["role"] == "server"]),
                   transfers=r["transfers"], simulated_s=r["simulated_s"],
                   emulated_s=r["emulated_s"], error_pct=r["error_pct"],
                   verified=r["verified"], lower_bound_s=doc["lower_bound_s"],
                   optimum_s=doc["optimum_s"], bw_mbps=doc["bw_mbps"],
                   costs=json.dumps(doc.get("calibration") or {}),
                   versions=json.dumps(doc["versions"]),
                   ratio_to_bound=(r["emulated_s"] or math.nan) / doc["lower_bound_s"],
                   status="ok" if r["verified"] else "error",
                   error=r.get("failure", ""))
    except (ValueError, KeyError, IndexError, TypeError):
        lines = (stderr or "").strip().splitlines()
        row.update(status="error", error=lines[-1] if lines else f"exit {proc.returncode}")
    row["seconds"] = time.monotonic() - started
    return row


def _terminate_with_parent() -> None:
    """In the child: SIGTERM when the process that started it dies (Linux prctl
    PR_SET_PDEATHSIG), so a Ray worker ended with its job takes its emulation.run along."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def can_emulate() -> bool:
    """Whether this machine can run an emulated point (root, Mininet, a running OVS)."""
    try:
        from emulation.plan import EmulationError, preflight

        preflight(tso=False)
    except (ImportError, EmulationError):
        return False
    return True


# --------------------------------------------------------------------------------- table

def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of points.csv (none when it does not exist); a last line cut short by an
    interruption is dropped. SpecError when the file has other columns."""
    if not path.exists():
        return []
    text = path.read_text()
    if text and not text.endswith("\n"):
        text = text[:text.rfind("\n") + 1]
    rows = list(csv.DictReader(io.StringIO(text)))
    if rows and tuple(rows[0]) != COLUMNS:
        raise SpecError(f"{path} has other columns than this sweep writes; move it away")
    return rows


def _line(row: dict[str, Any]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(
        ["" if row.get(c) is None else row.get(c) for c in COLUMNS])
    return buf.getvalue()


class Table:
    """points.csv, appended one whole line per finished point."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows = read_rows(path)
        if self.path.exists():  # drop a cut-short last line for good
            self.path.write_text("".join(_line(r) for r in [dict(zip(COLUMNS, COLUMNS)),
                                                             *self.rows]))
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(_line(dict(zip(COLUMNS, COLUMNS))))
        self.done = {r["key"] for r in self.rows}

    def add(self, row: dict[str, Any]) -> None:
        """Append ``row`` (one write, flushed to disk)."""
        with self.path.open("a") as f:
            f.write(_line(row))
            f.flush()
            os.fsync(f.fileno())
        self.rows.append({c: "" if row.get(c) is None else str(row[c]) for c in COLUMNS})
        self.done.add(row["key"])


# --------------------------------------------------------------------------------- sweep

@dataclass
class Run:
    """What ``sweep`` did."""

    out: Path
    total: int
    skipped: int
    ran: int
    wall_s: float
    rows: list[dict[str, str]]


def sweep(spec: Spec, *, address: str | None = None, workers: int | None = None,
          use_ray: bool = True, progress: bool = True) -> Run:
    """Run the spec's points not yet in ``spec.out/points.csv``; see the module docstring."""
    from tqdm import tqdm

    if use_ray:
        from agent.cluster import import_ray

        import_ray()  # a missing Ray is a one-line error before anything is written
    table = Table(spec.out / "points.csv")
    todo = [p for p in spec.points if p.key not in table.done]
    skipped = len(spec.points) - len(todo)
    started = time.monotonic()
    bar = tqdm(total=len(todo), desc=spec.name, unit="pt", disable=not progress)
    try:
        if use_ray:
            _with_ray(todo, spec.out, table, bar, address, workers)
        else:
            for point in todo:
                table.add(simulate_point(point) if point.kind == "simulated"
                          else emulate_point(point, spec.out))
                bar.update(1)
    finally:
        bar.close()
    return Run(spec.out, len(spec.points), skipped, len(todo), time.monotonic() - started,
               table.rows)


def _with_ray(todo: list[Point], out: Path, table: Table, bar, address: str | None,
              workers: int | None) -> None:
    from agent.cluster import import_ray, ray_session

    # By module name, also under ``python -m bench.sweep``: functions of __main__ would be
    # pickled by value, and the workers have no __main__ of ours to resolve them in.
    from bench.sweep import emulate_point, simulate_point

    emulated = [p for p in todo if p.kind == "emulated"]
    resources = {"emulation": 1} if emulated and address is None and can_emulate() else {}
    ray = import_ray()
    with ray_session(address, workers or os.cpu_count() or 1, resources):
        signal.signal(signal.SIGTERM, _terminated)  # ray.init installed its own handler
        if emulated and not ray.cluster_resources().get("emulation"):
            raise SpecError(f"{len(emulated)} emulated points, but no node of the cluster "
                            "can emulate (root, Mininet, Open vSwitch; a cluster node "
                            "advertises it with ray start --resources='{\"emulation\": 1}')")
        sim = ray.remote(num_cpus=1)(simulate_point)
        emu = ray.remote(num_cpus=1, resources={"emulation": 1}, max_retries=0)(emulate_point)
        pending = [sim.remote(p) if p.kind == "simulated" else emu.remote(p, out)
                   for p in todo]
        # On Ctrl-C or SIGTERM nothing is cancelled one by one (ray.cancel racing with
        # tasks that complete trips a check in Ray 2.60): leaving the session ends the job,
        # and with it its workers; an emulation.run a worker started then gets SIGTERM.
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                table.add(ray.get(ref))
                bar.update(1)


# ------------------------------------------------------------------------------- summary

def _number(text: str) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def summary(rows: list[dict[str, str]]) -> str:
    """Each scheduler's makespan as a multiple of the lower bound (geometric mean over the
    sizes), per network and scenario, simulated points; then the emulated points."""
    ok = [r for r in rows if r["status"] == "ok" and r["kind"] == "simulated"]
    lines = []
    if ok:
        schedulers = list(dict.fromkeys(r["scheduler"] for r in ok))
        groups = list(dict.fromkeys((r["topology"], r["scenario"]) for r in ok))
        width = max(len(f"{t} {s}") for t, s in groups) + 2
        lines.append(f"{'network, scenario':<{width}}" + "".join(f"{s:>12}" for s in schedulers))
        for topo, scenario in groups:
            cells = []
            for sched in schedulers:
                ratios = [_number(r["ratio_to_bound"]) for r in ok if r["topology"] == topo
                          and r["scenario"] == scenario and r["scheduler"] == sched]
                ratios = [x for x in ratios if x]
                cells.append(f"{statistics.geometric_mean(ratios):>12.3f}" if ratios
                             else f"{'-':>12}")
            lines.append(f"{topo + ' ' + scenario:<{width}}" + "".join(cells))
        lines.append("(simulated makespan / lower bound, geometric mean over the sizes)")
    emulated = [r for r in rows if r["kind"] == "emulated"]
    for r in emulated:
        err = _number(r["error_pct"])
        lines.append(f"emulated {r['topology']} {r['scenario']} {r['scheduler']} "
                     f"{r['size_mb']} MB: " + (
                         f"{float(r['emulated_s']):.3f} s vs simulated "
                         f"{float(r['simulated_s']):.3f} s ({err:+.1f} %)"
                         if r["status"] == "ok" and err is not None else
                         f"FAILED: {r['error']}"))
    failed = [r for r in rows if r["status"] != "ok" and r["kind"] == "simulated"]
    if failed:
        lines.append(f"{len(failed)} simulated points failed; the first: {failed[0]['key']}: "
                     f"{failed[0]['error']}")
    return "\n".join(lines)


def plots(rows: list[dict[str, str]], out: Path) -> list[Path]:
    """makespan.png and ratio.png (per network and scenario, one bar per scheduler; the
    largest size) and emu_vs_sim.png when there are emulated points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    ok = [r for r in rows if r["status"] == "ok" and r["kind"] == "simulated"]
    if ok:
        schedulers = list(dict.fromkeys(r["scheduler"] for r in ok))
        groups = list(dict.fromkeys((r["topology"], r["scenario"]) for r in ok))
        for name, column, label in (("makespan", "simulated_s", "makespan (s), largest size"),
                                    ("ratio", "ratio_to_bound", "makespan / lower bound")):
            fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(groups) * len(schedulers)
                                                / 3), 4.0))
            step = 0.8 / len(schedulers)
            for j, sched in enumerate(schedulers):
                values = []
                for topo, scenario in groups:
                    mine = [r for r in ok if (r["topology"], r["scenario"], r["scheduler"])
                            == (topo, scenario, sched)]
                    if column == "simulated_s":
                        top = max(mine, key=lambda r: float(r["size_mb"]), default=None)
                        values.append(float(top[column]) if top else 0.0)
                    else:
                        ratios = [float(r[column]) for r in mine]
                        values.append(statistics.geometric_mean(ratios) if ratios else 0.0)
                ax.bar([i + j * step for i in range(len(groups))], values, step, label=sched)
            ax.set_xticks([i + 0.4 - step / 2 for i in range(len(groups))],
                          [f"{t}\n{s}" for t, s in groups], fontsize=7)
            ax.set_ylabel(label)
            if column == "simulated_s":
                ax.set_yscale("log")
            else:
                ax.axhline(1.0, color="k", lw=0.8, ls="--")
            ax.legend(fontsize=7)
            fig.tight_layout()
            files.append(out / f"{name}.png")
            fig.savefig(files[-1], dpi=110)
            plt.close(fig)
    emulated = [r for r in rows if r["kind"] == "emulated" and r["status"] == "ok"]
    if emulated:
        fig, ax = plt.subplots(figsize=(4.5, 4.5))
        sim = [float(r["simulated_s"]) for r in emulated]
        emu = [float(r["emulated_s"]) for r in emulated]
        ax.scatter(sim, emu, s=18)
        top = max(sim + emu) * 1.05
        ax.plot([0, top], [0, top], "k--", lw=0.8)
        ax.set_xlabel("simulated s (calibrated)")
        ax.set_ylabel("emulated s")
        fig.tight_layout()
        files.append(out / "emu_vs_sim.png")
        fig.savefig(files[-1], dpi=110)
        plt.close(fig)
    return files


def _terminated(signum: int, frame: Any) -> None:
    raise SystemExit(143)  # unwinds like Ctrl-C: the finished rows kept, Ray stopped


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m bench.sweep``."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("spec", type=Path, help="the sweep's TOML file")
    parser.add_argument("--out", type=Path, help="results directory (default: the spec's out, "
                        "else sweeps/<name>)")
    parser.add_argument("--address", help="an existing Ray cluster (ray start --head ...); "
                        "default: start Ray on this machine")
    parser.add_argument("--workers", type=int, help="CPUs Ray may use here (default: all)")
    parser.add_argument("--no-ray", action="store_true",
                        help="run every point in this process, one after the other")
    parser.add_argument("--dry-run", action="store_true",
                        help="print how many points the spec has and which are done")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.workers is not None and args.workers < 1:
        raise SpecError(f"--workers must be >= 1, got {args.workers}")
    if args.no_ray and args.address:
        raise SpecError("--no-ray and --address exclude each other")
    spec = load_spec(args.spec)
    if args.out:
        spec.out = args.out
    signal.signal(signal.SIGTERM, _terminated)
    if args.dry_run:
        done = {r["key"] for r in read_rows(spec.out / "points.csv")}
        kinds = {k: sum(1 for p in spec.points if p.kind == k) for k in ("simulated", "emulated")}
        print(f"{spec.name}: {len(spec.points)} points ({kinds['simulated']} simulated, "
              f"{kinds['emulated']} emulated), {sum(p.key in done for p in spec.points)} "
              f"done in {spec.out / 'points.csv'}")
        return 0
    run = sweep(spec, address=args.address, workers=args.workers, use_ray=not args.no_ray,
                progress=not args.no_progress)
    print(f"{spec.name}: {run.total} points, {run.skipped} already done, {run.ran} run in "
          f"{run.wall_s:.1f} s; table {run.out / 'points.csv'}")
    ours = {p.key for p in spec.points}
    rows = [r for r in run.rows if r["key"] in ours]
    text = summary(rows)
    if text:
        print(text)
    files = plots(rows, run.out)
    if files:
        print("plots: " + ", ".join(str(f) for f in files))
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    from topology.cli import run as run_cli

    run_cli(main, PROG)
