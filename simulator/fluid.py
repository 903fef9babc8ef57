"""Event-driven fluid simulation of a Schedule: max-min fair sharing of directed links.

A transfer starts when all its deps have arrived, plus ``startup_s``. Active transfers share
every directed link of their paths max-min fairly (progressive filling); rates are
recomputed whenever a transfer starts or stops sending. A transfer stops sending when its
bits have gone through and arrives ``hop_latency_s`` per link later (and, with
``frame_bytes``, its queue drain later: ``simulator.frames``).

Speed. Events within a relative 1e-12 of each other form one batch, so lock-step collectives
such as a ring cost one rate computation per step. An event re-solves only the flows whose
max-min rate can change: (i) rates decompose over the connected components of the
flows-share-a-link graph, so only the component of the touched links counts; (ii) a flow
slower than every flow that stopped and than every new flow's equal share (capacity over
flow count on its links, a floor of its max-min rate) keeps its rate, because progressive
filling freezes it, at the same level, before anything the event changed can matter; the
others are re-solved on the capacity it leaves. In all-to-all traffic the flows that finish
are the fastest, so (ii) leaves most flows alone even when (i) spans the whole network.

Engines, all exact and equal to float round-off: ``simulator.compiled``, the event loop
compiled with numba on flat arrays, with the flows of one path kept as one class (they share
one rate), runs whenever numba imports (``ENGINE = "auto"``). The two
pure-Python engines here are the reference it is tested against and the fallback without
numba: the incremental one walks per-link flow sets and re-projects only the flows whose rate
changed, kept in a heap (cost per event follows the component: rings, trees, pipelines); the
vectorised one keeps the active flows in numpy arrays (cost per event follows the active set,
in few numpy passes: all-to-all traffic, many concurrent rings), and the fallback picks it
when many transfers are ready at once.

Network events. A graph with ``background_flows`` or ``link_failures`` (graph attributes, see
``topology.links``) runs in ``simulator.events.with_events``, an exact event loop on ``_Run``
that re-solves the whole touched component at every event: background flows are endless
flows capped at their rate, and at a failure every flow still to send across the link moves
to ``topology.routing.backup_path``. Graphs without events never reach it.
"""

from __future__ import annotations

import heapq
import itertools
import math

import networkx as nx
import numpy as np

from simulator.maxmin import BATCH_RTOL, LEVEL_RTOL, max_min_rates, max_min_small
from simulator.result import Result
from topology.links import background_flows, link_failures, link_rate_mbps
from traffic.schedule import DTYPES, Schedule, ScheduleError

try:  # the compiled event loop; the engines below are the reference and the fallback
    from simulator import compiled
except ImportError:  # numba missing
    compiled = None

#: Components up to this many flows use the plain-Python max-min kernel.
SMALL_COMPONENT = 24
#: The vectorised engine looks for the touched component only among more flows than this:
#: re-solving a few hundred extra flows costs less than the search.
SEARCH_COMPONENT = 512
#: Which engine runs: "auto" (the compiled one where numba imports, else by the rule below),
#: "compiled", "vectorised" or "incremental".
ENGINE = "auto"
#: The vectorised engine runs when more than this many transfers per server start at once.
CONCURRENT_PER_SERVER = 4

__all__ = ["simulate"]


def _check_option(name: str, value: float, positive: bool = False) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        raise ValueError(f"{name} must be {'> 0' if positive else '>= 0'}, got {value!r}")
    return x


def _link_table(graph: nx.Graph, schedule: Schedule, goodput: float):
    """Intern paths: (path row of each transfer, link ids of each row, capacities in bit/s
    with an infinite dummy last, padded link-id table of the rows)."""
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
                    lid = link_id[(a, b)] = len(caps)
                    caps.append(link_rate_mbps(graph, a, b) * 1e6 * goodput)
                ids.append(lid)
            r = path_row[t.path] = len(rows)
            rows.append(ids)
        row_of[i] = r
    width = max([len(ids) for ids in rows] + [1])
    table = np.full((len(rows), width), len(caps), dtype=np.int64)
    for r, ids in enumerate(rows):
        table[r, :len(ids)] = ids
    cap = np.array(caps + [np.inf])
    return row_of.tolist(), [tuple(ids) for ids in rows], cap, table


