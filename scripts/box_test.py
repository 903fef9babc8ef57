#!/usr/bin/env python3
"""box_test.py - prove the classroom box by booting it: `make box-test` (as root; tens of minutes).

Builds a Debian 12 Vagrant box from Debian's packages (scripts/box/build.sh; cached, rebuilt
when the recipe changes), brings it up with the project's own Vagrantfile through
vagrant-libvirt on qemu's software emulation, runs the real provisioning (scripts/setup.sh),
then inside the VM: the pure test tier, lab 1's test blocks, one emulated AllReduce of the
demo topology on the kernel datapath (sums and routes verified) and one with a netem link
delay (the delay seen by the calibration probe and included in the simulator's prediction).
Prints a report (each step's time and outcome, the datapath and kernel features found) and
tears down everything it made, by PID or by name: the VM, the libvirt networks, pools and
volumes it created, the libvirt daemons it started. Under software emulation timings say
nothing about speed: the checks are about correctness.

What it made is written to a state file as it goes; a run killed outright (SIGKILL) leaves
that file behind, and the next run (or `box_test.py --clean`) tears those things down first.

Exit status: 0 every step passed, 1 a step failed, 2 bad usage.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECIPE_DIR = REPO / "scripts" / "box"
#: Files whose content defines the box: a change to any rebuilds it.
RECIPE_FILES = ("build.sh", "Vagrantfile.box")
BOX_NAME = "allreduce-testbed/box-test"
#: How vagrant-libvirt names the box's volume in the storage pool.
BOX_SLUG = BOX_NAME.replace("/", "-VAGRANTSLASH-")
#: The disk's virtual size in GB (sparse); the venv with torch and Ray takes about 3 GB.
DISK_GB = 20
#: Host packages box-test needs (Debian 12 names).
HOST_PACKAGES = ("qemu-system-x86", "qemu-utils", "debootstrap", "vagrant", "vagrant-libvirt",
                 "libvirt-daemon-system", "libvirt-clients", "dnsmasq-base", "rsync",
                 "iptables", "e2fsprogs")
#: Libvirt's daemons, in start order; box-test starts those not running and stops only those.
DAEMONS = ("virtlogd", "virtlockd", "libvirtd")
VIRSH = ("virsh", "-c", "qemu:///system")
#: libvirtd's runtime directory (pid files, network status): removed with the daemons when
#: box-test started them and it was not there before.
LIBVIRT_RUN = Path("/run/libvirt")
#: The firewall chains libvirtd adds when it starts a network and never removes:
#: (table, chain, the built-in chain that jumps to it).
LIBVIRT_CHAINS = (("filter", "LIBVIRT_INP", "INPUT"), ("filter", "LIBVIRT_OUT", "OUTPUT"),
                  ("filter", "LIBVIRT_FWO", "FORWARD"), ("filter", "LIBVIRT_FWI", "FORWARD"),
                  ("filter", "LIBVIRT_FWX", "FORWARD"), ("nat", "LIBVIRT_PRT", "POSTROUTING"),
                  ("mangle", "LIBVIRT_PRT", "POSTROUTING"))
#: The host's extra trusted certificates: the box trusts them too, so the guest reaches the
#: package registries the way the host does (empty on an ordinary machine).
EXTRA_CA_DIR = Path("/usr/local/share/ca-certificates")
#: Where the guest finds wheels box-test hands it (pip's find-links).
GUEST_WHEELS = "/var/cache/allreduce-testbed/wheels"
DELAY_MS = 10.0
#: Buffer per server of the guest's emulated runs, MB.
SIZE_MB = 0.25
#: The guest's test tier: the pure packages (no torch: training under software emulation
#: takes hours) with their doctests, and the box recipe's own tests.
PURE_TIER = ('-m "not emulation and not slow" --doctest-modules tests/topology tests/traffic '
             "tests/simulator tests/controller tests/scripts topology traffic simulator scripts")
#: The guest's commands run under software emulation, about this many times slower than
#: on the host: fixed time limits (a worker's start, a lab block, the browser) stretch.
SLOW_GUEST = "ARTB_TIME_SCALE=20"


class BoxTestError(Exception):
    """A step failed; the message says what was expected and what was seen."""


class Interrupted(BaseException):
    """SIGTERM or SIGINT: unwind through the teardown."""


# --- pure parts (tested in the fast tier) -------------------------------------------------------

def recipe_key(recipe_dir: Path = RECIPE_DIR, extra_cas: Iterable[Path] = ()) -> str:
    """The box's cache key: a hash of the recipe files and the extra certificates baked in.

    >>> d = Path(tempfile.mkdtemp())
    >>> for name in RECIPE_FILES: _ = (d / name).write_text(name)
    >>> a = recipe_key(d); _ = (d / "build.sh").write_text("changed"); a != recipe_key(d)
    True
    >>> len(a)
    16
    """
    h = hashlib.sha256()
    for name in RECIPE_FILES:
        h.update(name.encode() + b"\0" + (recipe_dir / name).read_bytes() + b"\0")
    for ca in sorted(extra_cas):
        h.update(ca.name.encode() + b"\0" + ca.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def metadata(disk_gb: int = DISK_GB) -> dict:
    """The box's metadata.json for vagrant-libvirt.

    >>> metadata(20)
    {'provider': 'libvirt', 'format': 'qcow2', 'virtual_size': 20}
    """
    if not isinstance(disk_gb, int) or disk_gb < 1:
        raise ValueError(f"disk size must be a positive whole number of GB, not {disk_gb!r}")
    return {"provider": "libvirt", "format": "qcow2", "virtual_size": disk_gb}


def vagrant_env(base: dict, home: Path, dotfile: Path, box: str = BOX_NAME,
                driver: str = "qemu") -> dict:
    """The environment of every vagrant command: the local box and the qemu driver selected
    through the project Vagrantfile's variables, and vagrant's own state kept out of the
    user's ~/.vagrant.d and out of the checkout."""
    env = dict(base)
    env.update(ARTB_BOX=box, ARTB_LIBVIRT_DRIVER=driver, VAGRANT_HOME=str(home),
               VAGRANT_DOTFILE_PATH=str(dotfile), VAGRANT_DEFAULT_PROVIDER="libvirt",
               VAGRANT_CHECKPOINT_DISABLE="1", VAGRANT_NO_COLOR="1")
    return env


