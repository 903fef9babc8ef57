"""What an emulated network created, on disk, so a crashed run can be cleaned up.

Like ``mn -c`` but only for our own things: each run records its OVS bridges (also marked in
OVS with ``external-ids:allreduce-testbed=<run id>``), its root-namespace interfaces, its host
shells, its controller process and its extra Open vSwitch instances (``emulation.ovs``) in
``STATE_DIR/<run id>.json``. ``clean()`` removes what
belongs to runs whose owner process is gone, and checks every PID's command line before
signalling it. No Mininet import here.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

STATE_DIR = Path(os.environ.get("ARTB_STATE_DIR", "/var/run/allreduce-testbed"))
#: OVS external-ids key marking a bridge as ours; its value is the run id.
MARK = "allreduce-testbed"


@dataclass
class RunState:
    """Everything one run created (names and PIDs), and who owns the run."""

    run_id: str
    owner_pid: int
    workdir: str
    owner_cmdline: str = ""
    bridges: list[str] = field(default_factory=list)
    root_intfs: list[str] = field(default_factory=list)
    host_pids: dict[str, int] = field(default_factory=dict)
    controller_pid: int | None = None
    controller_marker: str = ""
    extra_pids: dict[str, int] = field(default_factory=dict)
    #: Indexes of the extra Open vSwitch instances started for the run (``emulation.ovs``).
    ovs_instances: list[int] = field(default_factory=list)

    @property
    def path(self) -> Path:
        """Where this state is saved."""
        return STATE_DIR / f"{self.run_id}.json"

    def save(self) -> None:
        """Write the state file atomically."""
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1))
        tmp.replace(self.path)

    def remove(self) -> None:
        """Delete the state file."""
        self.path.unlink(missing_ok=True)


class NetworkLock:
    """One emulated network per machine at a time: they would share names (graph names are
    the join key) and the one OVS forwarding thread. An flock, so a crashed holder releases
    it; the file names the holder for the waiting message."""

    def __init__(self) -> None:
        self._file = None

    def acquire(self, run_id: str, timeout_s: float) -> None:
        """Take the lock, waiting up to ``timeout_s``; TimeoutError naming the holder."""
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        f = open(STATE_DIR / "lock", "a+")
        deadline, told = time.monotonic() + timeout_s, False
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                f.seek(0)
                holder = f.read().strip() or "unknown"
                if time.monotonic() >= deadline:
                    f.close()
                    raise TimeoutError("another emulated network is running "
                                       f"({holder}); waited {timeout_s:.0f} s") from None
                if not told:
                    print(f"emulation: waiting for another emulated network to finish "
                          f"({holder})", file=sys.stderr, flush=True)
                    told = True
                time.sleep(0.2)
        f.seek(0)
        f.truncate()
        f.write(f"run {run_id}, pid {os.getpid()}\n")
        f.flush()
        self._file = f

    def release(self) -> None:
        """Give the lock back (idempotent)."""
        if self._file is not None:
            self._file.truncate(0)
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None


def cmdline(pid: int) -> str:
    """The command line of a live process (arguments joined by spaces), '' when gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def pid_matches(pid: int | None, marker: str) -> bool:
    """True when ``pid`` is alive and its command line contains ``marker``."""
    return bool(pid) and bool(marker) and marker in cmdline(pid)


def terminate(pid: int | None, marker: str, timeout_s: float = 5.0) -> bool:
    """SIGTERM, then SIGKILL after ``timeout_s``, a process that is still ours (its command
    line contains ``marker``); True when it was running."""
    if not pid_matches(pid, marker):
        return False
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            _reap(pid)
            if not pid_matches(pid, marker):
                return True
            time.sleep(0.05)
    return True


def stop_child(proc: subprocess.Popen, timeout_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout_s``, a child this process started, and reap it.
    Its Popen handle makes it ours (its PID cannot be reused before it is reaped), so no
    command-line check: ``terminate`` would skip a child still inside exec, whose
    /proc/PID/cmdline reads empty until the new program's arguments are mapped."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def vsctl(*args: str, timeout_s: int = 10) -> subprocess.CompletedProcess:
    """ovs-vsctl with a timeout (it can hang when ovs-vswitchd is not running)."""
    return subprocess.run(["ovs-vsctl", f"--timeout={timeout_s}", *args], capture_output=True,
                          text=True, timeout=timeout_s + 5)


def marked_bridges() -> dict[str, str]:
    """Our bridges in OVS: bridge name -> run id."""
    out = vsctl("--format=json", "--columns=name,external_ids", "list", "Bridge")
    if out.returncode != 0:
        return {}
    found = {}
    for name, ids in json.loads(out.stdout)["data"]:
        pairs = dict(ids[1]) if isinstance(ids, list) and ids[0] == "map" else {}
        if MARK in pairs:
            found[name] = pairs[MARK]
    return found


def link_exists(name: str) -> bool:
    """True when a network interface of that name exists in the root namespace."""
    return Path("/sys/class/net", name).exists()


def owner_alive(state: RunState) -> bool:
    """True when the process that started the run still runs."""
    if state.owner_pid == os.getpid():
        return True
    return bool(state.owner_cmdline) and cmdline(state.owner_pid) == state.owner_cmdline


def remove_run(state: RunState) -> dict[str, list]:
    """Remove every leftover of one run; what was removed."""
    done: dict[str, list] = {"processes": [], "bridges": [], "links": []}
    if terminate(state.controller_pid, state.controller_marker):
        done["processes"].append(state.controller_pid)
    for name, pid in {**state.host_pids, **state.extra_pids}.items():
        if terminate(pid, f"mininet:{name}" if name in state.host_pids else name, 2.0):
            done["processes"].append(pid)
    ours = [b for b, run in marked_bridges().items() if run == state.run_id]
    if ours:
        vsctl(*[arg for b in ours for arg in ("--", "--if-exists", "del-br", b)])
        done["bridges"] += ours
    for name in state.bridges + state.root_intfs:
        if link_exists(name):
            subprocess.run(["ip", "link", "del", name], capture_output=True, timeout=10)
            done["links"].append(name)
    if state.ovs_instances:
        from emulation.ovs import Instance

        for index in state.ovs_instances:
            try:
                removed = Instance(index, STATE_DIR).stop()
            except RuntimeError as exc:  # the state stays, for the next clean()
                print(f"emulation: {exc}", file=sys.stderr)
                return done
            for what in removed:
                kind, _, name = what.partition(" ")
                done["processes" if kind == "process" else "links"].append(
                    int(name) if kind == "process" else name)
    state.remove()
    return done


def load_states() -> list[RunState]:
    """Every recorded run (unreadable state files are skipped)."""
    states = []
    for path in sorted(STATE_DIR.glob("*.json")) if STATE_DIR.is_dir() else []:
        try:
            states.append(RunState(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):
            continue
    return states


def clean(force: bool = False) -> dict[str, list]:
    """Remove leftovers of crashed runs (``force``: of every recorded run, even live ones),
    and any bridge marked as ours whose run is not alive. Returns what was removed."""
    total: dict[str, list] = {"runs": [], "processes": [], "bridges": [], "links": []}
    live = set()
    for state in load_states():
        if owner_alive(state) and not force:
            live.add(state.run_id)
            continue
        total["runs"].append(state.run_id)
        for key, items in remove_run(state).items():
            total[key] += items
    orphans = [b for b, run in marked_bridges().items() if run not in live]
    if orphans:
        vsctl(*[arg for b in orphans for arg in ("--", "--if-exists", "del-br", b)])
        total["bridges"] += orphans
    return total
