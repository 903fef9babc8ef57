"""Runs with network events: background flows that share links with the schedule and links
that fail mid-run (``topology.links``: the graph's ``background_flows`` and
``link_failures``). ``simulator.fluid.simulate`` comes here when a graph has either; the
engines of ``simulator.fluid`` serve every other run.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

import networkx as nx
import numpy as np

from simulator.fluid import SMALL_COMPONENT, _check_option, _component, _next_event, _Run
from simulator.maxmin import BATCH_RTOL, max_min_rates, max_min_small
from topology.links import background_flows, link_failures, link_rate_mbps
from topology.routing import backup_path
from traffic.schedule import Schedule, ScheduleError


class _Network:
    """The directed links of a run with network events, interned as paths need them.

    A link u->v carries ``link_rate_mbps(graph, u, v)`` plus the Mbit/s of every background
    flow whose path crosses {u, v}: those flows run as flows of their own, so the
    ``background_mbps`` they explain is given back. A background flow's cap is a private
    link of its own. ``fail`` takes a link down; ``backup`` repairs a path around it on the
    links still up."""

    def __init__(self, graph: nx.Graph, goodput: float) -> None:
        self.graph = graph
        self.alive = graph
        self.goodput = goodput
        self.ids: dict[tuple[str, str], int] = {}
        self.caps: list[float] = []
        self.on_link: list[set[int]] = []
        self.given_back: dict[frozenset[str], float] = {}
        for flow in background_flows(graph):
            for a, b in zip(flow["path"], flow["path"][1:], strict=False):
                edge = frozenset((a, b))
                self.given_back[edge] = self.given_back.get(edge, 0.0) + float(flow["mbps"])

    def _add(self, bits_per_s: float) -> int:
        self.caps.append(bits_per_s)
        self.on_link.append(set())
        return len(self.caps) - 1

    def route(self, path: tuple[str, ...], who: str) -> tuple[int, ...]:
        """Link ids of ``path``; ScheduleError naming ``who`` on a hop that is no link."""
        ids = []
        for a, b in zip(path, path[1:], strict=False):
            lid = self.ids.get((a, b))
            if lid is None:
                if not self.graph.has_edge(a, b):
                    raise ScheduleError(f"{who}: path uses {a}-{b}, which is not a link")
                lid = self.ids[(a, b)] = self._add(self.capacity(a, b))
            ids.append(lid)
        return tuple(ids)

    def capacity(self, a: str, b: str) -> float:
        """Bit/s of link a->b at the run's goodput, background flows' share given back."""
        mbps = link_rate_mbps(self.graph, a, b) + self.given_back.get(frozenset((a, b)), 0.0)
        return mbps * 1e6 * self.goodput

    def private(self, mbps: float) -> int:
        """A new link of ``mbps`` (at the run's goodput) that only one flow crosses."""
        return self._add(mbps * 1e6 * self.goodput)

    def fail(self, a: str, b: str) -> None:
        """Take link a-b down for the rest of the run (again: nothing changes)."""
        if not self.graph.has_edge(a, b):
            raise ValueError(f"link failure: {a}-{b} is not a link")
        if not self.alive.has_edge(a, b):
            return
        self.alive = self.alive.copy()
        self.alive.remove_edge(a, b)

    def backup(self, path: tuple[str, ...], a: str, b: str, who: str) -> tuple[str, ...]:
        """``path`` once a-b is down (``topology.routing.backup_path`` on the links still
        up); ValueError naming ``who`` and the link when there is no detour."""
        new = backup_path(self.alive, path, a, b)
        if new is None:
            raise ValueError(f"{who}: no backup path around failed link {a}-{b}")
        return new


def link_capacity(graph: nx.Graph, goodput: float) -> Callable[[str, str], float]:
    """The bit/s of directed link a->b as ``with_events`` runs it (at ``goodput``, the
    share of background flows given back), as a function of (a, b)."""
    return _Network(graph, goodput).capacity


def with_events(graph: nx.Graph, schedule: Schedule, startup_s: float,
                hop_latency_s: float, goodput: float, failover_s: float = 0.0,
                trace: list[tuple[float, int, float, tuple[str, ...]]] | None = None,
                extra_latency: list[float] | None = None
                ) -> tuple[list[float], list[float], tuple[int, ...]]:
    """Start times, arrival times and the re-routed transfers (positions in the schedule) of
    a run with the graph's background flows and link failures.

    Background flows are flows from time 0 that never end, each also crossing a private
    link of its cap (so progressive filling freezes it at the cap or at its fair share).
    Failures apply in time order, after the transfers that stop sending then and before the
    ones that start then: every flow still to send whose path crosses the link (sending or
    not yet started) moves its remaining bits to the path repaired around it, and a
    transfer's arrival latency follows the path it finishes on. A flow that was sending
    across the link sends nothing for ``failover_s`` first (the transport's recovery of
    what the link lost: a retransmission timeout). Every event re-solves the
    whole component of the flows that share a link with what it touched; failures after
    the last arrival are never reached.

    With a ``trace`` list, every change of a flow's sending rate is appended to it as
    (seconds, flow, bit/s, path): flows are the schedule's positions, then the background
    flows; a flow sends at that rate along that path until its next entry, and its last
    entry has rate 0 (the schedule's flows; background flows never stop).

    ``extra_latency`` (one per transfer, seconds) adds to each transfer's arrival latency,
    on whichever path it finishes."""
    net = _Network(graph, goodput)
    transfers = schedule.transfers
    count = len(transfers)
    names = [f"transfer {t.id}" for t in transfers]
    paths = [tuple(t.path) for t in transfers]
    links_of = [net.route(p, who) for p, who in zip(paths, names, strict=True)]
    run = _Run(schedule, list(range(count)), links_of, startup_s, hop_latency_s, extra_latency)
    own: list[tuple[int, ...]] = [()] * count  # private cap links, kept across re-routes
    for flow in background_flows(graph):
        who = f"background flow {flow['src']}:{flow['dst']}"
        names.append(who)
        paths.append(tuple(flow["path"]))
        own.append((net.private(_check_option(f"{who}: mbps", flow["mbps"], positive=True)),))
        links_of.append(net.route(paths[-1], who) + own[-1])
    failures = [(_check_option(f"link failure {a}-{b}: at_s", f["at_s"]), a, b)
                for f in link_failures(graph) for a, b in [f["link"]]]
    total = len(paths)
    rem = list(run.bits) + [math.inf] * (total - count)
    since = [0.0] * total
    rate = [0.0] * total
    version = [0] * total
    projected: list[tuple[float, int, int]] = []
    sending = set(range(count, total))
    rerouted: set[int] = set()
    dirty: set[int] = set()
    stalled: dict[int, float] = {}  # flow -> when it sends again after a failure
    resumes: list[tuple[float, int]] = []
    now = 0.0

    def join(f: int) -> None:
        for link in links_of[f]:
            net.on_link[link].add(f)
            dirty.add(link)

    def leave(f: int) -> None:
        for link in links_of[f]:
            net.on_link[link].discard(f)
            dirty.add(link)

    def settle(f: int) -> None:  # account the bits sent at the current rate until now
        rem[f] = max(0.0, rem[f] - rate[f] * (now - since[f]))
        since[f] = now

    def note(f: int, bits_per_s: float) -> None:
        if trace is not None:
            trace.append((now, f, bits_per_s, paths[f]))

    for f in sending:
        join(f)
    upcoming = 0
    while True:
        t_next = _next_event(run, projected, version)
        if resumes and resumes[0][0] < t_next:
            t_next = resumes[0][0]
        if t_next == math.inf:
            break
        if upcoming < len(failures) and failures[upcoming][0] < t_next:
            t_next = failures[upcoming][0]
        t_next = max(t_next, now)
        horizon = t_next * (1.0 + BATCH_RTOL)
        while projected and projected[0][0] <= horizon:
            _, f, ver = heapq.heappop(projected)
            if ver != version[f]:
                continue
            version[f] += 1
            sending.discard(f)
            leave(f)
            run.sent(f, t_next)
            if trace is not None:
                trace.append((t_next, f, 0.0, paths[f]))
        now = t_next
        while upcoming < len(failures) and failures[upcoming][0] <= horizon:
            _, a, b = failures[upcoming]
            upcoming += 1
            net.fail(a, b)
            for f in range(total):
                if f < count and f not in sending and not math.isnan(run.start[f]):
                    continue  # done sending
                new = net.backup(paths[f], a, b, names[f])
                if new == paths[f]:
                    continue
                if f in sending:
                    settle(f)
                    leave(f)
                    note(f, 0.0)
                paths[f] = new
                links_of[f] = net.route(new, names[f]) + own[f]
                if f < count:
                    rerouted.add(f)
                    run.links_of[f] = links_of[f]
                    run.latency[f] = len(links_of[f]) * hop_latency_s + (
                        extra_latency[f] if extra_latency is not None else 0.0)
                if f in sending:
                    rate[f] = 0.0
                    version[f] += 1
                    if failover_s > 0 and f not in stalled:
                        stalled[f] = now + failover_s
                        heapq.heappush(resumes, (stalled[f], f))
                    if f not in stalled:
                        join(f)
        while resumes and resumes[0][0] <= horizon:
            _, f = heapq.heappop(resumes)
            del stalled[f]
            join(f)
        for f in run.due(horizon):
            rem[f], since[f], rate[f] = run.bits[f], now, 0.0
            sending.add(f)
            join(f)
        if not dirty:
            continue
        group = sorted(_component(dirty, net.on_link, links_of, rate, 0.0))
        dirty.clear()
        if not group:
            continue
        if len(group) <= SMALL_COMPONENT:
            rates = max_min_small([links_of[f] for f in group], net.caps)
        else:
            pad = len(net.caps)
            table = np.full((len(group), max(len(links_of[f]) for f in group)), pad,
                            dtype=np.int64)
            for row, f in enumerate(group):
                table[row, :len(links_of[f])] = links_of[f]
            rates = max_min_rates(table, np.array([*net.caps, np.inf])).tolist()
        for f, r in zip(group, rates, strict=True):
            if r == rate[f]:
                continue
            settle(f)
            rate[f] = r
            note(f, r)
            if f < count:
                version[f] += 1
                heapq.heappush(projected, (now + rem[f] / r, f, version[f]))
    return run.start, run.finish, tuple(sorted(rerouted))