def package_box(src: Path, out: Path, disk_gb: int = DISK_GB) -> None:
    """Write the .box archive: build.sh's disk, kernel and initrd, plus metadata.json and the
    box's Vagrantfile (which boots that kernel)."""
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        (Path(tmp) / "metadata.json").write_text(json.dumps(metadata(disk_gb)) + "\n")
        shutil.copy(RECIPE_DIR / "Vagrantfile.box", Path(tmp) / "Vagrantfile")
        part = out.with_suffix(".part")
        with tarfile.open(part, "w") as tar:
            for name in ("metadata.json", "Vagrantfile"):
                tar.add(Path(tmp) / name, arcname=name)
            for name in ("box.img", "vmlinuz", "initrd.img"):
                tar.add(src / name, arcname=name)
        part.replace(out)


def check_emulated(doc: dict, datapath: str) -> list[str]:
    """What is wrong with an emulated run's results.json (empty: nothing): the datapath it
    used, and every scheduler's row measured with its sums and routes verified.

    >>> check_emulated({"datapath": "kernel", "schedulers": [{"scheduler": "ring",
    ...     "emulated_s": 1.0, "sums_verified": True, "routes_verified": True}]}, "kernel")
    []
    >>> check_emulated({"datapath": "user", "schedulers": []}, "kernel")
    ['datapath is user, not kernel', 'no scheduler rows']
    """
    errors = []
    if doc.get("datapath") != datapath:
        errors.append(f"datapath is {doc.get('datapath')}, not {datapath}")
    rows = doc.get("schedulers") or []
    if not rows:
        errors.append("no scheduler rows")
    for row in rows:
        name = row.get("scheduler")
        if row.get("emulated_s") is None:
            errors.append(f"{name}: not measured ({row.get('failure', 'no time')})")
        if not row.get("sums_verified"):
            errors.append(f"{name}: sums not verified")
        if not row.get("routes_verified"):
            errors.append(f"{name}: routes not proven")
    return errors