class _Run:
    """What both engines share: dependency bookkeeping, the heaps of transfers about to
    start and about to arrive, and the recorded times."""

    def __init__(self, schedule: Schedule, row_of: list[int], rows: list[tuple[int, ...]],
                 startup_s: float, hop_latency_s: float,
                 extra_latency: list[float] | None = None) -> None:
        transfers = schedule.transfers
        count = len(transfers)
        position = {t.id: i for i, t in enumerate(transfers)}
        if len(position) != count:
            raise ScheduleError("transfer ids are not unique")
        self.startup_s = startup_s
        bits_per = 8 * DTYPES[schedule.dtype]
        self.bits = [float(t.count * bits_per) for t in transfers]
        self.links_of = [rows[r] for r in row_of]
        self.latency = [len(links) * hop_latency_s for links in self.links_of]
        if extra_latency is not None:
            self.latency = [a + b for a, b in zip(self.latency, extra_latency, strict=True)]
        self.children: list[list[int]] = [[] for _ in range(count)]
        self.pending = [0] * count
        for i, t in enumerate(transfers):
            for d in set(t.deps):
                j = position.get(d)
                if j is None:
                    raise ScheduleError(f"transfer {t.id}: depends on unknown transfer {d}")
                self.children[j].append(i)
                self.pending[i] += 1
        self.ready_at = [0.0] * count
        self.start = [math.nan] * count
        self.finish = [math.nan] * count
        self.ready = [(startup_s, i) for i in range(count) if self.pending[i] == 0]
        heapq.heapify(self.ready)
        self.arrivals: list[tuple[float, int]] = []

    def next_time(self) -> float:
        """The earliest pending start or arrival."""
        t = self.ready[0][0] if self.ready else math.inf
        if self.arrivals and self.arrivals[0][0] < t:
            t = self.arrivals[0][0]
        return t

    def sent(self, i: int, when: float) -> None:
        """Transfer i has put its last bit on the wire at ``when``."""
        if self.latency[i] == 0.0:
            self.arrive(i, when)
        else:
            heapq.heappush(self.arrivals, (when + self.latency[i], i))

    def arrive(self, i: int, when: float) -> None:
        """Transfer i has arrived: release the transfers waiting for it."""
        self.finish[i] = when
        for c in self.children[i]:
            self.pending[c] -= 1
            if when > self.ready_at[c]:
                self.ready_at[c] = when
            if self.pending[c] == 0:
                heapq.heappush(self.ready, (self.ready_at[c] + self.startup_s, c))

    def due(self, horizon: float) -> list[int]:
        """Process every arrival and start up to ``horizon``; the transfers that start
        sending (empty ones and ones without links arrive at once)."""
        new = []
        ready, arrivals = self.ready, self.arrivals
        while (arrivals and arrivals[0][0] <= horizon) or (ready and ready[0][0] <= horizon):
            while arrivals and arrivals[0][0] <= horizon:
                when, i = heapq.heappop(arrivals)
                self.arrive(i, when)
            while ready and ready[0][0] <= horizon:
                when, i = heapq.heappop(ready)
                self.start[i] = when
                if self.bits[i] > 0 and self.links_of[i]:
                    new.append(i)
                else:
                    self.sent(i, when)
        return new


def _next_event(run: _Run, projected: list[tuple[float, int, int]], version: list[int]
                ) -> float:
    """The earliest of the run's next start or arrival and the first projected finish that
    is still current (stale heap entries, whose version is behind, are dropped)."""
    while projected and projected[0][2] != version[projected[0][1]]:
        heapq.heappop(projected)
    t_next = run.next_time()
    if projected and projected[0][0] < t_next:
        t_next = projected[0][0]
    return t_next


