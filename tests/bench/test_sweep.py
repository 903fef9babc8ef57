"""bench.sweep: the spec, the tidy table, resuming, and the sweep in one process and on Ray."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from bench import sweep

REPO = Path(__file__).resolve().parents[2]

SPEC = """
name = "tiny"
schedulers = ["ring", "multitree"]
sizes_mb = [0.5, 1]
seeds = [0, 1]

[[topology]]
family = "bcube"
n = [2, 3]
k = 1

[[topology]]
family = "jellyfish"
switches = 8
ports = 5
uplinks = 3

[[scenario]]
name = "clean"

[[scenario]]
name = "slow"
families = ["bcube"]
link_rate = ["s00-w0_0=2"]
"""

#: A scheduler that takes a while, so that a sweep can be interrupted half-way.
SLOW_PLUGIN = """
import time
from traffic.collectives import build

def ring(graph, size_bytes, dtype):
    time.sleep(0.3)
    return build("ring", graph, size_bytes, dtype)
"""


def write(tmp_path: Path, text: str, name: str = "spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_a_spec_expands_to_its_points(tmp_path):
    spec = sweep.load_spec(write(tmp_path, SPEC))
    # bcube n=2,3 and jellyfish seeds 0,1; "slow" only on the two BCubes
    assert len(spec.points) == (4 + 2) * 2 * 2
    assert spec.out == Path("sweeps/tiny")
    assert len({p.key for p in spec.points}) == len(spec.points)
    labels = {p.label for p in spec.points}
    assert "jellyfish(switches=8,ports=5,uplinks=3,seed=1)" in labels
    assert {p.scenario["name"] for p in spec.points if p.topology.get("family") == "jellyfish"} \
        == {"clean"}


def test_emulated_points_are_their_own_selection(tmp_path):
    text = SPEC + '\n[emulation]\nschedulers = ["ring"]\nsizes_mb = [0.2]\nfamilies = ["bcube"]\n' \
                  'scenarios = ["clean"]\nbw_mbps = 5\n'
    spec = sweep.load_spec(write(tmp_path, text))
    emulated = [p for p in spec.points if p.kind == "emulated"]
    assert [(p.label, p.scheduler, p.size_mb, p.bw_mbps) for p in emulated] == [
        ("bcube(n=2,k=1)", "ring", 0.2, 5), ("bcube(n=3,k=1)", "ring", 0.2, 5)]


@pytest.mark.parametrize("text,message", [
    ("", "needs 'schedulers'"),
    ('schedulers = ["ring"]\nsizes_mb = [1]\ncolour = 1\n[[topology]]\nfamily = "bcube"\n',
     "unknown key 'colour'"),
    ('schedulers = ["ring"]\nsizes_mb = [1]\n[[topology]]\nfamily = "bcube"\nuplinks = 3\n',
     "bcube has no parameter 'uplinks'"),
    ('schedulers = ["ring"]\nsizes_mb = [1]\n[[topology]]\nfamily = "torus"\n',
     "family 'torus' is not one of"),
    ('schedulers = ["nope"]\nsizes_mb = [1]\n[[topology]]\nfamily = "bcube"\n',
     "schedulers: unknown scheduler 'nope'"),
    ('schedulers = ["ring"]\nsizes_mb = [0]\n[[topology]]\nfamily = "bcube"\n',
     "sizes must be > 0"),
    ('schedulers = ["ring"]\nsizes_mb = [1]\n[[topology]]\nfamily = "bcube"\n'
     '[[scenario]]\nlink_rate = ["a-b=1"]\n', r"scenario\[0\] needs a name"),
    ('schedulers = ["ring"]\nsizes_mb = [1]\n[[topology]]\nfile = "missing.graphml"\n',
     "does not exist"),
    ('schedulers = ["ring"]\nsizes_mb = [1]\ncosts = "cheap"\n[[topology]]\nfamily = "bcube"\n',
     "costs must be bandwidth, calibrated or a table"),
    ('schedulers = ["ring"]\nsizes_mb = [1]\n[[topology]]\nfamily = "bcube"\n'
     '[emulation]\nspeed = 1\n', "emulation has an unknown key 'speed'"),
    ("schedulers = [", "not TOML"),
])
def test_a_bad_spec_is_one_line_and_exit_2(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(sweep.SpecError, match=message):
        sweep.load_spec(path)
    proc = subprocess.run([sys.executable, "-m", "bench.sweep", str(path), "--no-ray"],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 2
    assert re.search(message, proc.stderr)
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_one_process_sweep_writes_a_tidy_table_summary_and_plots(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "bench.sweep", str(write(tmp_path, SPEC)),
                           "--no-ray", "--no-progress", "--out", str(out)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    table = rows(out / "points.csv")
    assert len(table) == 24 and all(r["status"] == "ok" for r in table)
    assert list(table[0]) == list(sweep.COLUMNS)
    for r in table:
        assert float(r["simulated_s"]) >= float(r["lower_bound_s"]) * (1 - 1e-9)
        assert r["versions"] and r["costs"]
    slow = [r for r in table if r["scenario"] == "slow" and r["scheduler"] == "ring"]
    clean = {(r["topology"], r["size_mb"]): float(r["simulated_s"]) for r in table
             if r["scenario"] == "clean" and r["scheduler"] == "ring"}
    assert all(float(r["simulated_s"]) > clean[(r["topology"], r["size_mb"])] for r in slow)
    assert "multitree" in proc.stdout and "bcube(n=3,k=1) slow" in proc.stdout
    assert (out / "makespan.png").exists() and (out / "ratio.png").exists()
    again = subprocess.run([sys.executable, "-m", "bench.sweep", str(write(tmp_path, SPEC)),
                            "--no-ray", "--no-progress", "--out", str(out)],
                           capture_output=True, text=True, cwd=REPO, timeout=300)
    assert "24 already done, 0 run" in again.stdout
    assert rows(out / "points.csv") == table


@pytest.mark.parametrize("mode", ["--no-ray", pytest.param("--workers=2",
                                                          marks=pytest.mark.slow)])
def test_an_interrupted_sweep_resumes_without_losing_or_repeating_points(tmp_path, mode):
    (tmp_path / "slowsched.py").write_text(SLOW_PLUGIN)
    spec = write(tmp_path, 'schedulers = ["slowsched:ring"]\n'
                           'sizes_mb = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]\n'
                           'seeds = [0, 1, 2, 3, 4]\n[[topology]]\nfamily = "jellyfish"\n'
                           'switches = 8\nports = 5\nuplinks = 3\n')
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    argv = [sys.executable, "-m", "bench.sweep", str(spec), mode, "--no-progress",
            "--out", str(out)]
    # SIGINT as from a terminal's Ctrl-C: the default action, even when this test runs in a
    # background job (whose children inherit SIGINT ignored)
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    table = out / "points.csv"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not table.exists() or len(rows(table)) < 5):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    first = rows(table)
    assert 5 <= len(first) < 40
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"40 points, {len(first)} already done, {40 - len(first)} run" in done.stdout
    final = rows(table)
    keys = [r["key"] for r in final]
    assert len(keys) == len(set(keys)) == 40
    assert final[:len(first)] == first  # the finished points were not run again


def ray_processes(tmp: Path) -> set[int]:
    """PIDs of the processes whose command line names ``tmp`` (a Ray we started with that
    temp dir) and all their descendants."""
    parent, cmd = {}, {}
    for p in Path("/proc").glob("[0-9]*"):
        try:
            cmd[int(p.name)] = (p / "cmdline").read_bytes()
            parent[int(p.name)] = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, stack = set(), [pid for pid, c in cmd.items()
                           if str(tmp).encode() in c and pid != os.getpid()]
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack += [c for c, p in parent.items() if p == pid]
    return found


def stop_by_pid(tmp: Path) -> None:
    """End what ``ray start --temp-dir tmp`` started, by PID (never ``ray stop``)."""
    for sig, pause in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 1.0)):
        for pid in ray_processes(tmp):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + pause
        while ray_processes(tmp) and time.monotonic() < deadline:
            time.sleep(0.1)


@pytest.mark.slow
def test_the_sweep_on_ray_gives_the_same_table_as_one_process(tmp_path):
    spec = write(tmp_path, SPEC)
    tables = {}
    for mode in ("--no-ray", "--workers=2"):
        out = tmp_path / mode.strip("-")
        proc = subprocess.run([sys.executable, "-m", "bench.sweep", str(spec), mode,
                               "--no-progress", "--out", str(out)],
                              capture_output=True, text=True, cwd=REPO, timeout=600)
        assert proc.returncode == 0, proc.stderr
        tables[mode] = {r["key"]: r for r in rows(out / "points.csv")}
    alone, ray = tables["--no-ray"], tables["--workers=2"]
    assert set(alone) == set(ray)
    for key, r in ray.items():
        assert r["node"] != "local" and alone[key]["node"] == "local"
        for column in ("simulated_s", "lower_bound_s", "optimum_s", "transfers", "status"):
            assert r[column] == alone[key][column], (key, column)


@pytest.mark.slow
def test_a_sweep_runs_on_a_two_node_cluster(tmp_path):
    """A head and a worker node started with ``ray start`` on this machine (127.0.0.1),
    one CPU each: the sweep connects with --address and its points run on both."""
    (tmp_path / "slowsched.py").write_text(SLOW_PLUGIN)
    token = tmp_path / "token"
    token.write_text(os.urandom(32).hex())
    # Ray's socket paths must stay within 107 bytes: a short dir of our own, removed after
    temp = Path(tempfile.mkdtemp(prefix="artb-ray-", dir="/tmp"))
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token),
           "RAY_USAGE_STATS_ENABLED": "0",
           "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    ray_cli = str(Path(sys.executable).with_name("ray"))
    with socket_port() as port:
        address = f"127.0.0.1:{port}"
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", f"--temp-dir={temp}",
              "--object-store-memory=100000000", "--disable-usage-stats"]
    try:
        for argv in ([ray_cli, "start", "--head", f"--port={port}", "--include-dashboard=false",
                      *common], [ray_cli, "start", f"--address={address}", *common]):
            started = subprocess.run(argv, env=env, capture_output=True, text=True,
                                     timeout=120)
            assert started.returncode == 0, started.stderr[-2000:]
        spec = write(tmp_path, 'schedulers = ["slowsched:ring"]\nsizes_mb = [0.1, 0.2]\n'
                               'seeds = [0, 1, 2, 3, 4]\n[[topology]]\nfamily = "jellyfish"\n'
                               'switches = 8\nports = 5\nuplinks = 3\n')
        out = tmp_path / "out"
        proc = subprocess.run([sys.executable, "-m", "bench.sweep", str(spec), "--address",
                               address, "--no-progress", "--out", str(out)],
                              env=env, capture_output=True, text=True, cwd=REPO, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        table = rows(out / "points.csv")
        assert len(table) == 10 and all(r["status"] == "ok" for r in table)
        assert len({r["node"] for r in table}) == 2  # tasks ran on both nodes
    finally:
        stop_by_pid(temp)
        shutil.rmtree(temp, ignore_errors=True)
    assert not ray_processes(temp)


@pytest.mark.slow
def test_a_terminated_ray_sweep_leaves_no_ray_behind(tmp_path):
    (tmp_path / "slowsched.py").write_text(SLOW_PLUGIN)
    spec = write(tmp_path, 'schedulers = ["slowsched:ring"]\n'
                           'sizes_mb = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]\n'
                           'seeds = [0, 1, 2, 3, 4]\n[[topology]]\nfamily = "jellyfish"\n'
                           'switches = 8\nports = 5\nuplinks = 3\n')
    temp = Path(tempfile.mkdtemp(prefix="artb-ray-", dir="/tmp"))  # the local Ray's files
    env = {**os.environ, "RAY_TMPDIR": str(temp),
           "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "bench.sweep", str(spec), "--workers=2",
                             "--no-progress", "--out", str(out)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (not (out / "points.csv").exists()
                                               or len(rows(out / "points.csv")) < 3):
            time.sleep(0.05)
        assert ray_processes(temp)  # the sweep's own Ray is running
        proc.terminate()
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err
        deadline = time.monotonic() + 10
        while ray_processes(temp) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not ray_processes(temp)
        assert 3 <= len(rows(out / "points.csv")) < 40
    finally:
        if proc.poll() is None:
            proc.kill()
        stop_by_pid(temp)
        shutil.rmtree(temp, ignore_errors=True)


class socket_port:
    """A free TCP port on 127.0.0.1 (closed again on exit)."""

    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        return self.sock.getsockname()[1]

    def __exit__(self, *exc) -> None:
        self.sock.close()


@pytest.mark.emulation
def test_emulated_points_run_one_at_a_time_next_to_simulated_ones(tmp_path):
    spec = write(tmp_path, 'schedulers = ["ring", "multitree"]\nsizes_mb = [0.1, 0.5]\n'
                           '[[topology]]\nfamily = "bcube"\nn = 2\nk = 1\n'
                           '[emulation]\nsizes_mb = [0.1]\nbw_mbps = 10\n')
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "bench.sweep", str(spec), "--workers", "2",
                           "--no-progress", "--out", str(out)],
                          capture_output=True, text=True, cwd=REPO, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = rows(out / "points.csv")
    emulated = sorted((r for r in table if r["kind"] == "emulated"),
                      key=lambda r: float(r["started"]))
    assert len(emulated) == 2 and len(table) == 6
    for r in emulated:
        assert r["status"] == "ok" and r["verified"] == "True"
        assert float(r["emulated_s"]) > 0 and abs(float(r["error_pct"])) < 100
        assert json.loads(r["costs"])["goodput_ratio"] > 0  # the run's calibration
    first, second = emulated
    assert float(first["started"]) + float(first["seconds"]) <= float(second["started"])
    assert "emulated bcube(n=2,k=1) clean ring 0.1 MB" in proc.stdout
    assert (out / "emu_vs_sim.png").exists()


def test_without_ray_the_sweep_says_how_to_install_it(tmp_path):
    spec = write(tmp_path, SPEC)
    code = ("import runpy, sys; sys.modules['ray'] = None; "
            f"sys.argv = ['bench.sweep', {str(spec)!r}, '--out', {str(tmp_path / 'o')!r}]; "
            "runpy.run_module('bench.sweep', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("python -m bench.sweep: error: Ray is not installed: "
                                   "pip install '.[ray]' (or scripts/setup.sh)")
