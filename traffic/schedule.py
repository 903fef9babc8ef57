"""The Schedule: every transfer of one AllReduce, with its path and dependencies.

It is the one object that crosses every seam of the testbed (agent -> controller, emulation ->
host workers, simulator): a frozen dataclass with an exact JSON round trip. ``validate`` proves a
schedule is a correct AllReduce on a graph by symbolic execution. Pure: standard library,
networkx and numpy only.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import networkx as nx

SCHEMA_VERSION = 1

#: Element types a buffer may have, and their size in bytes.
DTYPES = {"int32": 4, "int64": 8, "float32": 4, "float64": 8}

#: One MB of ``--size-mb``, in bytes (SI, like the Mbit/s of link rates).
MB = 10**6


def buffer_bytes(size_mb: float, dtype: str) -> int:
    """Bytes of a ``size_mb`` MB buffer of ``dtype`` elements, rounded to the nearest whole
    element (at least one). The one size rule of every command and bench.

    >>> buffer_bytes(4.1, "float64"), buffer_bytes(1e-9, "int32")
    (4100000, 4)
    """
    if not (math.isfinite(size_mb) and size_mb > 0):
        raise ValueError(f"--size-mb must be > 0, got {size_mb:g}")
    item = DTYPES[dtype]
    return max(1, round(size_mb * MB / item)) * item

OPS = ("reduce", "copy")

#: TCP destination port of the first route; route i listens on BASE_TCP_PORT + i.
BASE_TCP_PORT = 20000
MAX_TCP_PORT = 65535


class ScheduleError(ValueError):
    """A schedule that is malformed, or is not a correct AllReduce on its graph."""


@dataclass(frozen=True)
class Transfer:
    """One message: elements [offset, offset + count) of ``src``'s buffer go to ``dst``
    along ``path`` once every transfer in ``deps`` has arrived."""

    id: int
    src: str
    dst: str
    offset: int
    count: int
    op: str
    path: tuple[str, ...]
    deps: tuple[int, ...] = ()

    def size_bytes(self, dtype: str) -> int:
        """Bytes this transfer carries for elements of ``dtype``."""
        return self.count * DTYPES[dtype]


@dataclass(frozen=True)
class Schedule:
    """An AllReduce plan: the topology it was made for (``{"family", "params"}``), the buffer
    every server contributes (``size_bytes`` of ``dtype`` elements) and the transfers."""

    topology: dict[str, Any]
    size_bytes: int
    dtype: str
    transfers: tuple[Transfer, ...]
    algo: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def elements(self) -> int:
        """Number of elements in each server's buffer."""
        return self.size_bytes // DTYPES[self.dtype]

    def by_id(self) -> dict[int, Transfer]:
        """The transfers keyed by id."""
        return {t.id: t for t in self.transfers}

    def to_json(self, indent: int | None = None) -> str:
        """Serialise to JSON; ``Schedule.from_json(s.to_json()) == s``."""
        doc = {
            "schema_version": SCHEMA_VERSION,
            "algo": self.algo,
            "topology": self.topology,
            "size_bytes": self.size_bytes,
            "dtype": self.dtype,
            "meta": self.meta,
            "transfers": [
                {
                    "id": t.id,
                    "src": t.src,
                    "dst": t.dst,
                    "offset": t.offset,
                    "count": t.count,
                    "op": t.op,
                    "path": list(t.path),
                    "deps": list(t.deps),
                }
                for t in self.transfers
            ],
        }
        return json.dumps(doc, indent=indent, sort_keys=False)

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        """Parse JSON made by ``to_json``; a malformed document raises ScheduleError naming the
        offending field."""
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScheduleError(f"line {exc.lineno}: schedule is not valid JSON ({exc.msg})") \
                from None
        if isinstance(doc, dict):  # optional fields of a hand-written schedule
            doc = {"algo": "", "meta": {}, **doc}
        _check_keys(doc, "schedule", {f.name for f in fields(cls)} | {"schema_version"})
        if doc["schema_version"] != SCHEMA_VERSION:
            raise ScheduleError(
                f"schedule.schema_version is {doc['schema_version']!r}; this version reads "
                f"{SCHEMA_VERSION}"
            )
        _check_type(doc["topology"], dict, "schedule.topology")
        _check_type(doc["meta"], dict, "schedule.meta")
        _check_type(doc["algo"], str, "schedule.algo")
        _check_type(doc["size_bytes"], int, "schedule.size_bytes")
        _check_type(doc["dtype"], str, "schedule.dtype")
        _check_type(doc["transfers"], list, "schedule.transfers")
        transfers = []
        names = {f.name for f in fields(Transfer)}
        for i, item in enumerate(doc["transfers"]):
            where = f"schedule.transfers[{i}]"
            _check_keys(item, where, names)
            for key, kind in (("id", int), ("src", str), ("dst", str), ("offset", int),
                              ("count", int), ("op", str), ("path", list), ("deps", list)):
                _check_type(item[key], kind, f"{where}.{key}")
            for j, node in enumerate(item["path"]):
                _check_type(node, str, f"{where}.path[{j}]")
            for j, dep in enumerate(item["deps"]):
                _check_type(dep, int, f"{where}.deps[{j}]")
            transfers.append(Transfer(**{**item, "path": tuple(item["path"]),
                                         "deps": tuple(item["deps"])}))
        schedule = cls(
            topology=doc["topology"], size_bytes=doc["size_bytes"], dtype=doc["dtype"],
            transfers=tuple(transfers), algo=doc["algo"], meta=doc["meta"],
        )
        _check_buffer(schedule)
        return schedule