def check_delay(doc: dict, delay_ms: float, no_delay_s: float) -> list[str]:
    """What is wrong with a run at ``delay_ms`` per link: the calibration flow's smoothed round
    trip must cover the path's delay both ways (it was seen), and the simulator's prediction of
    each row must exceed ``no_delay_s`` (the same schedule predicted without link delay)
    (it was included).

    >>> doc = {"link_delay_ms": 10, "features": {"netem": {"available": True}},
    ...        "calibration": {"path": ["a", "w", "b"], "srtt_s": 0.05},
    ...        "schedulers": [{"scheduler": "ring", "simulated_s": 2.2}]}
    >>> check_delay(doc, 10, 2.0)
    []
    >>> for error in check_delay(doc | {"calibration": {"path": ["a", "w", "b"],
    ...                                                 "srtt_s": 0.01}}, 10, 2.2):
    ...     print(error)
    the calibration round trip 10.0 ms is below 2 x 2 links x 10 ms
    ring: predicted 2.200 s, not above 2.200 s without delay
    """
    errors = []
    if doc.get("link_delay_ms") != delay_ms:
        errors.append(f"link_delay_ms is {doc.get('link_delay_ms')}, not {delay_ms:g}")
    if not (doc.get("features") or {}).get("netem", {}).get("available"):
        errors.append("netem is not available")
    cal = doc.get("calibration") or {}
    hops = len(cal.get("path") or []) - 1
    rtt_ms = 1e3 * float(cal.get("srtt_s") or 0.0)
    if hops < 1:
        errors.append("the calibration names no path")
    elif rtt_ms < 2 * hops * delay_ms:
        errors.append(f"the calibration round trip {rtt_ms:.1f} ms is below 2 x {hops} links "
                      f"x {delay_ms:g} ms")
    for row in doc.get("schedulers") or []:
        if not row.get("simulated_s", 0.0) > no_delay_s:
            errors.append(f"{row.get('scheduler')}: predicted {row.get('simulated_s', 0.0):.3f} s, "
                          f"not above {no_delay_s:.3f} s without delay")
    return errors


# --- a record of what was made, for the teardown ------------------------------------------------

@dataclass
class State:
    """What this run made that must go: kept in a JSON file as it changes, so a run killed
    outright is cleaned by the next."""

    path: Path
    made: dict = field(default_factory=dict)

    def add(self, kind: str, value) -> None:
        self.made.setdefault(kind, [])
        if value not in self.made[kind]:
            self.made[kind].append(value)
        self.save()

    def drop(self, kind: str, value) -> None:
        if value in self.made.get(kind, []):
            self.made[kind].remove(value)
        self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.made, indent=1) + "\n")
        tmp.replace(self.path)

    @classmethod
    def load(cls, path: Path) -> State:
        made = json.loads(path.read_text()) if path.exists() else {}
        return cls(path, made)


# --- running things -----------------------------------------------------------------------------

def log(text: str) -> None:
    print(f"[box-test {time.strftime('%H:%M:%S')}] {text}", flush=True)


def run(argv: list[str], *, env: dict | None = None, cwd: Path | None = None,
        timeout: float = 600, logfile: Path | None = None,
        check: bool = True) -> subprocess.CompletedProcess:
    """Run ``argv`` in its own process group (ended as a group on timeout or interruption),
    its output appended to ``logfile``, or else captured (stdout and stderr apart)."""
    if logfile:
        out = open(logfile, "a")  # noqa: SIM115 (closed below)
        out.write(f"\n$ {shlex.join(argv)}\n")
        out.flush()
        streams = {"stdout": out, "stderr": subprocess.STDOUT}
    else:
        streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, text=True,
                            start_new_session=True, **streams)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except BaseException as exc:
        end_group(proc)
        if isinstance(exc, subprocess.TimeoutExpired):
            raise BoxTestError(f"{shlex.join(argv[:4])}...: no answer after {timeout:.0f} s"
                               + (f" (log: {logfile})" if logfile else "")) from None
        raise
    finally:
        if logfile:
            out.close()
    done = subprocess.CompletedProcess(argv, proc.returncode, stdout or "", stderr or "")
    if check and proc.returncode != 0:
        tail = tail_of(logfile) if logfile else (done.stderr or done.stdout)[-2000:]
        raise BoxTestError(f"{shlex.join(argv)} exited with {proc.returncode}"
                           + (f" (log: {logfile})" if logfile else "") + f"\n{tail}")
    return done


def tail_of(path: Path | None, lines: int = 25) -> str:
    if not path or not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def end_group(proc: subprocess.Popen, grace_s: float = 20) -> None:
    """SIGINT, then SIGTERM, then SIGKILL to ``proc``'s process group until it is gone."""
    for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_pid(pid: int, grace_s: float = 15) -> None:
    """SIGTERM, then SIGKILL, one process this run started."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5)):
        if not alive(pid):
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and alive(pid):
            try:  # reap it if it is our child
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.2)


def pid_cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


def extra_cas() -> list[Path]:
    """The host's extra trusted certificates (EXTRA_CA_DIR), sorted."""
    return sorted(EXTRA_CA_DIR.glob("*.crt")) if EXTRA_CA_DIR.is_dir() else []


