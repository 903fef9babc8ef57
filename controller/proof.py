"""Proof that what ran is what was chosen: per route, bytes on every hop of its path.

Input: the schedule (or its routes), the topology, and the controller's ``GET /routes/stats``
reply. Pure. A zero counter anywhere on a route's path is an error, not a warning, unless the
route's direction failed over (its backup rules counted packets, or the controller re-routed
it after a link went down): then the proof asks only that the direction's last datapath
delivered packets, and reports the route as failed over.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controller.rules import FAILOVER_BIT, as_spec, parse_cookie, route_cookie, route_datapaths
from controller.topofile import Topology


@dataclass
class RouteCheck:
    """The verdict on one route: errors make it fail, warnings are reported only."""

    src: str
    dst: str
    path: tuple[str, ...]
    tcp_port: int
    forward_bytes: dict[str, int] = field(default_factory=dict)
    reverse_bytes: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: The directions (``"forward"``, ``"reverse"``) that failed over.
    failed_over: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the route has no error."""
        return not self.errors


@dataclass
class ProofReport:
    """Per-route checks, errors not tied to a route, and the overall verdict."""

    routes: list[RouteCheck]
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no route and no global check failed."""
        return not self.errors and all(r.ok for r in self.routes)

    def summary(self) -> str:
        """One line per failure (or 'ok: N routes proven', plus how many failed over)."""
        lines = self.all_errors()
        if lines:
            return "\n".join(lines)
        failed = sum(1 for r in self.routes if r.failed_over)
        return f"ok: {len(self.routes)} routes proven" + (f", {failed} failed over"
                                                          if failed else "")

    def all_failed_over(self) -> list[str]:
        """Every direction that failed over, as 'src->dst port P: direction'."""
        return [f"{r.src}->{r.dst} port {r.tcp_port}: {d}" for r in self.routes
                for d in r.failed_over]

    def all_errors(self) -> list[str]:
        """Every error: global ones, then per route prefixed with the route."""
        return list(self.errors) + [f"{r.src}->{r.dst} port {r.tcp_port}: {e}"
                                    for r in self.routes for e in r.errors]

    def to_dict(self) -> dict:
        """A JSON-ready form of the report: ``ok``, ``errors`` (all of them, flattened),
        ``failed_over`` (``all_failed_over``) and per route its verdict and byte counters."""
        return {
            "ok": self.ok,
            "errors": self.all_errors(),
            "failed_over": self.all_failed_over(),
            "routes": [
                {"src": r.src, "dst": r.dst, "path": list(r.path), "tcp_port": r.tcp_port,
                 "ok": r.ok, "errors": r.errors, "warnings": r.warnings,
                 "failed_over": r.failed_over,
                 "forward_bytes": r.forward_bytes, "reverse_bytes": r.reverse_bytes}
                for r in self.routes
            ],
        }


def stats_reply(routes: list[Any], counters: list[tuple[str, int, int, int]],
                missing: list[str] = (), rerouted: dict[int, Any] | None = None) -> dict:
    """The ``GET /routes/stats`` document: per installed route (by index), its identity and
    per-datapath {packets, bytes} for forward and reverse rules, and for its backup rules
    (cookie with FAILOVER_BIT) under ``forward_backup`` and ``reverse_backup``; ``rerouted``
    is the path the controller moved the route to after a link failure, else None.

    ``counters`` holds (datapath name, cookie, packets, bytes) of every schedule-route rule
    read back from the switches; ``missing`` the datapaths that did not answer; ``rerouted``
    maps a route index to its current path when that differs from the chosen one."""
    out = []
    for index, route in enumerate(routes):
        spec = as_spec(route)
        moved = (rerouted or {}).get(index)
        out.append({"cookie": route_cookie(index), "src": spec.src, "dst": spec.dst,
                    "path": list(spec.path), "tcp_port": spec.tcp_port,
                    "transfer_ids": list(spec.transfer_ids), "forward": {}, "reverse": {},
                    "forward_backup": {}, "reverse_backup": {},
                    "rerouted": None if moved is None else list(moved)})
    stray = []
    for name, cookie, packets, nbytes in counters:
        parsed = parse_cookie(cookie)
        if parsed is None or not 0 <= parsed[0] < len(out):
            stray.append({"datapath": name, "cookie": cookie, "packets": packets,
                          "bytes": nbytes})
            continue
        index, reverse = parsed
        side = out[index][("reverse" if reverse else "forward")
                          + ("_backup" if cookie & FAILOVER_BIT else "")]
        c = side.setdefault(name, {"packets": 0, "bytes": 0})
        c["packets"] += packets
        c["bytes"] += nbytes
    return {"routes": out, "stray": stray, "complete": not missing,
            "missing": sorted(missing)}


def _routes_and_payload(chosen: Any) -> tuple[list, dict[tuple, int]]:
    """Routes of a Schedule (with the payload bytes each must carry) or a list of routes."""
    if hasattr(chosen, "transfers"):
        from traffic.schedule import routes

        found = routes(chosen)
        by_id = chosen.by_id()
        payload = {
            (r.src, r.dst, r.path, r.tcp_port):
                sum(by_id[i].size_bytes(chosen.dtype) for i in r.transfer_ids)
            for r in found
        }
        return found, payload
    return list(chosen), {}


def verify_routes(chosen: Any, topo: Topology, stats: dict,
                  min_bytes: dict[int, int] | None = None) -> dict:
    """``check_routes(...).to_dict()``: the proof as a JSON-ready dict with ``ok`` and
    ``errors``."""
    return check_routes(chosen, topo, stats, min_bytes).to_dict()


def check_routes(chosen: Any, topo: Topology, stats: dict,
                 min_bytes: dict[int, int] | None = None) -> ProofReport:
    """Check, per chosen route, that its rules moved bytes on every datapath of its path, both
    for data (forward) and ACKs (reverse), and that no rule of it counted anywhere else. A
    direction that failed over (module docstring) must instead have delivered packets on its
    last datapath (its rules there, primary and backup together); its zero hops and missing
    payload bytes are warnings.

    ``chosen`` is a Schedule (then every forward hop must also count at least the payload
    bytes of the route's transfers) or a list of routes; ``stats`` is the controller's
    ``GET /routes/stats`` reply; ``min_bytes`` optionally maps a tcp_port to the least
    forward bytes expected on each hop.
    """
    routes, payload = _routes_and_payload(chosen)
    installed = {}
    for entry in stats.get("routes", []):
        key = (entry["src"], entry["dst"], tuple(entry["path"]), entry["tcp_port"])
        installed[key] = entry
    report = ProofReport([])
    if not stats.get("complete", True):
        report.errors.append("route stats incomplete: some datapath did not answer: "
                             + ", ".join(stats.get("missing", [])))
    chosen_keys = set()
    for route in routes:
        spec = as_spec(route)
        key = (spec.src, spec.dst, spec.path, spec.tcp_port)
        chosen_keys.add(key)
        check = RouteCheck(spec.src, spec.dst, spec.path, spec.tcp_port)
        report.routes.append(check)
        entry = installed.get(key)
        if entry is None:
            check.errors.append("not installed (no rules with this route's path and port)")
            continue
        on_path = route_datapaths(topo, spec)
        need = max(payload.get(key, 0), (min_bytes or {}).get(spec.tcp_port, 0))
        for direction, hops, counted in (("forward", on_path, check.forward_bytes),
                                         ("reverse", list(reversed(on_path)),
                                          check.reverse_bytes)):
            counters = entry.get(direction, {})
            backup = entry.get(direction + "_backup", {})
            if entry.get("rerouted") or any(c.get("packets", 0) > 0 for c in backup.values()):
                check.failed_over.append(direction)
                _check_delivered(check, direction, hops, counters, backup, need)
                continue
            for name in hops:
                c = counters.get(name)
                if c is None:
                    check.errors.append(f"{direction}: no rule counted on {name}")
                    continue
                counted[name] = c["bytes"]
                if c["packets"] == 0 or c["bytes"] == 0:
                    check.errors.append(f"{direction}: zero packets on {name}")
                elif direction == "forward" and c["bytes"] < need:
                    check.errors.append(f"forward: {name} counted {c['bytes']} bytes, less "
                                        f"than the {need} bytes of payload")
            for name, c in counters.items():
                if name not in hops and c.get("packets", 0) > 0:
                    check.errors.append(f"{direction}: traffic counted off the path on {name}")
                elif name not in hops:
                    check.errors.append(f"{direction}: a rule exists off the path on {name}")
            packets = [counters[n]["packets"] for n in hops if n in counters]
            if any(b > a for a, b in zip(packets, packets[1:])):
                check.warnings.append(f"{direction}: packet counts grow along the path "
                                      f"{packets} (read while traffic was moving?)")
    for entry in stats.get("stray", []):
        report.errors.append(f"a schedule-route rule with unknown cookie {entry['cookie']:#x} "
                             f"is on {entry['datapath']}")
    for key in installed:
        if key not in chosen_keys:
            report.errors.append(f"installed route {key[0]}->{key[1]} port {key[3]} "
                                 f"via {'-'.join(key[2])} was not chosen")
    return report


def _check_delivered(check: RouteCheck, direction: str, hops: list[str], counters: dict,
                     backup: dict, need: int) -> None:
    """The checks of a direction that failed over: delivered on its last datapath, nothing
    counted off the path by its primary rules; the rest are warnings."""
    counted = check.forward_bytes if direction == "forward" else check.reverse_bytes
    for name in hops:
        if name in counters:
            counted[name] = counters[name]["bytes"]
    last = hops[-1]
    packets = sum(c.get(last, {}).get("packets", 0) for c in (counters, backup))
    nbytes = sum(c.get(last, {}).get("bytes", 0) for c in (counters, backup))
    if packets == 0 or nbytes == 0:
        check.errors.append(f"{direction}: failed over, but nothing delivered on {last}")
    elif direction == "forward" and nbytes < need:
        check.warnings.append(f"forward: failed over; {last} counted {nbytes} bytes, less "
                              f"than the {need} bytes of payload (counters of replaced "
                              "rules are lost)")
    for name, c in counters.items():
        if name not in hops and c.get("packets", 0) > 0:
            check.errors.append(f"{direction}: traffic counted off the path on {name}")
    used = [n for n, c in backup.items() if c.get("packets", 0) > 0]
    quiet = [n for n in hops if counters.get(n, {}).get("packets", 0) == 0]
    note = f"{direction}: failed over (backup rules counted on {', '.join(used) or 'none'}"
    check.warnings.append(note + (f"; no packets on {', '.join(quiet)})" if quiet else ")"))
