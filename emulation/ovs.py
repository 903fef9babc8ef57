"""Extra ovs-vswitchd instances, so the userspace data plane uses more than one core.

The userspace datapath forwards every packet in one thread of one ovs-vswitchd, about one
core whatever the machine has. An emulated network may therefore spread its bridges over
``n`` instances: instance 0 is the system's Open vSwitch, instances 1..n-1 are started here,
each with its own ovsdb-server (database, sockets and logs in its ``rundir``) and its own
ovs-vswitchd, run inside a network namespace of its own (``artb-ovs<k>``): every userspace
datapath opens a tap device named ``ovs-netdev``, so two of them cannot share a namespace.

- ``assign`` decides which bridge goes to which instance; the ports of the bridges of
  instance k are moved into its namespace before the bridges are created. A veth between
  bridges of two instances is a link like any other (its ends sit in two namespaces).
- The controller keeps listening on 127.0.0.1 only, which another namespace cannot reach.
  The bridges of an extra instance connect to a Unix socket in its rundir instead
  (``controller_target``; file system paths cross namespaces), and a ``ControlRelay`` of the
  emulating process pipes each such connection to the controller's TCP port. No address is
  added anywhere, so nothing outside the machine can reach the controller.
- ``OvsBuffers`` enlarges an instance's packet socket buffers (``emulation.net`` says why).
- ``prime`` gives every instance, the system's included, a userspace datapath that has
  come and gone before a network is built: the first one forwards idle links late.
- Everything an instance creates goes away with ``stop()``: its two daemons (by PID, after
  checking their command lines), its namespace (with every interface in it) and its rundir
  (with the relay's socket).

No Mininet import here.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from emulation import netstate

#: The Open vSwitch database schema (Debian's openvswitch-common).
SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
#: Most instances one network may use.
MAX_INSTANCES = 64
#: Seconds an instance has to answer after its start.
START_S = 20.0
#: The system instance's ovs-vswitchd pidfile.
OVS_PIDFILE = Path(os.environ.get("OVS_RUNDIR", "/var/run/openvswitch")) / "ovs-vswitchd.pid"


def assign(ports: dict[str, int], n: int) -> dict[str, int]:
    """Instance of each bridge, given each bridge's port count: the bridges with most ports
    first, each onto the instance with fewest ports so far (ties: the lower instance; bridges
    with equal counts in name order), so the forwarding work is spread evenly.

    >>> assign({"a": 2, "b": 2, "c": 2, "d": 2}, 2)
    {'a': 0, 'b': 1, 'c': 0, 'd': 1}
    >>> assign({"big": 4, "s1": 1, "s2": 1, "s3": 2}, 2)
    {'big': 0, 's3': 1, 's1': 1, 's2': 1}
    """
    if not 1 <= n <= MAX_INSTANCES:
        raise ValueError(f"instances must be in 1..{MAX_INSTANCES}, got {n!r}")
    load = [0] * n
    out = {}
    for bridge in sorted(ports, key=lambda b: (-ports[b], b)):
        k = min(range(n), key=lambda i: (load[i], i))
        out[bridge] = k
        load[k] += ports[bridge]
    return out


def auto_instances(datapath: str, cores: int | None = None) -> int:
    """Instances for ``--ovs-instances auto``: with the userspace datapath one per core but
    one, which the hosts' processes (workers, their TCP stacks, the shaping) keep; one with
    the kernel datapath (it forwards on every core already). On 2 cores that is 1: a second
    instance raised the forwarding probe but not the rate at which runs stay faithful
    (docs/emulation.md, "Several Open vSwitch instances").

    >>> auto_instances("user", cores=2), auto_instances("user", cores=8)
    (1, 7)
    >>> auto_instances("kernel", cores=8)
    1
    """
    if datapath == "kernel":
        return 1
    cores = cores if cores is not None else len(os.sched_getaffinity(0))
    return max(1, min(cores - 1, MAX_INSTANCES))


def parse_instances(text: str, datapath: str) -> int:
    """``--ovs-instances`` value for ``datapath``: ``auto`` (``auto_instances``) or a count
    ``check_instances`` accepts; ValueError naming the value otherwise.

    >>> parse_instances("auto", "kernel"), parse_instances("2", "user")
    (1, 2)
    """
    if text == "auto":
        return auto_instances(datapath)
    try:
        count = int(text)
    except ValueError:
        raise ValueError(f"--ovs-instances must be auto or 1..{MAX_INSTANCES}, "
                         f"got {text!r}") from None
    return check_instances(count, datapath)


def check_instances(count: int, datapath: str) -> int:
    """``count`` when a network may use that many instances with ``datapath``; ValueError
    naming the value otherwise (the kernel datapath runs in one).

    >>> check_instances(2, "user")
    2
    """
    if not 1 <= count <= MAX_INSTANCES:
        raise ValueError(f"--ovs-instances must be auto or 1..{MAX_INSTANCES}, got {count!r}")
    if datapath == "kernel" and count > 1:
        raise ValueError(f"--ovs-instances {count}: the kernel datapath runs in one instance "
                         "(it forwards on every core already)")
    return count


def answering(target: str = "ovs-vswitchd") -> bool:
    """Whether the ovs-vswitchd at ``target`` (ovs-appctl -t: a name or a control socket)
    answers."""
    try:
        return subprocess.run(["ovs-appctl", "--timeout=3", "-t", target, "version"],
                              capture_output=True, timeout=8).returncode == 0
    except subprocess.TimeoutExpired:
        return False


@dataclass(frozen=True)
class Instance:
    """Extra instance ``index`` (>= 1): names, paths and the commands that start it."""

    index: int
    state_dir: Path = netstate.STATE_DIR

    @property
    def netns(self) -> str:
        """Its network namespace."""
        return f"artb-ovs{self.index}"

    @property
    def rundir(self) -> Path:
        """Its database, sockets, pidfiles and logs."""
        return self.state_dir / f"ovs{self.index}"

    @property
    def db(self) -> str:
        """Its database's socket, as ovs-vsctl's --db takes it."""
        return f"unix:{self.rundir / 'db.sock'}"

    @property
    def ctl(self) -> Path:
        """ovs-vswitchd's control socket (ovs-appctl -t)."""
        return self.rundir / "ovs-vswitchd.ctl"

    @property
    def pidfile(self) -> Path:
        """ovs-vswitchd's pidfile."""
        return self.rundir / "ovs-vswitchd.pid"

    @property
    def control_socket(self) -> Path:
        """The Unix socket its bridges reach the controller through (``ControlRelay``)."""
        return self.rundir / "controller.sock"

    @property
    def controller_target(self) -> str:
        """The controller target of its bridges (an OVS active Unix connection)."""
        return f"unix:{self.control_socket}"

    def vsctl(self, *args: str) -> list[str]:
        """argv of ovs-vsctl on this instance's database."""
        return ["ovs-vsctl", f"--db={self.db}", *args]

    def in_netns(self, *argv: str) -> list[str]:
        """argv running ``argv`` inside the instance's namespace."""
        return ["ip", "netns", "exec", self.netns, *argv]

    def start_commands(self, tso: bool) -> list[list[str]]:
        """Every command that brings the instance up, in order (the rundir must exist).

        >>> cmds = Instance(1, Path("/s")).start_commands(tso=False)
        >>> cmds[0], cmds[-1][:5]
        (['ip', 'netns', 'add', 'artb-ovs1'], ['ip', 'netns', 'exec', 'artb-ovs1', 'env'])
        """
        run = self.rundir
        daemon = ["--detach", "--no-chdir"]
        return [
            ["ip", "netns", "add", self.netns],
            ["ip", "-n", self.netns, "link", "set", "lo", "up"],
            # no IPv6 on the ports moved in (router solicitations would count as traffic)
            self.in_netns("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
                          "net.ipv6.conf.default.disable_ipv6=1"),
            ["ovsdb-tool", "create", str(run / "conf.db"), str(SCHEMA)],
            ["ovsdb-server", str(run / "conf.db"), f"--remote=punix:{run / 'db.sock'}",
             f"--pidfile={run / 'ovsdb-server.pid'}", f"--unixctl={run / 'ovsdb-server.ctl'}",
             f"--log-file={run / 'ovsdb-server.log'}", *daemon],
            self.vsctl("--no-wait", "init", "--", "set", "Open_vSwitch", ".",
                       f"other_config:userspace-tso-enable={str(tso).lower()}"),
            self.in_netns("env", f"OVS_RUNDIR={run}", "ovs-vswitchd", self.db,
                          f"--pidfile={self.pidfile}", f"--unixctl={self.ctl}",
                          f"--log-file={run / 'ovs-vswitchd.log'}", *daemon),
        ]

    def start(self, tso: bool) -> None:
        """Bring it up; RuntimeError naming the failed command (the caller tears down)."""
        self.rundir.mkdir(parents=True, exist_ok=True)
        for argv in self.start_commands(tso):
            out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            if out.returncode != 0:
                raise RuntimeError(f"starting Open vSwitch instance {self.index}: "
                                   f"`{' '.join(argv)}` failed: {out.stderr.strip()[-300:]}")
        deadline = time.monotonic() + START_S
        while not answering(str(self.ctl)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"Open vSwitch instance {self.index} did not answer in "
                                   f"{START_S:.0f} s (log: {self.rundir / 'ovs-vswitchd.log'})")
            time.sleep(0.1)

    def pid(self, daemon: str = "ovs-vswitchd") -> int | None:
        """PID of ``daemon`` (ovs-vswitchd or ovsdb-server) from its pidfile; None without."""
        try:
            return int((self.rundir / f"{daemon}.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def pids(self) -> list[int]:
        """PIDs of its daemons, from their pidfiles (those that exist)."""
        return [p for d in ("ovs-vswitchd", "ovsdb-server") if (p := self.pid(d))]

    def stop(self) -> list[str]:
        """Remove everything it created (idempotent): its daemons (checked by command line:
        they name a file in the rundir), its namespace, its rundir. What was removed;
        RuntimeError naming what could not be removed."""
        done = []
        for pid in self.pids():
            if netstate.terminate(pid, f"{self.rundir}/"):
                done.append(f"process {pid}")
        if Path("/run/netns", self.netns).exists():
            out = subprocess.run(["ip", "netns", "del", self.netns], capture_output=True,
                                 text=True, timeout=30)
            if out.returncode != 0:
                raise RuntimeError(f"cannot delete namespace {self.netns}: "
                                   f"{out.stderr.strip()[-200:]}")
            done.append(f"namespace {self.netns}")
        if self.rundir.exists():
            shutil.rmtree(self.rundir, ignore_errors=True)
        return done


#: The empty bridge ``prime`` adds and deletes (15 characters at most: it names a tap).
PRIME_BRIDGE = "artb-prime"


def prime_commands(run_id: str, instances: list[Instance]) -> list[list[str]]:
    """What ``prime`` runs: on the system instance, then on each of ``instances``, add an
    empty userspace bridge carrying the run's mark (ovs-vsctl waits until ovs-vswitchd has
    made it), then delete it. Should the run die in between, ``netstate.clean`` finds the
    system instance's bridge by its mark; an extra instance's goes with ``Instance.stop``.

    >>> cmds = prime_commands("r1", [Instance(1, Path("/s"))])
    >>> cmds[0]  # doctest: +NORMALIZE_WHITESPACE
    ['ovs-vsctl', '--timeout=10', '--', 'add-br', 'artb-prime', '--', 'set', 'Bridge',
     'artb-prime', 'datapath_type=netdev', 'external-ids:allreduce-testbed=r1']
    >>> cmds[1]
    ['ovs-vsctl', '--timeout=10', '--if-exists', 'del-br', 'artb-prime']
    >>> cmds[3][:2]
    ['ovs-vsctl', '--db=unix:/s/ovs1/db.sock']
    """
    out = []
    for vsctl in [lambda *a: ["ovs-vsctl", *a]] + [i.vsctl for i in instances]:
        out.append(vsctl("--timeout=10", "--", "add-br", PRIME_BRIDGE, "--", "set", "Bridge",
                         PRIME_BRIDGE, "datapath_type=netdev",
                         f"external-ids:{netstate.MARK}={run_id}"))
        out.append(vsctl("--timeout=10", "--if-exists", "del-br", PRIME_BRIDGE))
    return out


def prime(run_id: str, instances: list[Instance]) -> None:
    """Give the system instance and each of ``instances`` a userspace datapath that has come
    and gone (``prime_commands``) before an emulated network is built: an ovs-vswitchd's
    first userspace datapath forwards the packets of idle links late for as long as it
    lives, the datapaths made after it do not (docs/emulation.md, section 1). RuntimeError
    naming a failed command."""
    for argv in prime_commands(run_id, instances):
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        if out.returncode != 0:
            raise RuntimeError(f"`{' '.join(argv)}` failed: {out.stderr.strip()[-300:]}")


def revalidate(instances: list[Instance], timeout_s: float = 10.0) -> None:
    """``ovs-appctl revalidator/wait`` on the system instance and every extra one, at once:
    the datapath flows' counters reach the OpenFlow rules."""
    targets = ["ovs-vswitchd"] + [str(i.ctl) for i in instances]
    procs = [subprocess.Popen(["ovs-appctl", f"--timeout={timeout_s:.0f}", "-t", t,
                               "revalidator/wait"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for t in targets]
    for proc in procs:
        try:
            proc.wait(timeout=timeout_s + 5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class OvsBuffers:
    """Buffers of ovs-vswitchd's packet sockets, reached through duplicates of its
    descriptors (pidfd_getfd; root): its one transmit socket (netdev-linux's packet socket
    bound to no interface) and the receive socket of each port.

    ``raise_send(n)`` makes the transmit buffer at least ``n`` bytes and remembers the old
    size (also on disk, for a run killed before it could restore), which ``restore()`` puts
    back unless someone changed it since. ``raise_receive`` enlarges the receive buffers of
    the given interfaces' sockets, which go away with the ports. OSError when OVS cannot be
    found or the kernel refuses."""

    MAX_BYTES = 1 << 30
    _SO_SNDBUFFORCE, _SO_RCVBUFFORCE = 32, 33
    _SYS_PIDFD_GETFD = 438  # the same number on every architecture

    def __init__(self, pidfile: Path = OVS_PIDFILE,
                 record: Path = netstate.STATE_DIR / "ovs-transmit-buffer"):
        self.pidfile, self.record = pidfile, record
        self.sock: socket.socket | None = None  # duplicate of the transmit socket
        self.before: int | None = None
        self.size: int | None = None

    def _sockets(self) -> tuple[int, dict[int, int]]:
        """OVS's pid and its packet sockets: descriptor -> bound ifindex (0: none)."""
        pid = int(self.pidfile.read_text().split()[0])
        bound = {}  # inode -> ifindex; the transmit socket also has protocol 0
        for line in Path(f"/proc/{pid}/net/packet").read_text().splitlines()[1:]:
            f = line.split()
            if len(f) >= 9:
                bound[f[8]] = -1 if f[4] == "0" and f[3] != "0000" else int(f[4])
        fds = {}
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and bound.get(target[8:-1], -1) >= 0:
                fds[int(fd)] = bound[target[8:-1]]
        return pid, fds

    def _dup(self, pid: int, fd: int) -> socket.socket:
        libc = ctypes.CDLL(None, use_errno=True)
        pidfd = os.pidfd_open(pid)
        try:
            new = libc.syscall(self._SYS_PIDFD_GETFD, pidfd, fd, 0)
        finally:
            os.close(pidfd)
        if new < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"pidfd_getfd on ovs-vswitchd: {os.strerror(err)}")
        return socket.socket(fileno=new)

    def send_size(self) -> int | None:
        """The transmit socket's buffer in bytes; None when OVS has not opened it yet (it
        does at its first transmission)."""
        if self.sock is None:
            pid, fds = self._sockets()
            unbound = [fd for fd, ifindex in fds.items() if ifindex == 0]
            if not unbound:
                return None
            if len(unbound) > 1:
                raise OSError(f"ovs-vswitchd has {len(unbound)} unbound packet sockets")
            self.sock = self._dup(pid, unbound[0])
        return _buffer(self.sock, socket.SO_SNDBUF)

    def receive_sizes(self, ifindexes: set[int]) -> list[int]:
        """Receive buffers of the sockets bound to ``ifindexes``."""
        pid, fds = self._sockets()
        sizes = []
        for fd, ifindex in fds.items():
            if ifindex in ifindexes:
                with self._dup(pid, fd) as sock:
                    sizes.append(_buffer(sock, socket.SO_RCVBUF))
        return sizes

    def raise_send(self, size: int) -> bool:
        """Transmit buffer to at least ``size`` bytes; False when OVS has not opened its
        transmit socket yet. The size found first is recorded on disk (``record``) until
        ``restore()``, so a run killed before restoring is undone by the next one."""
        now = self.send_size()
        if now is None:
            return False
        if self.before is None:
            key = f"{self.pidfile.read_text().split()[0]} {os.fstat(self.sock.fileno()).st_ino}"
            try:
                old_key, old_size = self.record.read_text().rsplit(" ", 1)
                self.before = int(old_size) if old_key == key else now
            except (OSError, ValueError):
                self.before = now
            self.record.parent.mkdir(parents=True, exist_ok=True)
            self.record.write_text(f"{key} {self.before}")
        if now < size:
            # the kernel doubles the value given (its bookkeeping overhead), as for SO_SNDBUF
            self.sock.setsockopt(socket.SOL_SOCKET, self._SO_SNDBUFFORCE, (size + 1) // 2)
        self.size = _buffer(self.sock, socket.SO_SNDBUF)
        return True

    def raise_receive(self, ifindexes: set[int], size: int) -> int:
        """Receive buffers of the sockets bound to ``ifindexes`` to at least ``size`` bytes;
        how many sockets were found."""
        pid, fds = self._sockets()
        found = 0
        for fd, ifindex in fds.items():
            if ifindex in ifindexes:
                with self._dup(pid, fd) as sock:
                    if _buffer(sock, socket.SO_RCVBUF) < size:
                        sock.setsockopt(socket.SOL_SOCKET, self._SO_RCVBUFFORCE, (size + 1) // 2)
                found += 1
        return found

    def restore(self) -> None:
        """Put the transmit buffer's old size back; close the duplicate (idempotent)."""
        sock, self.sock = self.sock, None
        if sock is None:
            return
        try:
            if self.before is not None and _buffer(sock, socket.SO_SNDBUF) == self.size:
                sock.setsockopt(socket.SOL_SOCKET, self._SO_SNDBUFFORCE, self.before // 2)
            if self.before is not None:
                self.record.unlink(missing_ok=True)
        except OSError as exc:
            print(f"emulation: restoring ovs-vswitchd's send buffer failed: {exc}",
                  file=sys.stderr)
        finally:
            sock.close()
            self.before = self.size = None


def ifindexes(netns: str | None = None) -> dict[str, int]:
    """Interface name -> ifindex in namespace ``netns`` (None: the root namespace)."""
    out = subprocess.run(["ip", *(["-n", netns] if netns else []), "-o", "link", "show"],
                         capture_output=True, text=True, timeout=10)
    found = {}
    for line in out.stdout.splitlines():
        index, name, _ = line.split(":", 2)
        found[name.strip().split("@")[0]] = int(index)
    return found


def _buffer(sock: socket.socket, which: int) -> int:
    return sock.getsockopt(socket.SOL_SOCKET, which)


class ControlRelay:
    """Pipes every connection to ``path`` (a Unix socket) to the controller at
    127.0.0.1:``port``, on daemon threads, until ``close()``: the controller stays on
    loopback while bridges in other namespaces reach it."""

    def __init__(self, path: Path, port: int) -> None:
        self.path, self.port = Path(path), port
        self.path.unlink(missing_ok=True)
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(self.path))
        self.server.listen(64)
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name=f"relay-{self.path.parent.name}",
                         daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                inner, _ = self.server.accept()
            except OSError:
                return  # closed
            try:
                outer = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                outer.settimeout(None)
            except OSError:
                inner.close()  # the bridge retries, as with an absent controller
                continue
            with self._lock:
                self._open += [inner, outer]
            for a, b in ((inner, outer), (outer, inner)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        """Stop accepting and end every piped connection (idempotent)."""
        self.server.close()
        with self._lock:
            for sock in self._open:
                try:
                    sock.close()
                except OSError:
                    pass
            self._open.clear()
        self.path.unlink(missing_ok=True)
