"""Start one worker per server, release them together, and collect what they measured.

The caller supplies ``spawn(server, argv)``, which starts ``argv`` where that server lives (a
Mininet host's namespace, or plainly on loopback in tests) and returns a ``subprocess.Popen``
with pipes for stdin and stdout. The workers are a ``WorkerPool``'s: the caller's, which keeps
them from one run to the next and ends them on ``close()``, or one of the run's own, ended
with it, also on failure.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from traffic.schedule import Schedule
from traffic.worker import expected_sum

Spawn = Callable[[str, list[str]], subprocess.Popen]


def time_scale() -> float:
    """How many times slower than an ordinary machine this one runs: ``ARTB_TIME_SCALE``
    (default 1; the box under software emulation, scripts/box_test.py, sets 20). Fixed time
    limits that are not about what is measured (a process's start-up, a test's patience)
    are multiplied by it.

    >>> time_scale() >= 1
    True
    """
    raw = os.environ.get("ARTB_TIME_SCALE", "1")
    try:
        scale = float(raw)
    except ValueError:
        scale = 0.0
    if not 1 <= scale < float("inf"):
        raise ValueError(f"ARTB_TIME_SCALE={raw!r}: expected a number >= 1")
    return scale


#: Seconds every worker has to start and report ready (plus 0.2 s per server), times
#: ``time_scale()``.
START_S = 30.0
#: Time between the go signal and the common start, so every worker is waiting when it comes.
START_DELAY_S = 0.3


class WorkerError(RuntimeError):
    """A worker failed, timed out or computed a wrong sum; the message names the server and
    the transfer."""


@dataclass(frozen=True)
class WorkerRun:
    """What the workers measured: per-transfer start (at the sender) and arrival (at the
    receiver) in seconds after the common start, and each server's verdict on its sum."""

    start_s: dict[int, float]
    finish_s: dict[int, float]
    verified: dict[str, bool]
    wall_s: float
    #: ``time.monotonic()`` of the common start (the zero of the times above).
    t0: float = 0.0

    @property
    def makespan_s(self) -> float:
        """Arrival of the last transfer."""
        return max(self.finish_s.values(), default=0.0)


class WorkerPool:
    """Worker processes kept from one run to the next: one per server, started by ``spawn``
    on first use (``python -m traffic.worker``), each running the jobs ``run_workers`` gives
    it. A run that fails ends the workers it used (the next run starts new ones);
    ``close()`` ends them all: stdin closed, then killed after ``CLOSE_S``. Not thread-safe:
    one thread runs and closes (``close()`` during a run on another thread breaks its pipes
    under it)."""

    #: Seconds a worker has to exit once its stdin is closed.
    CLOSE_S = 1.0

    def __init__(self, spawn: Spawn, python: str = sys.executable) -> None:
        self.spawn, self.python = spawn, python
        self.procs: dict[str, subprocess.Popen] = {}

    def get(self, servers: Sequence[str]) -> dict[str, subprocess.Popen]:
        """A live worker per server, started where there is none."""
        for s in servers:
            if s in self.procs and self.procs[s].poll() is not None:
                _end([self.procs.pop(s)], 0.0)  # died since: its pipes closed, reaped
            if s not in self.procs:
                self.procs[s] = self.spawn(s, [self.python, "-m", "traffic.worker",
                                               "--server", s])
        return {s: self.procs[s] for s in servers}

    def discard(self, servers: Sequence[str]) -> None:
        """End these servers' workers now (after a failed run)."""
        _end([self.procs.pop(s) for s in servers if s in self.procs], 0.0)

    def close(self) -> None:
        """End every worker."""
        procs, self.procs = list(self.procs.values()), {}
        _end(procs, self.CLOSE_S)


def _end(procs: list[subprocess.Popen], grace_s: float) -> None:
    """Close each process's stdin, wait up to ``grace_s`` in all, kill what still runs."""
    for p in procs:
        try:
            p.stdin.close()
        except OSError:
            pass
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        for pipe in (p.stdout, p.stderr):
            if pipe is not None:
                pipe.close()


