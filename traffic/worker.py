"""The AllReduce worker: one process per server, run inside that server's network namespace.

``python -m traffic.worker --server NAME`` runs one job after another: for each, a line ``job``
and the JSON list [job file, report file] on stdin. It reads the job file (the Schedule JSON,
every server's IP address, the seed, the timeout and the file holding the true sum),
listens on the TCP ports of its incoming routes, prints ``ready``, waits for ``go T0`` on stdin
(T0 on the monotonic clock, which all namespaces of one kernel share), opens one connection per
outgoing route before T0 (as a collective library connects its communicator before the first
collective), then runs its transfers in dependency order: real buffer bytes (numpy), framed;
``reduce`` adds into the partial sum, ``copy`` stores; the receiver acknowledges each message
with one byte. Connections persist: a transfer takes an idle connection of its route, or opens
one when every connection of the route is busy (concurrent transfers on one route share its
links as separate flows), and gives it back when acknowledged. It writes its per-transfer times
(seconds after T0) and, after ``verify`` on stdin, checks its buffer against the true
elementwise sum and writes the verdict. Any failure is reported naming this server and the
transfer, and the process exits 1; when stdin ends it exits 0. Kept from one run to the next
(``traffic.runner.WorkerPool``), a worker spares each run the start-up of a Python process
per server.
"""

from __future__ import annotations

import argparse
import json
import select
import socket
import struct
import sys
import threading
import time
from pathlib import Path

import numpy as np

from traffic.schedule import Schedule, Transfer, routes

MAGIC = b"ARTB"
HEADER = struct.Struct("!4sIQQ")  # magic, transfer id, element offset, element count
ACK = b"\x06"

#: Send and receive buffer of every data connection. Bounded on purpose: it bounds the data a
#: connection keeps queued at a link (its window: about 7 frames of 9000 bytes), and so how
#: long others wait behind it; 64 KiB still keeps a 100 Mbit/s link busy at ms round trips.
SOCKET_BUFFER_BYTES = 64 * 1024


def initial_buffer(rank: int, elements: int, dtype: str, seed: int) -> np.ndarray:
    """The deterministic buffer server ``rank`` contributes (integers in [-1000, 1000) for
    integer dtypes, standard normal values for floats)."""
    rng = np.random.default_rng([seed, rank])
    if dtype.startswith("int"):
        return rng.integers(-1000, 1000, size=elements).astype(dtype)
    return rng.standard_normal(elements).astype(dtype)


def expected_sum(ranks: int, elements: int, dtype: str, seed: int) -> np.ndarray:
    """The true elementwise sum of every server's initial buffer (in float64 for floats)."""
    total = np.zeros(elements, dtype=np.int64 if dtype.startswith("int") else np.float64)
    for r in range(ranks):
        total += initial_buffer(r, elements, dtype, seed)
    return total


def check_sum(buffer: np.ndarray, expected: np.ndarray) -> tuple[bool, str]:
    """Exact comparison for integers, a float tolerance scaled to the number of addends."""
    if buffer.dtype.kind == "i":
        bad = np.flatnonzero(buffer.astype(np.int64) != expected)
    else:
        tol = 1e-4 if buffer.dtype == np.float32 else 1e-9
        bad = np.flatnonzero(~np.isclose(buffer.astype(np.float64), expected, rtol=tol,
                                         atol=tol * 10))
    if len(bad) == 0:
        return True, "sum correct"
    i = int(bad[0])
    return False, (f"{len(bad)} wrong elements, first at {i}: holds {buffer[i]!r}, "
                   f"the sum is {expected[i]!r}")


class TransferFailed(RuntimeError):
    """A transfer this worker sends or receives went wrong."""