def chain_exists(table: str, chain: str) -> bool:
    return run(["iptables", "-t", table, "-S", chain], check=False).returncode == 0


def drop_chain(table: str, chain: str, parent: str) -> bool:
    """Remove an empty firewall chain and the jumps to it; a chain with rules is left."""
    if not chain_exists(table, chain):
        return False
    rules = run(["iptables", "-t", table, "-S", chain], check=False).stdout.split("\n")
    if any(line.startswith("-A") for line in rules):
        return False
    while run(["iptables", "-t", table, "-D", parent, "-j", chain], check=False).returncode == 0:
        pass
    return run(["iptables", "-t", table, "-X", chain], check=False).returncode == 0


def virsh(*args: str, check: bool = False, timeout: float = 60) -> subprocess.CompletedProcess:
    return run([*VIRSH, *args], check=check, timeout=timeout)


def names(*args: str) -> set[str]:
    """The names virsh lists (``list --all --name``, ``net-list --all --name``...)."""
    done = virsh(*args)
    if done.returncode != 0:
        return set()
    return {line.strip() for line in done.stdout.splitlines() if line.strip()}


# --- the run -------------------------------------------------------------------------------------

@dataclass
class Step:
    name: str
    seconds: float = 0.0
    outcome: str = "not run"
    detail: str = ""


