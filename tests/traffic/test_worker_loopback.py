"""The socket AllReduce worker, run for real on loopback addresses (no namespaces needed)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import networkx as nx
import numpy as np
import pytest

import topology as tp
from traffic.runner import WorkerError, WorkerPool, run_workers
from traffic.schedule import Schedule, Transfer, routes, validate
from traffic.worker import check_sum, expected_sum, initial_buffer


def ps_schedule(graph, elements, dtype="int32"):
    """A hand-made parameter-server AllReduce (independent of traffic.collectives)."""
    servers = tp.servers(graph)
    root, others = servers[0], servers[1:]
    ts = [Transfer(i, s, root, 0, elements, "reduce", tuple(nx.shortest_path(graph, s, root)))
          for i, s in enumerate(others)]
    pushed = tuple(t.id for t in ts)
    ts += [Transfer(len(others) + i, root, s, 0, elements, "copy",
                    tuple(nx.shortest_path(graph, root, s)), pushed)
           for i, s in enumerate(others)]
    itemsize = np.dtype(dtype).itemsize
    return Schedule(graph.graph["spec"], elements * itemsize, dtype, tuple(ts), "ps")


def loopback(graph):
    servers = tp.servers(graph)
    ranks = {s: i for i, s in enumerate(servers)}
    addresses = {s: f"127.0.{i // 250}.{i % 250 + 2}" for s, i in ranks.items()}
    return ranks, addresses


def spawn(server, argv):
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)


@pytest.mark.parametrize("dtype", ["int32", "float32", "int64", "float64"])
def test_ps_runs_and_verifies_on_loopback(tmp_path, dtype):
    g = tp.bcube_graph(2, 1)
    sch = ps_schedule(g, 50_000, dtype)
    validate(sch, g)
    ranks, addresses = loopback(g)
    run = run_workers(sch, addresses, ranks, spawn, tmp_path, seed=3, timeout_s=30)
    assert run.verified == {s: True for s in ranks}
    assert set(run.start_s) == set(run.finish_s) == {t.id for t in sch.transfers}
    for t in sch.transfers:
        assert 0 <= run.start_s[t.id] <= run.finish_s[t.id]
        for d in t.deps:  # a transfer starts only after its deps arrived
            assert run.start_s[t.id] >= run.finish_s[d]
    assert run.makespan_s == max(run.finish_s.values())


def test_wrong_sum_fails_naming_the_server(tmp_path):
    g = tp.bcube_graph(2, 1)
    sch = ps_schedule(g, 1000)
    # Drop one push: the root's sum misses a contribution (validate would reject this).
    broken = dataclasses.replace(sch, transfers=tuple(
        dataclasses.replace(t, deps=tuple(d for d in t.deps if d != 0)) if t.op == "copy" else t
        for t in sch.transfers if t.id != 0))
    ranks, addresses = loopback(g)
    with pytest.raises(WorkerError, match=r"server s\d\d.*wrong elements"):
        run_workers(broken, addresses, ranks, spawn, tmp_path, timeout_s=20)


def test_a_pool_keeps_its_workers_from_run_to_run(tmp_path):
    g = tp.bcube_graph(2, 1)
    ranks, addresses = loopback(g)
    pool = WorkerPool(spawn)
    try:
        pids = []
        for k, elements in enumerate((1000, 3000)):  # two schedules, one set of workers
            sch = ps_schedule(g, elements)
            run = run_workers(sch, addresses, ranks, None, tmp_path / f"run {k}", seed=k,
                              timeout_s=20, pool=pool)
            assert run.verified == {s: True for s in ranks}
            assert set(run.finish_s) == {t.id for t in sch.transfers}
            pids.append({s: p.pid for s, p in pool.procs.items()})
        assert pids[0] == pids[1] and set(pids[0]) == set(ranks)
        # a failed run ends the workers it used; the next run starts new ones
        broken = dataclasses.replace(sch, transfers=tuple(
            dataclasses.replace(t, deps=tuple(d for d in t.deps if d != 0))
            if t.op == "copy" else t for t in sch.transfers if t.id != 0))
        used = list(pool.procs.values())
        with pytest.raises(WorkerError, match=r"wrong elements"):
            run_workers(broken, addresses, ranks, None, tmp_path / "broken", timeout_s=20,
                        pool=pool)
        assert all(p.poll() is not None for p in used) and not pool.procs
        run = run_workers(sch, addresses, ranks, None, tmp_path / "again", timeout_s=20,
                          pool=pool)
        assert run.verified == {s: True for s in ranks}
        assert not {p.pid for p in pool.procs.values()} & {p.pid for p in used}
        # a worker that died between runs is replaced, its pipes closed
        dead = pool.procs["s00"]
        dead.kill()
        dead.wait()
        run = run_workers(sch, addresses, ranks, None, tmp_path / "after a death",
                          timeout_s=20, pool=pool)
        assert run.verified == {s: True for s in ranks}
        assert pool.procs["s00"].pid != dead.pid and dead.stdin.closed and dead.stdout.closed
    finally:
        procs = list(pool.procs.values())
        pool.close()
    assert procs and all(p.returncode == 0 for p in procs)  # stdin closed: they exit
    assert not pool.procs


def test_workers_check_against_the_runners_sum_file(tmp_path):
    g = tp.bcube_graph(2, 1)
    sch = ps_schedule(g, 1000)
    ranks, addresses = loopback(g)
    run_workers(sch, addresses, ranks, spawn, tmp_path, seed=4, timeout_s=20)
    saved = np.load(tmp_path / "expected.npy")
    assert np.array_equal(saved, expected_sum(len(ranks), 1000, "int32", 4))
    job = json.loads((tmp_path / "job.json").read_text())
    assert job["expected"] == str(tmp_path / "expected.npy")
    # the workers read that file: a sum file that disagrees fails every one of them
    real_save = np.save

    def off_by_one(path, array):
        real_save(path, array + 1)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(np, "save", off_by_one)
        with pytest.raises(WorkerError, match=r"server s\d\d.*wrong elements"):
            run_workers(sch, addresses, ranks, spawn, tmp_path / "off", seed=4, timeout_s=20)


STALLING_PEER = """
import socket, sys, time
socks = []
for port in map(int, sys.argv[2:]):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], port)); s.listen(8); socks.append(s)
print("ready", flush=True)
sys.stdin.readline()
time.sleep(60)  # accepts into the backlog, never reads, never acknowledges
"""


def test_stuck_transfer_times_out_naming_it(tmp_path):
    g = tp.bcube_graph(2, 1)
    sch = ps_schedule(g, 1000)
    ranks, addresses = loopback(g)
    ports = sorted({r.tcp_port for r in routes(sch) if r.dst == "s00"})

    def stalling_root(server, argv):
        if server == "s00":
            argv = [sys.executable, "-c", STALLING_PEER, addresses["s00"], *map(str, ports)]
        return spawn(server, argv)

    # The sender's socket may give up first ("sending to s00 failed: timed out") or the
    # transfer's deadline ("not done after the 3 s timeout"); both name server and transfer.
    with pytest.raises(WorkerError,
                       match=r"server s\d\d, transfer \d+ .*(timeout|timed out)"):
        run_workers(sch, addresses, ranks, stalling_root, tmp_path, timeout_s=3)


def test_expected_sum_and_check():
    total = expected_sum(3, 100, "int32", seed=1)
    mine = sum(initial_buffer(r, 100, "int32", 1).astype(np.int64) for r in range(3))
    assert np.array_equal(total, mine)
    assert check_sum(mine.astype(np.int32), total)[0]
    off = mine.astype(np.int32)
    off[7] += 1
    ok, message = check_sum(off, total)
    assert not ok and "first at 7" in message


def test_time_scale_reads_artb_time_scale(monkeypatch):
    from traffic.runner import time_scale

    monkeypatch.delenv("ARTB_TIME_SCALE", raising=False)
    assert time_scale() == 1.0
    monkeypatch.setenv("ARTB_TIME_SCALE", "20")
    assert time_scale() == 20.0
    for bad in ("0.5", "fast", "nan", "inf", ""):
        monkeypatch.setenv("ARTB_TIME_SCALE", bad)
        with pytest.raises(ValueError, match=f"ARTB_TIME_SCALE={bad!r}"):
            time_scale()