def _incremental(run: _Run, row_of: list[int], caps: list[float], cap: np.ndarray,
                 table: np.ndarray) -> None:
    """Engine for schedules with few flows per component: Python state per flow, a heap of
    projected finish times (a version number retires stale entries).

    An event re-solves the flows connected to the links it touched through flows whose rate
    may change (as in ``_vectorised``: slower flows keep theirs), and re-projects only the
    flows whose rate changed."""
    count = len(run.bits)
    links_of = run.links_of
    rem = [0.0] * count
    since = [0.0] * count
    rate = [0.0] * count
    version = [0] * count
    projected: list[tuple[float, int, int]] = []
    on_link: list[set[int]] = [set() for _ in caps]
    used = [0.0] * len(caps)
    now = 0.0
    while True:
        t_next = _next_event(run, projected, version)
        if t_next == math.inf:
            return
        t_next = max(t_next, now)
        horizon = t_next * (1.0 + BATCH_RTOL)
        dirty: set[int] = set()
        level = math.inf
        while projected and projected[0][0] <= horizon:
            _, i, ver = heapq.heappop(projected)
            if ver != version[i]:
                continue
            version[i] += 1
            r = rate[i]
            if r < level:
                level = r
            for link in links_of[i]:
                on_link[link].discard(i)
                used[link] -= r
                dirty.add(link)
            run.sent(i, t_next)
        now = t_next
        fresh = run.due(horizon)
        for i in fresh:
            rem[i], since[i], rate[i] = run.bits[i], now, 0.0
            for link in links_of[i]:
                on_link[link].add(i)
                dirty.add(link)
        if not dirty:
            continue
        flows = _component(dirty, on_link, links_of, rate, 0.0, SMALL_COMPONENT)
        if flows is not None:
            spare = caps  # a whole component: its links carry nothing else
        else:
            # A large component: leave out the flows slower than anything that changed.
            for i in fresh:
                for link in links_of[i]:
                    share = caps[link] / len(on_link[link])
                    if share < level:
                        level = share
            flows = _component(dirty, on_link, links_of, rate, level * (1.0 - LEVEL_RTOL))
            spare = _spare(flows, links_of, on_link, rate, caps, used)
        if not flows:
            continue
        group = list(flows)
        if len(group) == 1:
            rates = [min(spare[link] for link in links_of[group[0]])]
        elif len(group) <= SMALL_COMPONENT:
            rates = max_min_small([links_of[f] for f in group], spare)
        else:  # only a filtered group is this large, and its spare is a dict
            full = np.zeros(len(caps))  # caps ends with the padding link's inf
            full[-1] = np.inf
            full[list(spare)] = list(spare.values())
            rates = max_min_rates(table[[row_of[f] for f in group]], full).tolist()
        for f, r in zip(group, rates, strict=True):
            old = rate[f]
            if r == old:
                continue
            rem[f] = max(0.0, rem[f] - old * (now - since[f]))
            since[f] = now
            rate[f] = r
            for link in links_of[f]:
                used[link] += r - old
            version[f] += 1
            heapq.heappush(projected, (now + rem[f] / r, f, version[f]))


def _spare(group: set[int], links_of: list[tuple[int, ...]], on_link: list[set[int]],
           rate: list[float], caps: list[float], used: list[float]) -> dict[int, float]:
    """Capacity of the group's links that the flows outside it leave: exactly the capacity
    where the group is alone, so float drift in ``used`` never enters there."""
    spare: dict[int, float] = {}
    mine: dict[int, int] = {}
    for f in group:
        for link in links_of[f]:
            spare[link] = spare.get(link, 0.0) + rate[f]
            mine[link] = mine.get(link, 0) + 1
    for link, n in mine.items():
        if n == len(on_link[link]):
            spare[link] = caps[link]
        else:
            spare[link] = max(0.0, caps[link] - used[link] + spare[link])
    return spare


def _component(seeds: set[int], on_link: list[set[int]], links_of: list[tuple[int, ...]],
               rate: list[float], floor: float, most: int | None = None) -> set[int] | None:
    """The flows connected to the links ``seeds`` through shared links, passing only through
    flows at ``floor`` or faster (or new, at rate 0); None once more than ``most``."""
    flows: set[int] = set()
    seen = set(seeds)
    stack = list(seeds)
    while stack:
        for f in on_link[stack.pop()]:
            if f not in flows and (rate[f] >= floor or rate[f] == 0.0):
                flows.add(f)
                if most is not None and len(flows) > most:
                    return None
                for link in links_of[f]:
                    if link not in seen:
                        seen.add(link)
                        stack.append(link)
    return flows


def _affected(links: np.ndarray, seeds: np.ndarray, nl: int, rounds: int = 4):
    """Mask of the flows (rows of ``links``) connected through shared links to the links of
    ``seeds``; None when that component is not found small within ``rounds`` steps."""
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