def run_workers(schedule: Schedule, addresses: dict[str, str], ranks: dict[str, int],
                spawn: Spawn, workdir: Path, *, seed: int = 0, timeout_s: float = 120.0,
                python: str = sys.executable,
                events: Sequence[tuple[float, Callable[[], object]]] = (),
                pool: WorkerPool | None = None) -> WorkerRun:
    """Run ``schedule`` with one worker per server and return their measurements; raise
    WorkerError naming the server (and transfer) when any worker fails. ``events`` are
    (seconds after the common start, action) pairs, run on timer threads (a link failing
    mid-run); those not yet due when the run ends are cancelled. With ``pool`` the workers
    are the pool's (``spawn`` and ``python`` unused): they stay for the next run unless this
    one fails; without it a pool of this run's own is started and closed."""
    workdir.mkdir(parents=True, exist_ok=True)
    # the true sum, once for every worker's check (each would otherwise regenerate every
    # server's buffer), before any worker starts so that it takes no time from the run
    expected = workdir / "expected.npy"
    np.save(expected, expected_sum(len(ranks), schedule.elements, schedule.dtype, seed))
    job = workdir / "job.json"
    job.write_text(json.dumps({"schedule": schedule.to_json(), "addresses": addresses,
                               "ranks": ranks, "seed": seed, "timeout_s": timeout_s,
                               "expected": str(expected)}))
    servers = sorted(ranks, key=ranks.get)
    procs: dict[str, subprocess.Popen] = {}
    timers: list[threading.Timer] = []
    reports = {s: workdir / f"worker-{s}.json" for s in servers}
    for path in reports.values():
        path.unlink(missing_ok=True)
    own = pool is None
    if own:
        pool = WorkerPool(spawn, python)
    ok = False
    try:
        procs = pool.get(servers)
        for s in servers:
            _tell(procs[s], "job " + json.dumps([str(job), str(reports[s])]))
        start_s = (START_S + 0.2 * len(servers)) * time_scale()
        _expect(procs, {"ready"}, time.monotonic() + start_s, reports)
        t0 = time.monotonic() + START_DELAY_S
        for p in procs.values():
            _tell(p, f"go {t0!r}")
        for at_s, action in events:
            timer = threading.Timer(max(0.0, t0 + at_s - time.monotonic()), action)
            timer.daemon = True
            timer.start()
            timers.append(timer)
        _expect(procs, {"done"}, t0 + timeout_s + 10, reports)
        wall_s = time.monotonic() - t0
        for p in procs.values():
            _tell(p, "verify")
        _expect(procs, {"verified"}, time.monotonic() + 60 + 2 * len(servers), reports)
        docs = {s: json.loads(reports[s].read_text()) for s in servers}
        ok = True
    finally:
        for timer in timers:
            timer.cancel()
        if not ok:
            pool.discard(servers)
        if own:
            pool.close()
    start_s = {int(k): v for d in docs.values() for k, v in d["start_s"].items()}
    finish_s = {int(k): v for d in docs.values() for k, v in d["finish_s"].items()}
    missing = [t.id for t in schedule.transfers if t.id not in start_s or t.id not in finish_s]
    if missing:
        raise WorkerError(f"transfer {missing[0]}: no measurement was reported")
    return WorkerRun(start_s, finish_s, {s: d["verified"] for s, d in docs.items()}, wall_s,
                     t0)


def _tell(proc: subprocess.Popen, line: str) -> None:
    try:
        proc.stdin.write((line + "\n").encode())
        proc.stdin.flush()
    except (BrokenPipeError, OSError):
        pass  # the process has died; _expect reports why


def _expect(procs: dict[str, subprocess.Popen], words: set[str], deadline: float,
            reports: dict[str, Path]) -> None:
    """Wait until every worker has printed one of ``words``; raise WorkerError otherwise."""
    selector = selectors.DefaultSelector()
    pending = {}
    for server, p in procs.items():
        selector.register(p.stdout, selectors.EVENT_READ, server)
        pending[server] = b""
    try:
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                server = next(iter(pending))
                raise WorkerError(f"server {server}: no '{'/'.join(sorted(words))}' before the "
                                  f"deadline{_why(reports[server])}")
            for key, _ in selector.select(timeout=min(left, 1.0)):
                server = key.data
                chunk = os.read(key.fileobj.fileno(), 4096)
                if not chunk:
                    raise WorkerError(f"server {server}: worker exited "
                                      f"(status {procs[server].wait()}){_why(reports[server])}")
                pending[server] += chunk
                if b"\n" in pending[server]:
                    word = pending[server].split(b"\n", 1)[0].decode().strip()
                    if word not in words:
                        raise WorkerError(f"server {server}: worker says {word!r}"
                                          f"{_why(reports[server])}")
                    selector.unregister(key.fileobj)
                    del pending[server]
    finally:
        selector.close()


def _why(report: Path) -> str:
    """The first error a worker wrote into its report, if any."""
    try:
        doc = json.loads(report.read_text())
    except (OSError, ValueError):
        return ""
    if doc.get("errors"):
        return ": " + doc["errors"][0]
    if doc.get("verified") is False:
        return ": " + doc.get("verify_message", "wrong sum")
    return ""