class BoxTest:
    def __init__(self, cache: Path, logs: Path):
        self.cache = cache
        self.logs = logs
        self.state = State.load(cache / "state.json")
        self.steps: list[Step] = []
        self.facts: dict = {}
        self.home = cache / "vagrant.d"
        self.dotfile = cache / "dotfile"
        self.env = vagrant_env(os.environ, self.home, self.dotfile)

    # -- reporting
    def step(self, name: str, fn: Callable[[], str | None]) -> None:
        s = Step(name)
        self.steps.append(s)
        log(f"--- {name}")
        t0 = time.monotonic()
        try:
            s.detail = fn() or ""
            s.outcome = "passed"
        except BoxTestError as exc:
            s.outcome = "FAILED"
            s.detail = str(exc)
            raise
        except (Exception, Interrupted) as exc:
            s.outcome = "FAILED" if isinstance(exc, Exception) else "interrupted"
            s.detail = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            s.seconds = time.monotonic() - t0
            first = f" ({s.detail.splitlines()[0]})" if s.detail else ""
            log(f"--- {name}: {s.outcome} in {s.seconds:.0f} s{first}")

    def report(self, total_s: float) -> str:
        width = max(len(s.name) for s in self.steps) if self.steps else 10
        lines = ["", "box-test report", "=" * 15]
        for s in self.steps:
            first = s.detail.splitlines()[0] if s.detail else ""
            lines.append(f"{s.name:<{width}}  {s.outcome:<11} {s.seconds:7.0f} s  {first}")
        lines.append(f"{'total':<{width}}  {'':<11} {total_s:7.0f} s")
        if self.facts:
            lines.append("")
            for k, v in self.facts.items():
                lines.append(f"{k}: {v}")
        lines.append(f"logs: {self.logs}")
        return "\n".join(lines)

    # -- host
    def host_tools(self) -> str:
        missing = [p for p in HOST_PACKAGES
                   if run(["dpkg-query", "-W", "-f=${db:Status-Status}", p],
                          check=False).stdout != "installed"]
        if missing:
            log(f"installing {' '.join(missing)}")
            env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
            run(["apt-get", "update", "-qq"], env=env, logfile=self.logs / "host-apt.log")
            run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env=env,
                logfile=self.logs / "host-apt.log", timeout=1200)
        return f"installed {' '.join(missing)}" if missing else "all present"

    def libvirt(self) -> str:
        started = []
        if virsh("version").returncode != 0:
            for table, chain, parent in LIBVIRT_CHAINS:
                if not chain_exists(table, chain):
                    self.state.add("chains", [table, chain, parent])
            if not LIBVIRT_RUN.exists():
                self.state.add("rundirs", str(LIBVIRT_RUN))
            for name in DAEMONS:
                path = shutil.which(name) or f"/usr/sbin/{name}"
                logf = open(self.logs / f"{name}.log", "a")  # noqa: SIM115
                blocked = signal.pthread_sigmask(signal.SIG_BLOCK,
                                                 {signal.SIGINT, signal.SIGTERM})
                try:
                    proc = subprocess.Popen([path], stdin=subprocess.DEVNULL, stdout=logf,
                                            stderr=subprocess.STDOUT, start_new_session=True)
                    self.state.add("daemons", [proc.pid, path])
                finally:
                    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
                    logf.close()
                started.append(name)
                time.sleep(0.5)
            for _ in range(60):
                if virsh("version").returncode == 0:
                    break
                time.sleep(0.5)
            else:
                raise BoxTestError(f"libvirtd does not answer (log: {self.logs / 'libvirtd.log'})")
        if "default" not in names("pool-list", "--all", "--name"):
            target = "/var/lib/libvirt/images"
            os.makedirs(target, exist_ok=True)
            virsh("pool-define-as", "default", "dir", "--target", target, check=True)
            self.state.add("pools", "default")
            virsh("pool-start", "default", check=True)
        elif "default" not in names("pool-list", "--name"):
            virsh("pool-start", "default", check=True)
        for kind, args in (("domains", ("list", "--all", "--name")),
                           ("networks", ("net-list", "--all", "--name")),
                           ("volumes", ("vol-list", "default"))):
            found = self.volumes() if kind == "volumes" else names(*args)
            self.state.made[f"{kind}_before"] = sorted(found)
        self.state.save()
        return (f"started {', '.join(started)}" if started else "libvirt already running") + \
            ("; defined pool 'default'" if "default" in self.state.made.get("pools", []) else "")

    def volumes(self) -> set[str]:
        done = virsh("vol-list", "default")
        return {line.split()[0] for line in done.stdout.splitlines()[2:] if line.strip()}

    # -- box
    def box(self) -> str:
        cas = extra_cas()
        key = recipe_key(RECIPE_DIR, cas)
        built = self.cache / f"box-{key}"
        boxfile = built / "allreduce-testbed.box"
        note = f"cached box {key}"
        if not boxfile.exists():
            for old in self.cache.glob("box-*"):
                shutil.rmtree(old, ignore_errors=True)
            log(f"building the box (recipe {key}): debootstrap, about 3 minutes")
            env = dict(os.environ, EXTRA_CA_DIR=str(EXTRA_CA_DIR) if cas else "",
                       DISK_GB=str(DISK_GB))
            run(["bash", str(RECIPE_DIR / "build.sh"), str(built)], env=env, timeout=1800,
                logfile=self.logs / "box-build.log")
            package_box(built, boxfile)
            (built / "box.img").unlink()  # the archive holds it
            note = f"built box {key} ({boxfile.stat().st_size / 2**20:.0f} MiB)"
        stamp = self.home / "box-key"
        if not (stamp.exists() and stamp.read_text() == key):
            run(["vagrant", "box", "add", "--force", "--name", BOX_NAME, str(boxfile)],
                env=self.env, logfile=self.logs / "vagrant.log", timeout=900)
            stamp.write_text(key)
        return note

    # -- guest
    def up(self) -> str:
        self.state.add("vagrant", str(self.dotfile))
        try:
            run(["vagrant", "up", "--provider=libvirt", "--no-provision"], env=self.env,
                cwd=REPO, logfile=self.logs / "vagrant.log", timeout=1800)
        finally:  # a boot that failed or was interrupted may have defined the domain
            dom = sorted(names("list", "--all", "--name")
                         - set(self.state.made["domains_before"]))
            for d in dom:
                self.state.add("domains", d)
        return f"domain {', '.join(dom) or '?'}"

    def ssh(self, command: str, logname: str, timeout: float = 3600) -> None:
        """Run ``command`` in the guest, its output appended to ``logname``."""
        # The guest ends the command itself when the host stops waiting: without a terminal
        # it would not see the ssh session go.
        guarded = f"timeout -k 30 {int(timeout)} bash -c {shlex.quote(command)}"
        run(["vagrant", "ssh", "-c", guarded, "--", "-o", "ServerAliveInterval=30"],
            env=self.env, cwd=REPO, logfile=self.logs / logname, timeout=timeout + 60)

    def ssh_out(self, command: str, timeout: float = 600) -> str:
        return run(["vagrant", "ssh", "-c", command], env=self.env, cwd=REPO,
                   timeout=timeout).stdout

    def sources(self) -> str:
        """Hand the guest what the host's own pip uses but the internet may not offer here:
        the CPU torch wheel from the host's local wheel directory, and the system
        certificate store for pip (the box already trusts the host's extra certificates)."""
        notes = []
        wheels = Path(tempfile.mkdtemp(prefix="artb-box-wheels-"))
        try:
            py = REPO / ".venv" / "bin" / "python"
            py = py if py.exists() else Path(sys.executable)
            got = run([str(py), "-m", "pip", "download", "-q", "--no-deps", "--no-index", "-d",
                       str(wheels), "torch==2.13.0"], check=False, timeout=300)
            files = sorted(wheels.glob("torch-*.whl")) if got.returncode == 0 else []
            self.ssh_out(f"sudo install -d -m 0755 {GUEST_WHEELS}")
            for f in files:
                run(["vagrant", "upload", str(f), f"/tmp/{f.name}"], env=self.env, cwd=REPO,
                    logfile=self.logs / "vagrant.log", timeout=1800)
                self.ssh_out(f"sudo mv /tmp/{f.name} {GUEST_WHEELS}/")
                notes.append(f"{f.name} from the host")
        finally:
            shutil.rmtree(wheels, ignore_errors=True)
        conf = f"[global]\\nfind-links = {GUEST_WHEELS}\\n"
        if extra_cas():
            conf += "cert = /etc/ssl/certs/ca-certificates.crt\\n"
            notes.append("pip uses the system certificates")
        self.ssh_out(f"printf '{conf}' | sudo tee /etc/pip.conf >/dev/null")
        return "; ".join(notes) or "nothing needed"

    def provision(self) -> str:
        run(["vagrant", "provision"], env=self.env, cwd=REPO, logfile=self.logs / "provision.log",
            timeout=5400)
        text = (self.logs / "provision.log").read_text(errors="replace")
        ready = [line for line in text.splitlines() if "=== setup.sh:" in line]
        if not ready or "ready" not in ready[-1] or "NOT ready" in ready[-1]:
            raise BoxTestError("setup.sh did not report ready "
                               f"(log: {self.logs / 'provision.log'})")
        return ready[-1].split("=== ")[-1].strip()

    def features(self) -> str:
        out = self.ssh_out("cd /vagrant && sudo python -c 'import json; from emulation import "
                           "features; print(json.dumps(features.detect().to_dict()))'")
        found = json.loads(out.strip().splitlines()[-1])
        self.facts["guest"] = " ".join(self.ssh_out("uname -r; python3 --version").split())
        self.facts["features"] = ", ".join(
            f"{k} ({v['module']}): {'yes' if v['available'] else 'NO'}" for k, v in found.items())
        missing = [k for k, v in found.items() if not v["available"]]
        if missing:
            raise BoxTestError(f"the box's kernel lacks {', '.join(missing)}")
        return self.facts["features"]

    def pure_tests(self) -> str:
        """The pure packages' tests and doctests (PURE_TIER), after `make setup-test` has added
        the test-only tools, with ARTB_REQUIRE_EMULATION=1 so that a missing tool fails the
        test instead of skipping it."""
        self.ssh("cd /vagrant && sudo make setup-test && sudo env ARTB_REQUIRE_EMULATION=1 "
                 f"{SLOW_GUEST} .venv/bin/python -m pytest -q -p no:cacheprovider {PURE_TIER}",
                 "pure-tests.log", timeout=7200)
        return pytest_summary(self.logs / "pure-tests.log")

    def lab1(self) -> str:
        self.ssh(f"cd /vagrant && sudo env ARTB_REQUIRE_EMULATION=1 {SLOW_GUEST} "
                 ".venv/bin/python -m pytest -q -p no:cacheprovider tests/test_labs.py -k lab1",
                 "lab1.log", timeout=7200)
        return pytest_summary(self.logs / "lab1.log")

    def emulate(self, out: str, extra: str) -> dict:
        self.ssh(f"cd /vagrant && sudo env {SLOW_GUEST} python -m emulation.run --topo bcube "
                 f"--datapath kernel --size-mb {SIZE_MB} --timeout-s 1800 --out {out} {extra}",
                 f"emulation-{Path(out).name}.log")
        return json.loads(self.ssh_out(f"sudo cat {out}/results.json"))

    def allreduce(self) -> str:
        doc = self.emulate("/tmp/box-run", "--scheduler ring,multitree")
        errors = check_emulated(doc, "kernel")
        if errors:
            raise BoxTestError("; ".join(errors))
        self.facts["datapath"] = doc["datapath"]
        rows = ", ".join(f"{r['scheduler']} {r['emulated_s']:.2f} s (sim {r['simulated_s']:.2f} s)"
                         for r in doc["schedulers"])
        return f"kernel datapath, sums and routes verified: {rows}"

    def delay(self) -> str:
        doc = self.emulate("/tmp/box-delay", f"--scheduler ring --delay-ms {DELAY_MS:g}")
        errors = check_emulated(doc, "kernel")
        cal = doc.get("calibration") or {}
        # The same schedule predicted with the same measured costs but no link delay.
        costs = (f"--goodput {cal.get('goodput_ratio', 1.0)} "
                 f"--startup-s {cal.get('startup_s', 0.0)} "
                 f"--failover-s {cal.get('failover_s', 0.2)}")
        sim = json.loads(self.ssh_out(
            f"cd /vagrant && python -m simulator --topo bcube --scheduler ring --bw-mbps "
            f"{doc['bw_mbps']} --size-mb {SIZE_MB} {costs} --json"))
        no_delay = sim_makespan(sim, "ring")
        errors += check_delay(doc, DELAY_MS, no_delay)
        if errors:
            raise BoxTestError("; ".join(errors))
        row = doc["schedulers"][0]
        return (f"{DELAY_MS:g} ms per link: calibration round trip {1e3 * cal['srtt_s']:.0f} ms "
                f"over {len(cal['path']) - 1} links; ring predicted {row['simulated_s']:.2f} s "
                f"(without delay {no_delay:.2f} s), emulated {row['emulated_s']:.2f} s")

    # -- teardown
    def teardown(self) -> list[str]:
        """Remove what the state file says this run (or a killed earlier one) made."""
        done, made = [], self.state.made
        domains = set(made.get("domains", []))
        if made.get("vagrant"):
            try:
                destroyed = run(["vagrant", "destroy", "-f"], env=self.env, cwd=REPO,
                                check=False, timeout=600,
                                logfile=self.logs / "teardown.log").returncode == 0
            except BoxTestError:
                destroyed = False
            done.append("vagrant destroy" + ("" if destroyed else " (failed: by virsh)"))
            for d in list(made["vagrant"]):
                self.state.drop("vagrant", d)
        try:
            self._teardown_libvirt(done, domains)
        except BoxTestError as exc:
            done.append(f"libvirt cleanup stopped: {exc}")
        self._teardown_host(done)
        return done

    def _teardown_libvirt(self, done: list[str], domains: set[str]) -> None:
        made = self.state.made
        libvirt_up = virsh("version").returncode == 0
        if libvirt_up:
            for d in list(made.get("domains", [])):
                if d in names("list", "--all", "--name"):
                    virsh("destroy", d)
                    virsh("undefine", d, "--remove-all-storage", "--nvram")
                    done.append(f"domain {d}")
                self.state.drop("domains", d)
            before = made.get("networks_before")
            # Without the list from before this run, nothing is known to be ours.
            for net in sorted(names("net-list", "--all", "--name") - set(before or [])
                              if before is not None else []):
                if net.startswith("vagrant"):
                    virsh("net-destroy", net)
                    virsh("net-undefine", net)
                    done.append(f"network {net}")
            vols_before = made.get("volumes_before")
            if vols_before is not None and "default" in names("pool-list", "--all", "--name"):
                vols_before = set(vols_before)
                virsh("pool-start", "default")  # an inactive pool lists no volumes
                for vol in sorted(self.volumes() - vols_before):
                    if BOX_SLUG in vol or any(vol.startswith(d) for d in domains):
                        virsh("vol-delete", vol, "--pool", "default")
                        done.append(f"volume {vol}")
            for pool in list(made.get("pools", [])):
                virsh("pool-destroy", pool)
                virsh("pool-undefine", pool)
                done.append(f"pool {pool}")
                self.state.drop("pools", pool)
        else:  # libvirtd is gone but a VM it started may still run
            for d in list(made.get("domains", [])):
                pidfile = Path(f"/run/libvirt/qemu/{d}.pid")
                pid = int(pidfile.read_text().strip()) if pidfile.exists() else 0
                if pid and alive(pid) and "qemu" in pid_cmdline(pid):
                    stop_pid(pid)
                    done.append(f"qemu of {d} (pid {pid})")
                self.state.drop("domains", d)

    def _teardown_host(self, done: list[str]) -> None:
        made = self.state.made
        # libvirtd first: it is the one that uses the other two.
        for pid, path in sorted(made.get("daemons", []),
                                key=lambda item: Path(item[1]).name != "libvirtd"):
            if alive(pid) and path in pid_cmdline(pid):
                stop_pid(pid)
                done.append(f"{Path(path).name} (pid {pid})")
            self.state.drop("daemons", [pid, path])
        if not made.get("daemons"):  # libvirtd is ours and gone: its empty chains go too
            for table, chain, parent in list(made.get("chains", [])):
                if drop_chain(table, chain, parent):
                    done.append(f"iptables {table} {chain}")
                self.state.drop("chains", [table, chain, parent])
            for rundir in list(made.get("rundirs", [])):  # the daemons' runtime state
                if Path(rundir).is_dir():
                    shutil.rmtree(rundir, ignore_errors=True)
                    done.append(f"{rundir}/")
                self.state.drop("rundirs", rundir)


