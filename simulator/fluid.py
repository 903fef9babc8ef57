"""Event-driven fluid simulation of a Schedule: max-min fair sharing of directed links.

A transfer starts when all its deps have arrived, plus ``startup_s``. Active transfers share
every directed link of their paths max-min fairly (progressive filling); rates are
recomputed whenever a transfer starts or stops sending. A transfer stops sending when its
bits have gone through and arrives ``hop_latency_s`` per link later.

Speed: paths are interned once into a padded table of directed-link ids, the active set is a
few numpy arrays, events that fall within a relative 1e-12 of each other are handled in one
batch (lock-step collectives such as a ring then cost one rate computation per step), and
each rate computation is a handful of vectorised passes per distinct rate level.
"""

from __future__ import annotations

import heapq
import math

import networkx as nx
import numpy as np

from simulator.result import Result
from traffic.schedule import DTYPES, Schedule, ScheduleError

#: Events closer than this (relative) are simulated as simultaneous.
BATCH_RTOL = 1e-12
#: Links whose fair share is within this (relative) of the bottleneck saturate together.
LEVEL_RTOL = 1e-9


def max_min_rates(links: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Max-min fair rates of flows (progressive filling, many bottlenecks per round).

    ``links`` is (flows x P) directed-link ids, padded with the last id of ``cap``, a dummy
    of infinite capacity; every flow must cross at least one real link. A link's fair share
    is its spare capacity over its unfrozen flows. Each round freezes, at that share, the
    flows of every link whose share is no larger than the shares of all other links its
    flows cross: freezing a flow at a rate no above a link's share never lowers that
    share, so such a link stays the bottleneck of its flows (the plain one-bottleneck-per-
    round algorithm reaches the same rates in more rounds).
    """
    m, width = links.shape
    nl = cap.shape[0]
    rate = np.empty(m)
    remaining = cap.astype(float)
    counts = np.bincount(links.ravel(), minlength=nl).astype(float)
    counts[nl - 1] = 0.0
    open_rows = np.arange(m)
    sub = links
    inf = np.full(nl, np.inf)
    while True:
        share = np.divide(remaining, counts, out=inf.copy(), where=counts > 0.5)
        on = share[sub]
        fmin = on.min(axis=1)
        at_min = on <= fmin[:, None] * (1.0 + LEVEL_RTOL)
        # A link is no bottleneck yet if one of its flows has a tighter link elsewhere.
        blocked = np.zeros(nl, dtype=bool)
        blocked[sub[~at_min]] = True
        hit = (at_min & ~blocked[sub]).any(axis=1)
        if hit.all():
            rate[open_rows] = fmin
            return rate
        rows = open_rows[hit]
        level = fmin[hit]
        rate[rows] = level
        frozen = sub[hit].ravel()
        counts -= np.bincount(frozen, minlength=nl)
        remaining -= np.bincount(frozen, weights=np.repeat(level, width), minlength=nl)
        counts[nl - 1] = 0.0
        np.maximum(remaining, 0.0, out=remaining)
        open_rows = open_rows[~hit]
        sub = sub[~hit]


def _affected(links: np.ndarray, seeds: np.ndarray, nl: int, rounds: int = 4):
    """Mask of the flows (rows of ``links``) connected through shared links to the links of
    ``seeds`` (the paths of flows that just started or stopped): max-min rates decompose
    over such components, so only these can change. None when the component is not found
    small within ``rounds`` growth steps, and every rate should be recomputed."""
    mark = np.zeros(nl, dtype=bool)
    mark[seeds.ravel()] = True
    mark[nl - 1] = False
    rows = mark[links].any(axis=1)
    size = int(rows.sum())
    for _ in range(rounds):
        if 2 * size > len(rows):
            return None
        mark[links[rows].ravel()] = True
        mark[nl - 1] = False
        grown = mark[links].any(axis=1)
        grown_size = int(grown.sum())
        if grown_size == size:
            return rows
        rows, size = grown, grown_size
    return None


def _check_option(name: str, value: float, positive: bool = False) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        raise ValueError(f"{name} must be {'> 0' if positive else '>= 0'}, got {value!r}")
    return x


def _link_table(graph: nx.Graph, schedule: Schedule, goodput: float):
    """Intern paths: (row of each transfer, padded link-id table, capacities in bit/s with
    the infinite dummy last, hops per transfer)."""
    default = graph.graph.get("bw_mbps")
    link_id: dict[tuple[str, str], int] = {}
    caps: list[float] = []
    path_row: dict[tuple[str, ...], int] = {}
    rows: list[list[int]] = []
    row_of = np.empty(len(schedule.transfers), dtype=np.int64)
    for i, t in enumerate(schedule.transfers):
        r = path_row.get(t.path)
        if r is None:
            ids = []
            for a, b in zip(t.path, t.path[1:], strict=False):
                lid = link_id.get((a, b))
                if lid is None:
                    data = graph.get_edge_data(a, b)
                    if data is None:
                        raise ScheduleError(f"transfer {t.id}: path uses {a}-{b}, which is "
                                            "not a link")
                    bw = data.get("bw_mbps", default)
                    if bw is None or not bw > 0:
                        raise ValueError(f"link {a}-{b} has no positive bw_mbps")
                    lid = link_id[(a, b)] = len(caps)
                    caps.append(float(bw) * 1e6 * goodput)
                ids.append(lid)
            r = path_row[t.path] = len(rows)
            rows.append(ids)
        row_of[i] = r
    width = max([len(ids) for ids in rows] + [1])
    table = np.full((len(rows), width), len(caps), dtype=np.int64)
    for r, ids in enumerate(rows):
        table[r, :len(ids)] = ids
    cap = np.array(caps + [np.inf])
    lengths = np.array([len(ids) for ids in rows], dtype=np.int64)
    return row_of, table, cap, lengths[row_of]


def simulate(graph: nx.Graph, schedule: Schedule, *, startup_s: float = 0.0,
             hop_latency_s: float = 0.0, goodput: float = 1.0) -> Result:
    """Simulate ``schedule`` on ``graph`` and return per-transfer start/finish times.

    Link capacity per direction is ``bw_mbps * 1e6 * goodput`` bit/s; a transfer carries
    ``count * itemsize * 8`` bits. ``finish_s`` is the arrival time (sending done plus
    ``hop_latency_s`` per link). ScheduleError on a path that leaves the graph, an unknown
    dependency or a dependency cycle.
    """
    startup_s = _check_option("startup_s", startup_s)
    hop_latency_s = _check_option("hop_latency_s", hop_latency_s)
    goodput = _check_option("goodput", goodput, positive=True)
    if goodput > 1:
        raise ValueError(f"goodput must be <= 1, got {goodput!r}")
    if schedule.dtype not in DTYPES:
        raise ScheduleError(f"dtype {schedule.dtype!r} is not one of {', '.join(DTYPES)}")
    transfers = schedule.transfers
    count = len(transfers)
    if count == 0:
        return Result(0.0, {}, {})
    position = {t.id: i for i, t in enumerate(transfers)}
    if len(position) != count:
        raise ScheduleError("transfer ids are not unique")
    row_of, table, cap, hops = _link_table(graph, schedule, goodput)
    bits = np.array([t.count for t in transfers], dtype=float) * (8 * DTYPES[schedule.dtype])
    latency = hops * hop_latency_s
    children: list[list[int]] = [[] for _ in range(count)]
    pending = np.zeros(count, dtype=np.int64)
    for i, t in enumerate(transfers):
        for d in set(t.deps):
            j = position.get(d)
            if j is None:
                raise ScheduleError(f"transfer {t.id}: depends on unknown transfer {d}")
            children[j].append(i)
            pending[i] += 1
    ready_at = np.zeros(count)
    start = np.full(count, np.nan)
    finish = np.full(count, np.nan)
    ready = [(startup_s, i) for i in np.flatnonzero(pending == 0).tolist()]
    heapq.heapify(ready)
    arrivals: list[tuple[float, int]] = []
    act = np.empty(0, dtype=np.int64)
    rem = np.empty(0)
    rate = np.empty(0)
    now = 0.0

    def arrive(i: int, when: float) -> None:
        finish[i] = when
        for c in children[i]:
            pending[c] -= 1
            if when > ready_at[c]:
                ready_at[c] = when
            if pending[c] == 0:
                heapq.heappush(ready, (ready_at[c] + startup_s, c))

    while ready or arrivals or act.size:
        t_next = math.inf
        if ready:
            t_next = ready[0][0]
        if arrivals:
            t_next = min(t_next, arrivals[0][0])
        if act.size:
            ttf = rem / rate
            k = int(np.argmin(ttf))
            t_fin = now + ttf[k]
            t_next = min(t_next, t_fin)
        horizon = t_next * (1.0 + BATCH_RTOL)
        changed = False
        touched: list[int] = []
        if act.size:
            done = ttf <= horizon - now
            if t_next == t_fin:
                done[k] = True
            rem -= rate * (t_next - now)
            if done.any():
                for i in act[done].tolist():
                    if latency[i] == 0.0:
                        arrive(i, t_next)
                    else:
                        heapq.heappush(arrivals, (t_next + latency[i], i))
                touched = row_of[act[done]].tolist()
                keep = ~done
                act, rem, rate = act[keep], rem[keep], rate[keep]
                changed = True
        now = t_next
        new: list[int] = []
        while (arrivals and arrivals[0][0] <= horizon) or (ready and ready[0][0] <= horizon):
            while arrivals and arrivals[0][0] <= horizon:
                when, i = heapq.heappop(arrivals)
                arrive(i, when)
            while ready and ready[0][0] <= horizon:
                when, i = heapq.heappop(ready)
                start[i] = when
                if bits[i] > 0 and hops[i] > 0:
                    new.append(i)
                elif latency[i] == 0.0:
                    arrive(i, when)
                else:
                    heapq.heappush(arrivals, (when + latency[i], i))
        if new:
            fresh = np.array(new, dtype=np.int64)
            act = np.concatenate([act, fresh])
            rem = np.concatenate([rem, bits[fresh]])
            rate = np.concatenate([rate, np.zeros(len(new))])
            touched += row_of[fresh].tolist()
            changed = True
        if changed and act.size:
            links = table[row_of[act]]
            part = _affected(links, table[touched], cap.shape[0])
            if part is None:
                rate = max_min_rates(links, cap)
            else:
                rate[part] = max_min_rates(links[part], cap)
    if np.isnan(finish).any():
        stuck = transfers[int(np.flatnonzero(np.isnan(finish))[0])]
        raise ScheduleError(f"transfer {stuck.id}: never starts; its dependencies form a "
                            "cycle")
    ids = [t.id for t in transfers]
    return Result(
        makespan_s=float(finish.max()),
        start_s=dict(zip(ids, start.tolist(), strict=True)),
        finish_s=dict(zip(ids, finish.tolist(), strict=True)),
    )
