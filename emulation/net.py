"""An emulated network: Mininet hosts, Open vSwitch userspace bridges and our controller.

The one module that imports Mininet (lazily, so a missing install gives a clear message).
Built from a topology graph (``topology.make_graph``):

- BCube and DCell servers relay, so each is a Mininet host (graph name, e.g. ``s00``) plus an
  OVS bridge (``vs00``) holding its NICs; the host reaches its bridge over an unshaped link (it
  stands for the server's bus, not a NIC), every graph link is shaped with HTB. Jellyfish
  servers are plain hosts on their ToR switch.
- Switches use the userspace datapath (no OVS kernel module here), OpenFlow 1.3, fail mode
  secure (nothing forwards or floods before the controller's rules), explicit dpids and port
  numbers decided by ``controller.topofile.layout``. Veth TX/RX checksum offload is off (TCP
  stalls through the userspace datapath otherwise) unless ``tso=True`` and OVS runs with
  userspace TSO. Delay and loss cannot be emulated: this kernel has no netem.
- Hosts: IPv4 by rank, static ARP for every other host, IPv6 off.
- The controller runs as ``python -m controller``; start() returns once every datapath is
  connected and its base rules are confirmed. Everything created is recorded in a state file
  (``emulation.netstate``) so ``clean()`` can remove a crashed run's leftovers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import networkx as nx

from controller.client import ControllerClient, ControllerError
from controller.topofile import layout
from emulation import netstate, probes
from emulation.plan import EmulationError, plan_links, port_free, preflight

__all__ = ["EmulatedNetwork", "EmulationError", "clean", "plan_links"]

REPO = Path(__file__).resolve().parent.parent
CONTROLLER_TIMEOUT_S = 60.0


def _mininet():
    try:
        from mininet.link import TCLink
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.node import OVSSwitch, RemoteController
    except ImportError as exc:
        raise EmulationError(f"Mininet is missing ({exc}): run scripts/setup.sh") from None

    class MarkedSwitch(OVSSwitch):
        """OVSSwitch whose bridge carries external-ids:allreduce-testbed=<run id>."""

        def __init__(self, name, run_id="", **params):
            self.run_id = run_id
            super().__init__(name, **params)

        def bridgeOpts(self):
            return super().bridgeOpts() + f" external-ids:{netstate.MARK}={self.run_id}"

        @classmethod
        def batchStartup(cls, switches, run=None):
            """Mininet's batch start with a timeout and a checked exit code, and without
            re-running every link's tc setup afterwards (the userspace datapath leaves the
            qdiscs alone; the emulation tests measure the shaping)."""
            commands = []
            for switch in switches:
                commands += [c.strip() for c in switch.commands]
                switch.commands, switch.batch = [], False
            while commands:
                chunk = []
                while commands and sum(len(c) + 1 for c in chunk) < 100_000:
                    chunk.append(commands.pop(0))
                out = subprocess.run("ovs-vsctl --timeout=60 " + " ".join(chunk), shell=True,
                                     capture_output=True, text=True, timeout=90)
                if out.returncode != 0:
                    raise EmulationError(f"creating the OVS bridges failed: {out.stderr[-400:]}")
            return switches

    class Controller(RemoteController):
        """Our controller process runs outside Mininet; skip Mininet's telnet probe."""

        def checkListening(self):
            return None

    return Mininet, MarkedSwitch, Controller, TCLink, setLogLevel