def read_schedule(path: str | Path) -> Schedule:
    """The Schedule in a JSON file; ValueError (ScheduleError), one line naming the file and
    the first faulty field, when it cannot be read or parsed."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ScheduleError(f"cannot read schedule file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ScheduleError(f"{path}: not UTF-8 text") from None
    try:
        return Schedule.from_json(text)
    except ScheduleError as exc:
        raise ScheduleError(f"{path}: {exc}") from None


def _check_keys(doc: object, where: str, expected: set[str]) -> None:
    if not isinstance(doc, dict):
        raise ScheduleError(f"{where} must be a JSON object")
    for key in doc:
        if key not in expected:
            raise ScheduleError(f"{where} has an unknown field {key!r}")
    for key in sorted(expected):
        if key not in doc:
            raise ScheduleError(f"{where} is missing the field {key!r}")


def _check_type(value: object, kind: type, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ScheduleError(f"{where} must be a {kind.__name__}, got {value!r}")


def _check_buffer(schedule: Schedule) -> None:
    if schedule.dtype not in DTYPES:
        raise ScheduleError(
            f"dtype {schedule.dtype!r} is not one of {', '.join(DTYPES)}"
        )
    item = DTYPES[schedule.dtype]
    if schedule.size_bytes < item or schedule.size_bytes % item:
        raise ScheduleError(
            f"size_bytes {schedule.size_bytes} is not a positive multiple of {item} "
            f"({schedule.dtype})"
        )


def segments(total: int, parts: int) -> list[tuple[int, int]]:
    """Split ``total`` elements into ``parts`` contiguous (offset, count) pieces whose sizes
    differ by at most one; empty pieces are dropped.

    >>> segments(10, 4)
    [(0, 3), (3, 3), (6, 2), (8, 2)]
    """
    base, extra = divmod(total, parts)
    out, offset = [], 0
    for i in range(parts):
        count = base + (1 if i < extra else 0)
        if count:
            out.append((offset, count))
        offset += count
    return out


@dataclass(frozen=True)
class Route:
    """One distinct (src, dst, path) of a schedule and the TCP port its transfers use."""

    src: str
    dst: str
    path: tuple[str, ...]
    tcp_port: int
    transfer_ids: tuple[int, ...]


def routes(schedule: Schedule) -> list[Route]:
    """One Route per distinct (src, dst, path), ports from BASE_TCP_PORT in first-use order."""
    order: dict[tuple, list[int]] = {}
    for t in schedule.transfers:
        order.setdefault((t.src, t.dst, t.path), []).append(t.id)
    if BASE_TCP_PORT + len(order) - 1 > MAX_TCP_PORT:
        raise ScheduleError(
            f"schedule has {len(order)} distinct routes; at most "
            f"{MAX_TCP_PORT - BASE_TCP_PORT + 1} fit in the TCP port range"
        )
    return [
        Route(src, dst, path, BASE_TCP_PORT + i, tuple(ids))
        for i, ((src, dst, path), ids) in enumerate(order.items())
    ]


def topological_order(schedule: Schedule) -> list[Transfer]:
    """Transfers in an order that respects deps (ties by position); ScheduleError on a
    missing dependency or a cycle, naming a transfer on it."""
    by_id = schedule.by_id()
    if len(by_id) != len(schedule.transfers):
        seen: set[int] = set()
        for t in schedule.transfers:
            if t.id in seen:
                raise ScheduleError(f"transfer {t.id}: id used twice")
            seen.add(t.id)
    waiting = {}
    children: dict[int, list[int]] = {t.id: [] for t in schedule.transfers}
    for t in schedule.transfers:
        for d in t.deps:
            if d not in by_id:
                raise ScheduleError(f"transfer {t.id}: depends on unknown transfer {d}")
            if d == t.id:
                raise ScheduleError(f"transfer {t.id}: depends on itself")
            children[d].append(t.id)
        waiting[t.id] = len(set(t.deps))
    position = {t.id: i for i, t in enumerate(schedule.transfers)}
    import heapq

    ready = [(position[i], i) for i, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(by_id[i])
        for c in set(children[i]):
            waiting[c] -= 1
            if waiting[c] == 0:
                heapq.heappush(ready, (position[c], c))
    if len(order) < len(schedule.transfers):
        stuck = min((position[i], i) for i, n in waiting.items() if n > 0)[1]
        raise ScheduleError(f"transfer {stuck}: its dependencies form a cycle")
    return order


def validate(schedule: Schedule, graph: nx.Graph) -> None:
    """Raise ScheduleError unless ``schedule`` is a correct AllReduce on ``graph``.

    Checks, naming the first faulty transfer: segments inside the buffer; every path a simple
    walk in the graph from src to dst (relaying through servers only in server-centric
    families); deps a DAG of existing ids, each received or sent by the transfer's own src (so
    a host decides alone when to start); no race (a write into a server's elements unordered
    with a send, a copy or another write of the same elements there, concurrent reduces
    excepted); and, by symbolic execution, that every server ends holding, for every element,
    the sum of all servers' contributions exactly once.
    """
    _check_buffer(schedule)
    spec = graph.graph.get("spec")
    if spec is not None and schedule.topology != spec:
        raise ScheduleError(
            f"schedule was made for {schedule.topology}, not for this graph ({spec})"
        )
    # topology (and networkx under it) only here: the workers import this module on every
    # emulated host, and a run starts one per server
    from topology.links import relays
    from topology.routing import servers

    rank = {v: r for r, v in enumerate(servers(graph))}
    relay_ok = relays(graph)
    by_id = schedule.by_id()
    for t in schedule.transfers:
        _check_transfer(t, schedule, graph, rank, relay_ok, by_id)
    order = topological_order(schedule)
    _execute(schedule, order, rank)


def _check_transfer(t: Transfer, schedule: Schedule, graph: nx.Graph, rank: dict[str, int],
                    relay_ok: bool, by_id: dict[int, Transfer]) -> None:
    where = f"transfer {t.id}"
    for end in (t.src, t.dst):
        if end not in rank:
            raise ScheduleError(f"{where}: {end!r} is not a server of the graph")
    if t.src == t.dst:
        raise ScheduleError(f"{where}: src and dst are both {t.src}")
    if t.op not in OPS:
        raise ScheduleError(f"{where}: op {t.op!r} is not one of {', '.join(OPS)}")
    if t.count < 1 or t.offset < 0 or t.offset + t.count > schedule.elements:
        raise ScheduleError(
            f"{where}: elements [{t.offset}, {t.offset + t.count}) are not inside the buffer "
            f"of {schedule.elements}"
        )
    if len(t.path) < 2 or t.path[0] != t.src or t.path[-1] != t.dst:
        raise ScheduleError(f"{where}: path does not run from {t.src} to {t.dst}")
    if len(set(t.path)) != len(t.path):
        raise ScheduleError(f"{where}: path visits a node twice")
    for a, b in zip(t.path, t.path[1:], strict=False):
        if not graph.has_edge(a, b):
            raise ScheduleError(f"{where}: path uses {a}-{b}, which is not a link")
    for relay in t.path[1:-1]:
        if not relay_ok and relay in rank:
            raise ScheduleError(f"{where}: path relays through server {relay}, which does not "
                                "forward in this topology")
    for d in t.deps:
        dep = by_id.get(d)
        if dep is not None and t.src not in (dep.src, dep.dst):
            raise ScheduleError(
                f"{where}: depends on transfer {d} ({dep.src}->{dep.dst}), which {t.src} "
                "neither sends nor receives"
            )


def _execute(schedule: Schedule, order: list[Transfer], rank: dict[str, int]) -> None:
    """Symbolic execution on pieces: the buffer is cut at every segment boundary, and each
    server holds, per piece, how many times each server's contribution is in its value."""
    cuts = sorted({0, schedule.elements} | {t.offset for t in order}
                  | {t.offset + t.count for t in order})
    piece = {c: i for i, c in enumerate(cuts)}
    n, pieces = len(rank), len(cuts) - 1
    state = np.zeros((n, pieces, n), dtype=np.int32)
    for r in range(n):
        state[r, :, r] = 1
    position = {t.id: i for i, t in enumerate(order)}
    ancestors = _ancestors(order, position)
    accesses: dict[tuple[int, int], list[tuple[Transfer, str]]] = {}
    last_writer: dict[tuple[int, int], int] = {}
    for t in order:
        s, d = rank[t.src], rank[t.dst]
        lo, hi = piece[t.offset], piece[t.offset + t.count]
        sent = state[s, lo:hi].copy()
        if t.op == "reduce":
            state[d, lo:hi] += sent
            over = np.argwhere(state[d, lo:hi] > 1)
            if len(over):
                p, who = over[0]
                raise ScheduleError(
                    f"transfer {t.id}: adds {_name(rank, who)}'s contribution to "
                    f"{t.dst}'s elements [{cuts[lo + p]}, {cuts[lo + p + 1]}) a second time"
                )
        else:
            state[d, lo:hi] = sent
        for p in range(lo, hi):
            for key, kind in (((s, p), "send"), ((d, p), t.op)):
                for other, other_kind in accesses.get(key, ()):
                    _check_ordered(t, kind, other, other_kind, ancestors, position, key, rank,
                                   cuts)
                accesses.setdefault(key, []).append((t, kind))
            last_writer[(d, p)] = t.id
    want = np.ones(n, dtype=np.int32)
    for r in range(n):
        for p in range(pieces):
            if not np.array_equal(state[r, p], want):
                missing = np.flatnonzero(state[r, p] == 0)
                writer = last_writer.get((r, p))
                blame = (f"transfer {writer}" if writer is not None
                         else "no transfer delivers them")
                raise ScheduleError(
                    f"{blame}: {_name(rank, r)} ends with elements [{cuts[p]}, {cuts[p + 1]}) "
                    f"missing the contribution of {_name(rank, missing[0])}"
                )