def _vectorised(run: _Run, row_of: list[int], cap: np.ndarray, table: np.ndarray) -> None:
    """Engine for schedules with many concurrent flows: the active set as numpy arrays.

    An event re-solves only the flows whose rate may change: a flow slower than every flow
    that stopped and than every new flow's equal share keeps its rate (progressive filling
    freezes it, on the same link, before anything the event changed can matter), and so
    does a flow not connected to the touched links. The load each link carries is kept up
    to date, so the re-solved flows see the spare capacity the others leave."""
    rows = np.array(row_of, dtype=np.int64)
    bits = np.array(run.bits)
    nl = cap.shape[0]
    width = table.shape[1]
    on_link = np.zeros(nl)
    used = np.zeros(nl)
    act = np.empty(0, dtype=np.int64)
    links = np.empty((0, width), dtype=np.int64)
    rem = np.empty(0)
    rate = np.empty(0)
    now = 0.0
    while True:
        t_next = run.next_time()
        if act.size:
            ttf = rem / rate
            k = int(np.argmin(ttf))
            t_fin = now + ttf[k]
            t_next = min(t_next, t_fin)
        if t_next == math.inf:
            return
        horizon = t_next * (1.0 + BATCH_RTOL)
        seeds: list[np.ndarray] = []
        level = math.inf
        if act.size:
            done = ttf <= horizon - now
            if t_next == t_fin:
                done[k] = True
            rem -= rate * (t_next - now)
            if done.any():
                for i in act[done].tolist():
                    run.sent(i, t_next)
                gone = links[done]
                seeds.append(gone)
                level = float(rate[done].min())
                flat = gone.ravel()
                on_link -= np.bincount(flat, minlength=nl)
                used -= np.bincount(flat, minlength=nl, weights=np.repeat(rate[done], width))
                keep = ~done
                act, links, rem, rate = act[keep], links[keep], rem[keep], rate[keep]
        now = t_next
        new = run.due(horizon)
        count = act.size
        if new:
            fresh = np.array(new, dtype=np.int64)
            added = table[rows[fresh]]
            seeds.append(added)
            on_link += np.bincount(added.ravel(), minlength=nl)
            share = cap / np.maximum(on_link, 1.0)
            level = min(level, float(share[added].min()))
            act = np.concatenate([act, fresh])
            links = np.concatenate([links, added])
            rem = np.concatenate([rem, bits[fresh]])
            rate = np.concatenate([rate, np.zeros(len(new))])
        if not seeds or not act.size:
            continue
        part = rate >= level * (1.0 - LEVEL_RTOL)
        part[count:] = True
        if int(part.sum()) > SEARCH_COMPONENT:
            grown = _affected(links[part], np.concatenate(seeds), nl)
            if grown is not None:
                part[np.flatnonzero(part)[~grown]] = False
        sub = links[part]
        old = rate[part]
        weights = np.repeat(old, width)
        flat = sub.ravel()
        spare = cap - used + np.bincount(flat, minlength=nl, weights=weights)
        alone = np.bincount(flat, minlength=nl) == on_link
        spare[alone] = cap[alone]
        fresh_rates = max_min_rates(sub, np.maximum(spare, 0.0))
        rate[part] = fresh_rates
        used += np.bincount(flat, minlength=nl, weights=np.repeat(fresh_rates - old, width))
        used[nl - 1] = 0.0


def _compiled(schedule: Schedule, row_of: list[int], rows: list[tuple[int, ...]],
              cap: np.ndarray, startup_s: float, hop_latency_s: float,
              extra_latency: list[float] | None = None) -> tuple[list[float], list[float]]:
    """Start and finish times from the numba-compiled event loop (``simulator.compiled``),
    its arrays built in numpy: the dependency lists of an all-to-all schedule run to
    millions of entries."""
    transfers = schedule.transfers
    count = len(transfers)
    ids = np.fromiter((t.id for t in transfers), dtype=np.int64, count=count)
    width = np.fromiter((len(t.deps) for t in transfers), dtype=np.int64, count=count)
    deps = np.fromiter(itertools.chain.from_iterable(t.deps for t in transfers),
                       dtype=np.int64, count=int(width.sum()))
    child = np.repeat(np.arange(count), width)
    if np.array_equal(ids, np.arange(count)):
        bad = (deps < 0) | (deps >= count)
        parent = deps
    else:
        position = {int(t): i for i, t in enumerate(ids)}
        if len(position) != count:
            raise ScheduleError("transfer ids are not unique")
        parent = np.fromiter((position.get(int(d), -1) for d in deps), dtype=np.int64,
                             count=len(deps))
        bad = parent < 0
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ScheduleError(f"transfer {transfers[int(child[first])].id}: depends on unknown "
                            f"transfer {int(deps[first])}")
    if not np.all((np.diff(parent) > 0) | (np.diff(child) != 0)):
        # Not each transfer's deps strictly increasing: a repeated dependency counts once.
        pairs = np.unique(child * count + parent)
        child, parent = pairs // count, pairs % count
    pending = np.bincount(child, minlength=count).astype(np.int64)
    cptr, cidx = compiled.group_by_parent(parent, child, count)
    cls = np.asarray(row_of, dtype=np.int64)
    widths = np.array([len(links) for links in rows], dtype=np.int64)
    kptr = np.zeros(len(rows) + 1, dtype=np.int64)
    kptr[1:] = np.cumsum(widths)
    kidx = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64,
                       count=int(kptr[-1]))
    per = 8 * DTYPES[schedule.dtype]
    bits = np.fromiter((t.count for t in transfers), dtype=np.float64, count=count) * per
    latency = widths[cls] * hop_latency_s
    if extra_latency is not None:
        latency = latency + np.asarray(extra_latency, dtype=np.float64)
    start, finish = compiled.simulate_arrays(bits, latency, cls, kptr, kidx, cap[:-1].copy(),
                                             cptr, cidx, pending, startup_s)
    return start.tolist(), finish.tolist()