class Worker:
    """One server's side of a Schedule."""

    def __init__(self, schedule: Schedule, server: str, addresses: dict[str, str],
                 ranks: dict[str, int], seed: int, timeout_s: float):
        self.schedule = schedule
        self.server = server
        self.addresses = addresses
        self.ranks = ranks
        self.timeout_s = timeout_s
        self.rank = ranks[server]
        self.seed = seed
        self.buffer = initial_buffer(self.rank, schedule.elements, schedule.dtype, seed)
        self.lock = threading.Lock()
        self.outgoing = [t for t in schedule.transfers if t.src == server]
        self.incoming = {t.id: t for t in schedule.transfers if t.dst == server}
        self.port = {tid: r.tcp_port for r in routes(schedule) for tid in r.transfer_ids}
        self.done = {t.id: threading.Event() for t in schedule.transfers
                     if server in (t.src, t.dst)}
        self.start_s: dict[int, float] = {}
        self.finish_s: dict[int, float] = {}
        self.errors: list[str] = []
        self.t0 = 0.0
        self.listeners: list[socket.socket] = []
        self.idle: dict[int, list[socket.socket]] = {}  # route port -> idle connections
        self.idle_lock = threading.Lock()
        self.connections: list[socket.socket] = []
        self.go = threading.Event()
        self.started = False

    # ---- set-up ---------------------------------------------------------------------------
    def listen(self) -> None:
        """Bind a listening socket on every port of this server's incoming routes."""
        ip = self.addresses[self.server]
        for port in sorted({self.port[tid] for tid in self.incoming}):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER_BYTES)
            sock.bind((ip, port))
            sock.listen(64)
            self.listeners.append(sock)

    # ---- receiving -------------------------------------------------------------------------
    def _accept_loop(self, sock: socket.socket) -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            threading.Thread(target=self._receive, args=(conn, sock.getsockname()[1]),
                             daemon=True).start()

    def _receive(self, conn: socket.socket, port: int) -> None:
        """Receive messages on one connection until the sender closes it between two."""
        tid = None
        try:
            conn.settimeout(self.timeout_s)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while True:
                tid = None
                header = _read_exactly(conn, HEADER.size, eof_ok=True)
                if header is None:
                    return
                magic, tid, offset, count = HEADER.unpack(header)
                t = self.incoming.get(tid)
                if magic != MAGIC or t is None or (t.offset, t.count) != (offset, count):
                    raise TransferFailed(f"unexpected message header for transfer {tid}")
                if self.port[tid] != port:
                    raise TransferFailed(f"transfer {tid} arrived on port {port}, its route "
                                         f"uses {self.port[tid]}")
                data = np.frombuffer(_read_exactly(conn, count * self.buffer.itemsize),
                                     dtype=self.buffer.dtype)
                with self.lock:
                    if t.op == "reduce":
                        self.buffer[offset:offset + count] += data
                    else:
                        self.buffer[offset:offset + count] = data
                self.finish_s[tid] = time.monotonic() - self.t0
                conn.sendall(ACK)
                self.done[tid].set()
        except (OSError, TransferFailed, struct.error) as exc:
            self._fail(tid, "receiving", exc)
        finally:
            conn.close()

    # ---- sending ---------------------------------------------------------------------------
    def _new_connection(self, dst: str, port: int) -> socket.socket:
        """A socket bound to this server's address, buffers bounded, not yet connected."""
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.connections.append(c)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES)
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.bind((self.addresses[self.server], 0))
        return c

    def connect_ahead(self, until: float) -> None:
        """Open one connection per outgoing route, all at once, until ``until`` (monotonic);
        routes still connecting then are left to their first transfer."""
        wanted = {(t.dst, self.port[t.id]) for t in self.outgoing}
        pending: dict[socket.socket, int] = {}
        for dst, port in sorted(wanted):
            try:
                c = self._new_connection(dst, port)
                c.setblocking(False)
                c.connect_ex((self.addresses[dst], port))
                pending[c] = port
            except OSError:
                continue
        while pending and time.monotonic() < until:
            _, writable, _ = select.select([], list(pending), [], until - time.monotonic())
            for c in writable:
                port = pending.pop(c)
                if c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    c.setblocking(True)
                    with self.idle_lock:
                        self.idle.setdefault(port, []).append(c)
                else:
                    c.close()
        for c in pending:
            c.close()

    def _connection(self, dst: str, port: int, timeout: float) -> socket.socket:
        """An idle connection of the route, or a new one."""
        with self.idle_lock:
            free = self.idle.get(port)
            if free:
                c = free.pop()
                c.settimeout(timeout)
                return c
        c = self._new_connection(dst, port)
        c.settimeout(timeout)
        c.connect((self.addresses[dst], port))
        return c

    def _send(self, t: Transfer) -> None:
        try:
            self.go.wait()
            deadline = self.t0 + self.timeout_s
            for d in t.deps:
                if not self.done[d].wait(max(0.0, deadline - time.monotonic())):
                    raise TransferFailed(f"timed out waiting for transfer {d}")
                if self.errors:
                    return
            self.start_s[t.id] = time.monotonic() - self.t0
            with self.lock:
                payload = self.buffer[t.offset:t.offset + t.count].tobytes()
            port = self.port[t.id]
            c = self._connection(t.dst, port, max(0.1, deadline - time.monotonic()))
            c.sendall(HEADER.pack(MAGIC, t.id, t.offset, t.count) + payload)
            if _read_exactly(c, 1) != ACK:
                raise TransferFailed("no acknowledgement from the receiver")
            with self.idle_lock:
                self.idle.setdefault(port, []).append(c)
            self.done[t.id].set()
        except (OSError, TransferFailed) as exc:
            self._fail(t.id, f"sending to {t.dst}", exc)

    def _fail(self, tid: int | None, what: str, exc: BaseException) -> None:
        self.errors.append(f"server {self.server}, transfer {tid}: {what} failed: {exc}")
        for event in self.done.values():  # wake every waiting sender so the worker ends
            event.set()

    # ---- the run ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start the accept loops and one thread per outgoing transfer, which waits for
        ``run()`` (so that at the common start no worker is still creating threads)."""
        if self.started:
            return
        self.started = True
        for sock in self.listeners:
            threading.Thread(target=self._accept_loop, args=(sock,), daemon=True).start()
        for t in self.outgoing:
            threading.Thread(target=self._send, args=(t,), daemon=True).start()

    def run(self) -> bool:
        """Run every transfer of this server; True when all arrived within the timeout."""
        self.start()
        self.go.set()
        deadline = self.t0 + self.timeout_s
        for tid in list(self.incoming) + [t.id for t in self.outgoing]:
            if not self.done[tid].wait(max(0.0, deadline - time.monotonic())):
                t = self.schedule.by_id()[tid]
                self.errors.append(f"server {self.server}, transfer {tid} ({t.src}->{t.dst}): "
                                   f"not done after the {self.timeout_s:g} s timeout")
                break
            if self.errors:
                break
        for sock in self.listeners:
            try:  # wakes the accept loop (a bare close would leave the port bound while
                sock.shutdown(socket.SHUT_RDWR)  # it waits, and the next job needs it)
            except OSError:
                pass
        for sock in self.listeners + self.connections:
            sock.close()
        return not self.errors

    def verify(self, expected: Path) -> tuple[bool, str]:
        """Compare the final buffer with the true sum of every server's contribution, the
        array saved in ``expected`` (``numpy.save``: ``traffic.runner`` computes it once for
        all workers with ``expected_sum``)."""
        return check_sum(self.buffer, np.load(expected))


def _read_exactly(conn: socket.socket, size: int, eof_ok: bool = False) -> bytes | None:
    """``size`` bytes; None when ``eof_ok`` and the peer closed before the first byte."""
    data = bytearray(size)
    view, got = memoryview(data), 0
    while got < size:
        n = conn.recv_into(view[got:], min(size - got, 1 << 20))
        if n == 0:
            if eof_ok and got == 0:
                return None
            raise TransferFailed(f"connection closed after {got} of {size} bytes")
        got += n
    return bytes(data)


def run_job(job_path: Path, server: str, out: Path) -> int:
    """One job, as ``main`` describes it: 0 when its sum was verified, else 1."""
    job = json.loads(job_path.read_text())
    schedule = Schedule.from_json(job["schedule"])
    worker = Worker(schedule, server, job["addresses"], job["ranks"], job["seed"],
                    job["timeout_s"])
    report: dict = {"server": server}
    try:
        worker.listen()
    except OSError as exc:
        report["errors"] = [f"server {server}: cannot listen: {exc}"]
        out.write_text(json.dumps(report))
        print("failed", flush=True)
        return 1
    print("ready", flush=True)
    line = sys.stdin.readline().split()
    if len(line) != 2 or line[0] != "go":
        return 1
    worker.t0 = float(line[1])
    worker.connect_ahead(until=worker.t0)
    worker.start()
    time.sleep(max(0.0, worker.t0 - time.monotonic()))
    ok = worker.run()
    report.update(start_s=worker.start_s, finish_s=worker.finish_s, errors=worker.errors)
    out.write_text(json.dumps(report))
    print("done" if ok else "failed", flush=True)
    if not ok:
        return 1
    if sys.stdin.readline().strip() != "verify":
        return 1
    good, message = worker.verify(Path(job["expected"]))
    report.update(verified=good, verify_message=message)
    out.write_text(json.dumps(report))
    print("verified" if good else "wrong", flush=True)
    return 0 if good else 1


def main() -> int:
    """Entry point of ``python -m traffic.worker`` (started by the emulation, not by users):
    the jobs named on stdin (module doc), until stdin ends (0) or a job fails (1: the process
    is not reused after a failure)."""
    parser = argparse.ArgumentParser(prog="python -m traffic.worker",
                                     description="Run one server's side of Schedules, one "
                                                 "job after another named on stdin.")
    parser.add_argument("--server", required=True, help="this server's name")
    args = parser.parse_args()
    while line := sys.stdin.readline():
        word, _, rest = line.partition(" ")
        try:
            job, out = json.loads(rest) if word == "job" else (None, None)
        except ValueError:
            job = out = None
        if not (isinstance(job, str) and isinstance(out, str)):
            return 1
        if run_job(Path(job), args.server, Path(out)):
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