class EmulatedNetwork:
    """A Mininet network of ``graph`` steered by our controller; a context manager.

    ``bw_mbps`` overrides every graph link's ``bw_mbps``. ``start()`` returns once the
    controller has every datapath connected with base rules installed; ``stop()`` (idempotent)
    always removes everything, also after a failed start. One network runs per machine at a
    time: ``start()`` waits up to ``wait_s`` for another one to finish."""

    def __init__(self, graph: nx.Graph, workdir: Path, of_port: int = 6653,
                 api_port: int = 8080, bw_mbps: float | None = None, tso: bool = False,
                 wait_s: float = 600.0):
        if bw_mbps is not None and not bw_mbps > 0:
            raise ValueError(f"bw_mbps must be > 0, got {bw_mbps!r}")
        self.graph = graph.copy()
        if bw_mbps is not None:
            nx.set_edge_attributes(self.graph, float(bw_mbps), "bw_mbps")
            self.graph.graph["bw_mbps"] = float(bw_mbps)
        self.workdir = Path(workdir)
        self.of_port, self.api_port, self.tso = of_port, api_port, tso
        self.wait_s = wait_s
        self._lock = netstate.NetworkLock()
        self.topology = layout(self.graph)
        self.topology_file = self.workdir / "topology.json"
        self.client = ControllerClient("127.0.0.1", api_port)
        self.timings: dict[str, float] = {}
        self.net = None
        self.controller: subprocess.Popen | None = None
        self._procs: list = []
        self._previous_sigterm = None
        self.state = netstate.RunState(
            run_id=f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}",
            owner_pid=os.getpid(), owner_cmdline=netstate.cmdline(os.getpid()),
            workdir=str(self.workdir))

    # --- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> EmulatedNetwork:
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            self._previous_sigterm = signal.signal(signal.SIGTERM, _raise_exit)
        try:
            self.start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        finally:
            if self._previous_sigterm is not None:
                signal.signal(signal.SIGTERM, self._previous_sigterm)
                self._previous_sigterm = None

    def start(self) -> None:
        """Build the network, start the controller, wait for every datapath and base rule."""
        preflight(self.tso)
        try:
            self._lock.acquire(self.state.run_id, self.wait_s)
        except TimeoutError as exc:
            raise EmulationError(str(exc)) from None
        t0 = time.monotonic()
        links = plan_links(self.topology)
        self.state.bridges = [dp.bridge for dp in self.topology.datapaths.values()]
        self.state.root_intfs = [
            name for link in links for name, end in (("intf_a", "a"), ("intf_b", "b"))
            for name in [link[name]] if link[end] not in self.topology.hosts]
        self._check_free()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.topology.save(self.topology_file)
        self.state.save()
        self._start_controller()
        self._build(links)
        self.timings["hosts_links_s"] = time.monotonic() - t0
        # Bridges created before the controller listens back off for seconds: wait for it.
        self._wait_controller(t0, ready=False)
        self.timings["controller_api_s"] = time.monotonic() - t0
        self.net.start()
        self._check_ports()
        self._shape_switch_ports(links)
        self.timings["network_up_s"] = time.monotonic() - t0
        self._wait_controller(t0)

    def _check_free(self) -> None:
        netstate.clean()
        taken = [n for n in self.state.bridges + self.state.root_intfs if netstate.link_exists(n)]
        if taken:
            raise EmulationError(f"interfaces {', '.join(taken[:5])} already exist (another "
                                 "emulated network is running?); `python -m emulation.run "
                                 "--clean` removes a crashed run's leftovers")
        for port in (self.of_port, self.api_port):
            if not port_free(port):
                raise EmulationError(f"port 127.0.0.1:{port} is in use (another controller?)")

    def _start_controller(self) -> None:
        log = self.workdir / "controller.log"
        cmd = [sys.executable, "-m", "controller", "--topology", str(self.topology_file),
               "--of-port", str(self.of_port), "--api", f"127.0.0.1:{self.api_port}",
               "--log", str(log)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
        with open(self.workdir / "controller.out", "wb") as out:
            self.controller = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                               stderr=subprocess.STDOUT, env=env, cwd=REPO,
                                               start_new_session=True)
        self.state.controller_pid = self.controller.pid
        self.state.controller_marker = str(self.topology_file)
        self.state.save()

    def _build(self, links: list[dict]) -> None:
        Mininet, MarkedSwitch, Controller, TCLink, setLogLevel = _mininet()
        setLogLevel(os.environ.get("ARTB_MININET_LOG", "warning"))
        topo = self.topology
        self.net = net = Mininet(topo=None, build=False, controller=None, cleanup=False)
        net.addController(Controller("c0", ip="127.0.0.1", port=self.of_port))
        sysctls = ("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 "
                   "net.ipv6.conf.default.disable_ipv6=1 net.ipv6.conf.lo.disable_ipv6=1")
        for name, addr in topo.hosts.items():
            host = net.addHost(name, ip=f"{addr.ip}/16", mac=addr.mac)
            self.state.host_pids[name] = host.pid
            host.cmd(sysctls)
        self.state.save()
        for dp in topo.datapaths.values():
            net.addSwitch(dp.bridge, cls=MarkedSwitch, dpid=f"{dp.dpid:016x}", datapath="user",
                          protocols="OpenFlow13", failMode="secure", batch=True,
                          run_id=self.state.run_id)
        offload = {"txo": self.tso, "rxo": self.tso}
        for link in links:
            # Host ends are shaped here; OVS resets a port's qdisc when it adds the port, so
            # switch ends are shaped after the bridges exist (_shape_switch_ports).
            ends = [{"bw": link["bw_mbps"]} if link["bw_mbps"] and link[end] in topo.hosts
                    else {} for end in ("a", "b")]
            net.addLink(link["a"], link["b"], port1=link["port_a"], port2=link["port_b"],
                        intfName1=link["intf_a"], intfName2=link["intf_b"], cls=TCLink,
                        params1=ends[0], params2=ends[1], **offload)
        for name in self.state.root_intfs:
            _write(f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6", "1")
        net.build()
        for name, host in ((n, net.get(n)) for n in topo.hosts):
            self._static_arp(name, host)

    def _shape_switch_ports(self, links: list[dict]) -> None:
        """HTB at each graph link's rate on every switch-side interface, in one tc batch
        (the same qdisc and class Mininet's TCLink sets)."""
        lines = []
        for link in links:
            for end in ("a", "b"):
                if link["bw_mbps"] and link[end] not in self.topology.hosts:
                    dev = link[f"intf_{end}"]
                    lines += [f"qdisc replace dev {dev} root handle 5: htb default 1",
                              f"class replace dev {dev} parent 5: classid 5:1 htb rate "
                              f"{link['bw_mbps']:g}Mbit burst 15k"]
        if not lines:
            return
        batch = self.workdir / "shaping.tc"
        batch.write_text("\n".join(lines) + "\n")
        out = subprocess.run(["tc", "-batch", str(batch)], capture_output=True, text=True,
                             timeout=60)
        if out.returncode != 0:
            raise EmulationError(f"link shaping (tc -batch {batch}) failed: {out.stderr[-400:]}")

    def _static_arp(self, name: str, host) -> None:
        intf = host.defaultIntf().name
        lines = [f"neigh replace {a.ip} lladdr {a.mac} dev {intf} nud permanent"
                 for other, a in self.topology.hosts.items() if other != name]
        batch = self.workdir / f"arp-{name}.batch"
        batch.write_text("\n".join(lines) + "\n")
        out = host.cmd(f"ip -batch {batch} && echo ARP-OK")
        if "ARP-OK" not in out:
            raise EmulationError(f"static ARP entries on {name} failed: {out.strip()[:200]}")
        batch.unlink()

    def _check_ports(self) -> None:
        """OVS honours ofport_request unless the number is taken: check every port number."""
        out = netstate.vsctl("--format=json", "--columns=name,ofport", "list", "Interface")
        ofport = {name: port for name, port in json.loads(out.stdout)["data"]}
        for link in plan_links(self.topology):
            for end, p in (("intf_a", "port_a"), ("intf_b", "port_b")):
                if link[p] and ofport.get(link[end]) != link[p]:
                    raise EmulationError(f"OVS gave {link[end]} OpenFlow port "
                                         f"{ofport.get(link[end])}, not {link[p]}")

    def _wait_controller(self, t0: float, ready: bool = True) -> None:
        """Poll /health until the API answers (``ready=False``) or every datapath is ready."""
        deadline = time.monotonic() + CONTROLLER_TIMEOUT_S
        health: dict = {}
        while time.monotonic() < deadline:
            if self.controller.poll() is not None:
                raise EmulationError("the controller exited (code "
                                     f"{self.controller.returncode}):\n{self._controller_log()}")
            try:
                health = self.client.health()
            except ControllerError:
                health = {}
            if health and not ready:
                return
            if health and health["connected"] == health["expected"]:
                self.timings.setdefault("controller_connected_s", time.monotonic() - t0)
            if health.get("ready"):
                self.timings["base_rules_installed_s"] = time.monotonic() - t0
                return
            time.sleep(0.05)
        raise EmulationError(
            f"controller not ready after {CONTROLLER_TIMEOUT_S:.0f} s: "
            f"{health.get('connected', 0)} of {len(self.topology.datapaths)} datapaths "
            f"connected, waiting for {', '.join(health.get('missing', [])[:6]) or 'its API'}"
            f"\n{self._controller_log()}")

    def _controller_log(self, lines: int = 15) -> str:
        text = ""
        for name in ("controller.out", "controller.log"):
            path = self.workdir / name
            if path.exists():
                text += "".join(path.read_text(errors="replace").splitlines(True)[-lines:])
        return text

    def stop(self) -> None:
        """Tear everything down (idempotent): workers, Mininet, controller, leftovers, state."""
        for proc in self._procs:
            probes.kill(proc)
        self._procs = []
        net, self.net = self.net, None
        if net is not None:
            try:
                net.stop()
            except Exception as exc:  # keep tearing down; report at the end
                print(f"emulation: Mininet stop failed: {exc}", file=sys.stderr)
            for c in net.controllers:
                c.terminate()
        if self.controller is not None:
            netstate.terminate(self.controller.pid, str(self.topology_file))
            self.controller.wait()
            self.controller = None
        if self.state.path.exists():
            netstate.remove_run(self.state)
        self._lock.release()

    # --- using the network ------------------------------------------------------------------

    def ping_all(self, timeout_s: float = 1.0) -> dict:
        """One ping between every ordered pair of servers (``emulation.probes.ping_all``)."""
        return probes.ping_all(self, timeout_s)

    def measure_goodput(self, src: str, dst: str, seconds: float = 3.0, port: int = 5001,
                        warmup_s: float = 0.5) -> float:
        """Mbit/s of one TCP flow src -> dst (``emulation.probes.measure_goodput``)."""
        return probes.measure_goodput(self, src, dst, seconds, port, warmup_s)

    @property
    def servers(self) -> list[str]:
        """Server names by rank."""
        return sorted(self.topology.hosts, key=lambda v: self.graph.nodes[v]["rank"])

    def cli(self) -> None:
        """Open Mininet's interactive CLI on the running network."""
        from mininet.cli import CLI

        CLI(self.net)

    def calibrate(self, seconds: float = 3.0) -> dict:
        """Single-flow probe between the first two servers over their base (shortest) path:
        configured bottleneck rate, measured goodput and their ratio."""
        src, dst = self.servers[0], self.servers[1]
        path = nx.shortest_path(self.graph, src, dst)
        configured = min(self.graph.edges[a, b]["bw_mbps"] for a, b in zip(path, path[1:]))
        measured = self.measure_goodput(src, dst, seconds)
        return {"src": src, "dst": dst, "path": path, "seconds": seconds,
                "configured_mbps": configured, "measured_mbps": measured,
                "goodput_ratio": measured / configured}

    def host(self, name: str):
        """The Mininet host of server ``name``."""
        if self.net is None:
            raise EmulationError("the network is not running")
        return self.net.get(name)

    def ip(self, name: str) -> str:
        """IPv4 address of server ``name``."""
        return self.topology.ip(name)

    def popen(self, name: str, *args, **kwargs):
        """Start a process inside host ``name``; stop() kills it if it still runs."""
        proc = self.host(name).popen(*args, **kwargs)
        self._procs.append(proc)
        return proc

def clean(force: bool = False) -> list[str]:
    """Remove the leftovers of crashed runs (our bridges, interfaces, host shells and
    controllers only; ``force`` also those of runs still alive); what was removed."""
    removed = netstate.clean(force=force)
    return ([f"run {r}" for r in removed["runs"]]
            + [f"process {p}" for p in removed["processes"]]
            + [f"bridge {b}" for b in removed["bridges"]]
            + [f"link {name}" for name in removed["links"]])


def _write(path: str, value: str) -> None:
    try:
        Path(path).write_text(value)
    except OSError:
        pass


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)