def simulate(graph: nx.Graph, schedule: Schedule, *, startup_s: float = 0.0,
             hop_latency_s: float = 0.0, goodput: float = 1.0,
             failover_s: float = 0.0, frame_bytes: float = 0.0) -> Result:
    """Simulate ``schedule`` on ``graph`` and return per-transfer start/finish times.

    Link capacity per direction is ``bw_mbps * 1e6 * goodput`` bit/s; a transfer carries
    ``count * itemsize * 8`` bits. ``finish_s`` is the arrival time (sending done plus
    ``hop_latency_s`` per link, plus the queue drain below). ScheduleError on a path that
    leaves the graph, an unknown dependency or a dependency cycle.

    The graph's background flows share links with the transfers (each capped at its
    ``mbps``; the ``background_mbps`` they explain is capacity again); at each of its link
    failures the flows still to send across the link continue on ``backup_path`` (ValueError
    naming the flow and the link when there is none), a flow that was sending across it
    pausing ``failover_s`` first, and ``Result.rerouted`` lists the transfers that moved.
    The makespan and times cover the schedule's transfers only.

    With ``frame_bytes`` > 0 each transfer also arrives later by the drain of the full
    round-robin queues it crosses (``simulator.frames.frame_tails``, frames of that size,
    from a first fluid run with the same costs).
    """
    startup_s = _check_option("startup_s", startup_s)
    frame_bytes = _check_option("frame_bytes", frame_bytes)
    hop_latency_s = _check_option("hop_latency_s", hop_latency_s)
    failover_s = _check_option("failover_s", failover_s)
    goodput = _check_option("goodput", goodput, positive=True)
    if goodput > 1:
        raise ValueError(f"goodput must be <= 1, got {goodput!r}")
    if schedule.dtype not in DTYPES:
        raise ScheduleError(f"dtype {schedule.dtype!r} is not one of {', '.join(DTYPES)}")
    transfers = schedule.transfers
    if not transfers:
        return Result(0.0, {}, {})
    rerouted: tuple[int, ...] = ()
    extra = None
    if frame_bytes:
        from simulator.frames import frame_tails

        extra = frame_tails(graph, schedule, frame_bytes, startup_s=startup_s,
                            hop_latency_s=hop_latency_s, goodput=goodput, failover_s=failover_s)
    if background_flows(graph) or link_failures(graph):
        from simulator.events import with_events

        start, finish, rerouted = with_events(graph, schedule, startup_s, hop_latency_s,
                                              goodput, failover_s, extra_latency=extra)
    else:
        row_of, rows, cap, table = _link_table(graph, schedule, goodput)
        if compiled is not None and ENGINE in ("auto", "compiled"):
            start, finish = _compiled(schedule, row_of, rows, cap, startup_s, hop_latency_s,
                                      extra)
        else:
            run = _Run(schedule, row_of, rows, startup_s, hop_latency_s, extra)
            servers = {t.src for t in transfers} | {t.dst for t in transfers}
            if ENGINE == "vectorised" or (ENGINE == "auto" and len(run.ready)
                                          > CONCURRENT_PER_SERVER * len(servers)):
                _vectorised(run, row_of, cap, table)
            else:
                _incremental(run, row_of, cap.tolist(), cap, table)
            start, finish = run.start, run.finish
    if any(math.isnan(x) for x in finish):
        stuck = transfers[next(i for i, x in enumerate(finish) if math.isnan(x))]
        raise ScheduleError(f"transfer {stuck.id}: never starts; its dependencies form a "
                            "cycle")
    ids = [t.id for t in transfers]
    return Result(
        makespan_s=max(finish),
        start_s=dict(zip(ids, start, strict=True)),
        finish_s=dict(zip(ids, finish, strict=True)),
        rerouted=tuple(sorted(ids[i] for i in rerouted)),
    )