def pytest_summary(logfile: Path) -> str:
    """pytest's last summary line in ``logfile`` ("12 passed, 1 skipped in 3.1s")."""
    lines = [line.strip("= ") for line in logfile.read_text(errors="replace").splitlines()
             if " passed" in line or " failed" in line]
    return lines[-1] if lines else "no pytest summary"


def sim_makespan(doc: dict, scheduler: str) -> float:
    """The simulated makespan of ``scheduler`` in ``python -m simulator --json`` output (one
    scheduler: one object).

    >>> sim_makespan({"algo": "ring", "makespan_s": 2.5}, "ring")
    2.5
    """
    if doc.get("algo") != scheduler or "makespan_s" not in doc:
        raise BoxTestError(f"the simulator printed no makespan for {scheduler}: {doc}")
    return float(doc["makespan_s"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="box_test.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", type=Path, default=Path(os.environ.get(
        "ARTB_BOX_CACHE", "/var/cache/allreduce-testbed/box")),
        help="where the built box, vagrant's state and the state file live "
             "(default /var/cache/allreduce-testbed/box, or $ARTB_BOX_CACHE)")
    p.add_argument("--logs", type=Path, default=None,
                   help="directory for every step's log (default: a new one under /tmp)")
    p.add_argument("--clean", action="store_true",
                   help="only tear down what an earlier, killed run left behind")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("box_test.py: run as root (sudo make box-test)", file=sys.stderr)
        return 2
    args.cache.mkdir(parents=True, exist_ok=True)
    logs = args.logs or Path(tempfile.mkdtemp(prefix="artb-box-test-", dir="/tmp"))
    logs.mkdir(parents=True, exist_ok=True)
    lock = open(args.cache / "lock", "w")  # noqa: SIM115 (held until the process ends)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"box_test.py: another box-test is running (lock {args.cache / 'lock'})",
              file=sys.stderr)
        return 2
    bt = BoxTest(args.cache, logs)

    def interrupted(signum, _frame):
        # Once: a second signal must not cut the unwinding (ending the child, the teardown).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise Interrupted(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)

    if bt.state.made:
        log(f"tearing down what an earlier run left: {json.dumps(bt.state.made)}")
        for what in bt.teardown():
            log(f"removed {what}")
    if args.clean:
        return 0
    t0 = time.monotonic()
    ok = False
    try:
        bt.step("host tools", bt.host_tools)
        bt.step("libvirt daemons and storage pool", bt.libvirt)
        bt.step("box (built or cached)", bt.box)
        bt.step("vagrant up (no provisioning yet)", bt.up)
        bt.step("package sources for the guest", bt.sources)
        bt.step("provisioning (scripts/setup.sh)", bt.provision)
        # The checks: one failing does not stop the next.
        ok = True
        for name, check in (
                ("kernel features", bt.features),
                ("pure test tier (topology, traffic, simulator, controller)", bt.pure_tests),
                ("lab 1 test blocks", bt.lab1),
                ("emulated AllReduce, kernel datapath", bt.allreduce),
                (f"emulated AllReduce, {DELAY_MS:g} ms netem delay", bt.delay)):
            try:
                bt.step(name, check)
            except Exception:  # BoxTestError or a surprise in the guest's answer
                ok = False
    except BoxTestError:
        ok = False
    except Interrupted as exc:
        ok = False
        log(f"interrupted ({exc}): tearing down")
    except Exception as exc:  # report it, but still tear down
        ok = False
        log(f"error: {type(exc).__name__}: {exc}")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        t1 = time.monotonic()
        try:
            removed = bt.teardown()
            td = Step("teardown", time.monotonic() - t1, "passed", ", ".join(removed))
        except Exception as exc:
            td = Step("teardown", time.monotonic() - t1, "FAILED", f"{type(exc).__name__}: {exc}")
            ok = False
        bt.steps.append(td)
        if not any(bt.state.made.get(k) for k in ("daemons", "vagrant", "domains", "pools",
                                                   "chains", "rundirs")):
            bt.state.path.unlink(missing_ok=True)
        print(bt.report(time.monotonic() - t0), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