def _name(rank: dict[str, int], r: int) -> str:
    return next(v for v, i in rank.items() if i == r)


def _ancestors(order: list[Transfer], position: dict[int, int]) -> list[int]:
    """Per transfer (by position in ``order``), a bitset of the positions that must have
    arrived before it starts."""
    anc = [0] * len(order)
    for i, t in enumerate(order):
        bits = 0
        for d in t.deps:
            j = position[d]
            bits |= anc[j] | (1 << j)
        anc[i] = bits
    return anc


def _check_ordered(t: Transfer, kind: str, other: Transfer, other_kind: str,
                   ancestors: list[int], position: dict[int, int], key: tuple[int, int],
                   rank: dict[str, int], cuts: list[int]) -> None:
    """Raise on a race between two accesses of one server's piece that deps do not order.
    A send reads at its start, a reduce or copy writes at its arrival."""
    if t.id == other.id or (kind == "send" and other_kind == "send"):
        return
    if kind == "reduce" and other_kind == "reduce":
        return
    i, j = position[t.id], position[other.id]
    if (ancestors[i] >> j) & 1 or (ancestors[j] >> i) & 1:
        return
    server, p = key
    raise ScheduleError(
        f"transfer {t.id}: its {kind} races with transfer {other.id}'s {other_kind} on "
        f"{_name(rank, server)}'s elements [{cuts[p]}, {cuts[p + 1]}); no dependency orders them"
    )
