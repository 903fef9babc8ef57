"""An emulated network: Mininet hosts, Open vSwitch userspace bridges and our controller.

The one module that imports Mininet (lazily, so a missing install gives a clear message).
Built from a topology graph (``topology.make_graph``):

- BCube and DCell servers relay, so each is a Mininet host (graph name, e.g. ``s00``) plus an
  OVS bridge (``vs00``) holding its NICs; the host reaches its bridge over an unshaped link (it
  stands for the server's bus, not a NIC), every graph link is shaped with HTB
  (``emulation.plan.shaping_commands``: data and control packets queue apart). Jellyfish
  servers are plain hosts on their ToR switch.
- Switches use the userspace datapath (no OVS kernel module here), OpenFlow 1.3, fail mode
  secure (nothing forwards or floods before the controller's rules), explicit dpids and port
  numbers decided by ``controller.topofile.layout``. Veth TX/RX checksum offload is off (TCP
  stalls through the userspace datapath otherwise) unless ``tso=True`` and OVS runs with
  userspace TSO. Delay and loss cannot be emulated: this kernel has no netem.
- Every interface has a 9000-byte MTU (``mtu``): the one OVS thread pays per packet, and jumbo
  frames cut the packet rate sixfold, so it keeps up (also on a loaded 2-core machine) and
  headers cost 0.6 % of a link instead of 4 %.
- Hosts: IPv4 by rank, static ARP for every other host, IPv6 off, no slow start after idle.
- The controller runs as ``python -m controller``; start() returns once every datapath is
  connected and its base rules are confirmed. Everything created is recorded in a state file
  (``emulation.netstate``) so ``clean()`` can remove a crashed run's leftovers.
- OVS's socket buffers (``emulation.ovs.OvsBuffers``). ovs-vswitchd transmits on every port
  through one AF_PACKET socket, and a packet waiting in a shaped port's HTB queue is charged
  to that socket's send buffer (``net.core.wmem_default``, 208 KiB: about 90 full-size packets
  for all the queues of the whole network together). When it is full OVS drops what it sends,
  seen by no counter (only a rate-limited "error sending Ethernet packet ...: Resource
  temporarily unavailable" in its log), and TCP loses segments on every link. Each port's
  receive socket (208 KiB too: 13 jumbo frames) overflows when a host bursts into its unshaped
  link or OVS is off the CPU for a while (``ss -0 -m`` shows those drops). While a network
  runs, the transmit buffer holds every shaped port's full queue and each port's receive
  buffer a full queue; ``stop()`` restores the transmit buffer (the receive sockets go with
  the ports).
"""

from __future__ import annotations

import ipaddress
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import networkx as nx

from controller.client import ControllerClient, ControllerError
from controller.topofile import layout
from emulation import netstate, ovs, probes
from emulation.backend import Emulated, run_schedule
from emulation.ovs import OvsBuffers, ifindexes
from emulation.plan import (
    EmulationError,
    mininet_name,
    plan_links,
    port_free,
    preflight,
    shaping_commands,
)
from topology.routing import servers
from traffic.runner import WorkerPool
from traffic.schedule import Schedule

__all__ = ["EmulatedNetwork", "EmulationError", "OvsBuffers", "clean", "plan_links"]

REPO = Path(__file__).resolve().parent.parent
CONTROLLER_TIMEOUT_S = 60.0
#: MTU of every emulated interface (jumbo frames, see the module doc).
MTU = 9000
#: The Ethernet header: a full frame as the links' shaping counts it is the MTU and this
#: (``EmulatedNetwork.frame_bytes``).
ETHERNET_HEADER_BYTES = 14
#: Minimum TCP retransmission timeout in the hosts (see _build).
RTO_MIN_MS = 1000
#: Packets an HTB leaf (pfifo at the veth's txqueuelen) holds.
QUEUE_PACKETS = 1000


def _mininet():
    try:
        from mininet.link import TCLink
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.node import OVSSwitch, RemoteController
    except ImportError as exc:
        raise EmulationError(f"Mininet is not importable by {sys.executable} ({exc}): run "
                             "scripts/setup.sh, then use its venv ('sudo python' after set-up "
                             "runs it)") from None

    class MarkedSwitch(OVSSwitch):
        """OVSSwitch whose bridge carries external-ids:allreduce-testbed=<run id>, created in
        Open vSwitch instance ``instance`` (None: the system's), whose bridges reach the
        controller through the instance's relay socket (``emulation.ovs``)."""

        def __init__(self, name, run_id="", instance=None, **params):
            self.run_id, self.instance = run_id, instance
            super().__init__(name, **params)

        def bridgeOpts(self):
            return super().bridgeOpts() + f" external-ids:{netstate.MARK}={self.run_id}"

        def start(self, controllers):
            super().start(controllers)
            if self.instance is not None:  # batch mode: the command is queued, not run
                old = [f'target=\\"tcp:{c.IP()}:{c.port}\\"' for c in controllers]
                new = f'target=\\"{self.instance.controller_target}\\"'
                commands = []
                for command in self.commands:
                    for target in old:
                        command = command.replace(target, new)
                    commands.append(command)
                if not any(new in c for c in commands):
                    raise EmulationError(f"no controller target to redirect for {self.name}")
                self.commands = commands

        @classmethod
        def batchStartup(cls, switches, run=None):
            """Mininet's batch start with a timeout and a checked exit code, and without
            re-running every link's tc setup afterwards (the userspace datapath leaves the
            qdiscs alone; the emulation tests measure the shaping)."""
            by_db: dict[str, list[str]] = {}
            for switch in switches:
                db = f"--db={switch.instance.db} " if switch.instance else ""
                by_db.setdefault(db, []).extend(c.strip() for c in switch.commands)
                switch.commands, switch.batch = [], False
            for db, commands in by_db.items():
                while commands:
                    chunk = []
                    while commands and sum(len(c) + 1 for c in chunk) < 100_000:
                        chunk.append(commands.pop(0))
                    out = subprocess.run(f"ovs-vsctl {db}--timeout=60 " + " ".join(chunk),
                                         shell=True, capture_output=True, text=True, timeout=90)
                    if out.returncode != 0:
                        raise EmulationError("creating the OVS bridges failed: "
                                             f"{out.stderr[-400:]}")
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
                 wait_s: float = 600.0, mtu: int = MTU, datapath: str = "user",
                 delay_ms: float = 0.0, loss_pct: float = 0.0, ovs_instances: int = 1):
        if bw_mbps is not None and not bw_mbps > 0:
            raise ValueError(f"bw_mbps must be > 0, got {bw_mbps!r}")
        if datapath not in ("user", "kernel"):
            raise ValueError(f"datapath must be user or kernel, got {datapath!r}")
        ovs.check_instances(ovs_instances, datapath)
        #: The extra Open vSwitch instances (the system's is instance 0); start() keeps no
        #: more than the network has bridges for.
        self.instances = [ovs.Instance(k) for k in range(1, ovs_instances)]
        #: Instance of every bridge, and namespace of every switch-side interface (None: root).
        self.assignment: dict[str, int] = {}
        self.port_netns: dict[str, str | None] = {}
        self._started: list[ovs.Instance] = []  # what stop() may remove: ours only
        self._relays: list[ovs.ControlRelay] = []
        self.datapath, self.delay_ms, self.loss_pct = datapath, delay_ms, loss_pct
        self.graph = graph.copy()
        if bw_mbps is not None:
            nx.set_edge_attributes(self.graph, float(bw_mbps), "bw_mbps")
            self.graph.graph["bw_mbps"] = float(bw_mbps)
        self.workdir = Path(workdir)
        self.of_port, self.api_port, self.tso, self.mtu = of_port, api_port, tso, mtu
        self.wait_s = wait_s
        self._lock = netstate.NetworkLock()
        self.topology = layout(self.graph)
        self.topology_file = self.workdir / "topology.json"
        self.client = SyncedClient("127.0.0.1", api_port, self.instances)
        self.timings: dict[str, float] = {}
        self.net = None
        self.ovs_buffers = OvsBuffers()
        self._extra_buffers: list[OvsBuffers] = []
        self.controller: subprocess.Popen | None = None
        self._procs: list = []
        #: The socket workers, kept from one run to the next (the runs of one network share
        #: their servers; a Python process's start-up is then paid once per server).
        self.workers = WorkerPool(self.spawn_worker)
        self._background: list = []
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
        ports: dict[str, int] = {bridge: 0 for bridge in self.state.bridges}
        for link in links:
            for end in ("a", "b"):
                if link[end] in ports:
                    ports[link[end]] += 1
        # No instance without a bridge; in place, because the client holds this list.
        del self.instances[max(0, len(ports) - 1):]
        self.assignment = ovs.assign(ports, len(self.instances) + 1)
        self.port_netns = {link[f"intf_{end}"]: self._netns(link[end])
                           for link in links for end in ("a", "b")
                           if link[end] not in self.topology.hosts}
        self._check_free()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.topology.save(self.topology_file)
        self.state.ovs_instances = [i.index for i in self.instances]
        self.state.save()
        for instance in self.instances:
            self._started.append(instance)
            try:
                instance.start(self.tso)
            except RuntimeError as exc:
                raise EmulationError(str(exc)) from None
            self._relays.append(ovs.ControlRelay(instance.control_socket, self.of_port))
        if self.datapath == "user":
            try:
                ovs.prime(self.state.run_id, self.instances)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                raise EmulationError(f"preparing Open vSwitch's datapath: {exc}") from None
        self.timings["ovs_instances_s"] = time.monotonic() - t0
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
        if self.datapath == "user":
            self._raise_ovs_buffers(links)

    def _netns(self, bridge: str) -> str | None:
        """Namespace of a bridge's ports: None for the system instance's (root)."""
        k = self.assignment.get(bridge, 0)
        return self.instances[k - 1].netns if k else None

    def _raise_ovs_buffers(self, links: list[dict]) -> None:
        """OVS's socket buffers (see the module doc): the transmit socket holds every shaped
        port's full queue, each port's receive socket a full queue too (a host bursts into
        its unshaped link; OVS may be off the CPU for a while). OVS opens its transmit socket
        at its first transmission: one ping makes it when there is none yet."""
        # kernel memory one queued packet costs (skb truesize, generously rounded up)
        truesize = 68 * 1024 if self.tso else 2 * (self.mtu + 1024)
        queue = QUEUE_PACKETS * truesize
        shaped = sum(1 for link in links if link["bw_mbps"]) * 2
        buffers = [(None, self.ovs_buffers)] + [
            (i.netns, OvsBuffers(i.pidfile, i.rundir / "transmit-buffer")) for i in self.instances]
        self._extra_buffers = [b for _, b in buffers[1:]]
        send = min(shaped * queue, OvsBuffers.MAX_BYTES)
        try:
            # each instance opens its transmit socket at its first transmission: ping from
            # server to server until every one has
            pending = [b for _, b in buffers if not b.raise_send(send)]
            for a, b in zip(self.servers, self.servers[1:] + self.servers[:1]):
                if not pending:
                    break
                self.host(a).cmd(f"ping -c1 -W1 {self.ip(b)}")
                pending = [x for x in pending if not x.raise_send(send)]
            if pending:
                raise OSError(f"{len(pending)} ovs-vswitchd opened no transmit socket")
            for netns, buf in buffers:
                mine = {p for p, ns in self.port_netns.items() if ns == netns}
                indexes = {i for name, i in ifindexes(netns).items() if name in mine}
                found = buf.raise_receive(indexes, queue)
                if found < len(mine):
                    raise OSError(f"found the receive sockets of {found} of {len(mine)} ports")
        except OSError as exc:
            print(f"emulation: warning: cannot raise ovs-vswitchd's socket buffers ({exc}); "
                  "TCP will lose packets when more than a few wait at a port", file=sys.stderr)

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
        # Per namespace: IPv6 off; a persistent connection idle between two transfers keeps
        # its congestion window; no retransmission while a segment waits its turn in a link's
        # queue. Queues hold 1000 times longer at 10 Mbit/s than at the 10 Gbit/s emulated (a
        # round robin over 30 flows of 9000-byte frames takes 0.2 s), so the 200 ms minimum
        # retransmission timeout and tail loss probes (2 round trips) fire spuriously and
        # waste link time; nothing is lost on the way (see OvsBuffers). Tail loss probes are
        # off here, the timeout's floor is RTO_MIN_MS on the subnet route (_static_arp).
        sysctls = ("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 "
                   "net.ipv6.conf.default.disable_ipv6=1 net.ipv6.conf.lo.disable_ipv6=1 "
                   "net.ipv4.tcp_slow_start_after_idle=0 net.ipv4.tcp_early_retrans=0")
        for name, addr in topo.hosts.items():
            host = net.addHost(name, ip=f"{addr.ip}/16", mac=addr.mac)
            self.state.host_pids[name] = host.pid
            host.cmd(sysctls)
        self.state.save()
        for dp in topo.datapaths.values():
            k = self.assignment.get(dp.bridge, 0)
            net.addSwitch(dp.bridge, cls=MarkedSwitch, dpid=f"{dp.dpid:016x}",
                          datapath=self.datapath, protocols="OpenFlow13", failMode="secure",
                          batch=True, run_id=self.state.run_id,
                          instance=self.instances[k - 1] if k else None)
        offload = {"txo": self.tso, "rxo": self.tso}
        for link in links:
            net.addLink(link["a"], link["b"], port1=link["port_a"], port2=link["port_b"],
                        intfName1=link["intf_a"], intfName2=link["intf_b"], cls=TCLink,
                        **offload)
        for name in self.state.root_intfs:
            _write(f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6", "1")
        net.build()
        self._set_mtu(links)
        self._move_ports()
        for name, host in ((n, net.get(n)) for n in topo.hosts):
            self._static_arp(name, host)
        # Host ends are shaped here; OVS resets a port's qdisc when it adds the port, so
        # switch ends are shaped after the bridges exist (_shape_switch_ports).
        for name in topo.hosts:
            lines = [line for link in links for end in ("a", "b")
                     if link["bw_mbps"] and link[end] == name
                     for line in shaping_commands(link[f"intf_{end}"], link["bw_mbps"], self.mtu,
                                                 self.delay_ms, self.loss_pct)]
            if lines:
                self._tc_batch(lines, f"shaping-{name}.tc", net.get(name))

    def _set_mtu(self, links: list[dict]) -> None:
        """Every interface at ``self.mtu``, before OVS adds the switch ends as ports."""
        if self.mtu == 1500:
            return
        by_node: dict = {}
        for link in links:
            for end in ("a", "b"):
                node = link[end] if link[end] in self.topology.hosts else None
                by_node.setdefault(node, []).append(link[f"intf_{end}"])
        for node, intfs in by_node.items():
            lines = "\n".join(f"link set dev {i} mtu {self.mtu}" for i in intfs) + "\n"
            batch = self.workdir / f"mtu-{node or 'root'}.batch"
            batch.write_text(lines)
            if node is None:
                out = subprocess.run(["ip", "-batch", str(batch)], capture_output=True,
                                     text=True, timeout=60)
                ok, err = out.returncode == 0, out.stderr
            else:
                err = self.net.get(node).cmd(
                    f"ip -batch {shlex.quote(str(batch))} 2>&1 && echo MTU-OK")
                ok = "MTU-OK" in err
            if not ok:
                raise EmulationError(f"setting MTU {self.mtu} failed: {err[-300:]}")

    def _move_ports(self) -> None:
        """The switch-side interfaces of every extra instance's bridges into its namespace
        (before the bridges exist), up again there (a move takes an interface down)."""
        for instance in self.instances:
            mine = sorted(i for i, ns in self.port_netns.items() if ns == instance.netns)
            if not mine:
                continue
            for where, lines in ((None, [f"link set dev {i} netns {instance.netns}"
                                         for i in mine]),
                                 (instance.netns, [f"link set dev {i} up" for i in mine])):
                batch = self.workdir / f"move-{instance.netns}.batch"
                batch.write_text("\n".join(lines) + "\n")
                out = subprocess.run(["ip", *(["-n", where] if where else []), "-batch",
                                      str(batch)], capture_output=True, text=True, timeout=60)
                if out.returncode != 0:
                    raise EmulationError(f"moving ports into {instance.netns} failed: "
                                         f"{out.stderr[-300:]}")

    def _shape_switch_ports(self, links: list[dict]) -> None:
        """HTB at each graph link's rate on every switch-side interface, in one tc batch per
        namespace (``emulation.plan.shaping_commands``)."""
        by_netns: dict[str | None, list[str]] = {}
        for link in links:
            for end in ("a", "b"):
                if link["bw_mbps"] and link[end] not in self.topology.hosts:
                    intf = link[f"intf_{end}"]
                    by_netns.setdefault(self.port_netns.get(intf), []).extend(shaping_commands(
                        intf, link["bw_mbps"], self.mtu, self.delay_ms, self.loss_pct))
        for netns, lines in by_netns.items():
            self._tc_batch(lines, f"shaping-{netns or 'root'}.tc", netns=netns)

    def _tc_batch(self, lines: list[str], name: str, host=None, netns: str | None = None
                  ) -> None:
        """Run tc commands in one batch, in ``host``'s namespace, or else in ``netns`` (None:
        the root namespace)."""
        batch = self.workdir / name
        batch.write_text("\n".join(lines) + "\n")
        if host is None:
            # tc slows as the root namespace fills with classes (about 200 000 lines for the
            # switch ports of a 64-server BCube(4,2)): the limit grows with the batch.
            out = subprocess.run(["tc", *(["-n", netns] if netns else []), "-batch", str(batch)],
                                 capture_output=True, text=True, timeout=60 + len(lines) / 500)
            ok, err = out.returncode == 0, out.stderr
        else:
            err = host.cmd(f"tc -batch {shlex.quote(str(batch))} 2>&1 && echo TC-OK")
            ok = "TC-OK" in err
        if not ok:
            raise EmulationError(f"link shaping (tc -batch {batch}) failed: {err[-400:]}")

    def _static_arp(self, name: str, host) -> None:
        """Static ARP entries for every other host, and the minimum retransmission timeout
        on the hosts' subnet route (see _build)."""
        intf = host.defaultIntf().name
        addr = self.topology.hosts[name].ip
        subnet = ipaddress.ip_interface(f"{addr}/16").network
        lines = [f"neigh replace {a.ip} lladdr {a.mac} dev {intf} nud permanent"
                 for other, a in self.topology.hosts.items() if other != name]
        lines.append(f"route replace {subnet} dev {intf} proto kernel scope link src {addr} "
                     f"rto_min {RTO_MIN_MS}ms")
        batch = self.workdir / f"arp-{name}.batch"
        batch.write_text("\n".join(lines) + "\n")
        out = host.cmd(f"ip -batch {shlex.quote(str(batch))} && echo ARP-OK")
        if "ARP-OK" not in out:
            raise EmulationError(f"static ARP entries on {name} failed: {out.strip()[:200]}")
        batch.unlink()

    def _check_ports(self) -> None:
        """OVS honours ofport_request unless the number is taken: check every port number."""
        ofport = {}
        for db in [[]] + [[f"--db={i.db}"] for i in self.instances]:
            out = netstate.vsctl(*db, "--format=json", "--columns=name,ofport", "list",
                                 "Interface")
            ofport.update({name: port for name, port in json.loads(out.stdout)["data"]})
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
        self.workers.close()
        for proc in self._procs:
            probes.kill(proc)
        self._procs = []
        net, self.net = self.net, None
        if net is not None:
            unlinking: list[subprocess.Popen] = []
            try:
                unlinking = self._unlink(net)
            except Exception as exc:  # Mininet's stop deletes the links instead
                print(f"emulation: batch link deletion failed: {exc}", file=sys.stderr)
            try:
                net.stop()
            except Exception as exc:  # keep tearing down; report at the end
                print(f"emulation: Mininet stop failed: {exc}", file=sys.stderr)
            for proc in unlinking:
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    probes.kill(proc)  # what it left, remove_run deletes below
            for c in net.controllers:
                c.terminate()
        if self.controller is not None:
            netstate.stop_child(self.controller)
            self.controller = None
        self.ovs_buffers.restore()
        for buffers in self._extra_buffers:
            buffers.restore()
        self._extra_buffers = []
        for relay in self._relays:
            relay.close()
        self._relays = []
        for instance in self._started:
            try:
                instance.stop()
            except RuntimeError as exc:  # kept in the state file for clean()
                print(f"emulation: {exc}", file=sys.stderr)
        self._started = []
        if self.state.path.exists():
            netstate.remove_run(self.state)
        self._lock.release()

    def _unlink(self, net) -> list[subprocess.Popen]:
        """Start deleting every link with a switch end (one ``ip -batch`` per namespace
        holding such ends) and take those links off Mininet's list: its stop deletes both
        ends of each link, one shell command at a time, before it removes the bridges, while
        these batches run alongside the bridges' removal (deleting one end of a veth deletes
        the pair). Links between two servers stay Mininet's. Returns the batches' processes;
        what they leave in the root namespace, ``netstate.remove_run`` deletes."""
        ends: dict[str | None, list] = {}
        rest = []
        for link in net.links:
            end = next((i.name for i in (link.intf1, link.intf2) if i.name in self.port_netns),
                       None)
            if end is None:
                rest.append(link)
            else:
                ends.setdefault(self.port_netns[end], []).append((end, link))
        procs = []
        for netns, mine in ends.items():
            batch = self.workdir / f"unlink-{netns or 'root'}.batch"
            try:
                batch.write_text("".join(f"link del dev {name}\n" for name, _ in mine))
                procs.append(subprocess.Popen(
                    ["ip", *(["-n", netns] if netns else []), "-force", "-batch", str(batch)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            except OSError:
                rest += [link for _, link in mine]  # Mininet deletes them
        net.links = rest
        return procs

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
        return servers(self.graph)

    def cli(self) -> None:
        """Open Mininet's interactive CLI on the running network."""
        from mininet.cli import CLI

        CLI(self.net)

    def calibrate(self, seconds: float = 3.0) -> dict:
        """Single-flow probe between the first two servers over their base (shortest) path:
        configured bottleneck rate, measured goodput and their ratio, and the flow's TCP
        round trip and retransmission timeout at its end (``failover_s``: how long a flow
        whose packets a failing link dropped waits before it sends again)."""
        src, dst = self.servers[0], self.servers[1]
        path = nx.shortest_path(self.graph, src, dst)
        configured = min(self.graph.edges[a, b]["bw_mbps"] for a, b in zip(path, path[1:]))
        flow = probes.measure_flow(self, src, dst, seconds)
        measured = flow["mbps"]
        return {"src": src, "dst": dst, "path": path, "seconds": seconds,
                "configured_mbps": configured, "measured_mbps": measured,
                "goodput_ratio": measured / configured, "srtt_s": flow["srtt_s"],
                "failover_s": flow["rto_s"]}

    def host(self, name: str):
        """The Mininet host of server ``name``."""
        if self.net is None:
            raise EmulationError("the network is not running")
        return self.net.get(name)

    @property
    def frame_bytes(self) -> int:
        """A full frame on this network's links: its MTU and the Ethernet header."""
        return self.mtu + ETHERNET_HEADER_BYTES

    def ip(self, name: str) -> str:
        """IPv4 address of server ``name``."""
        return self.topology.ip(name)

    def run(self, schedule: Schedule, workdir: Path | None = None, *, seed: int = 0,
            timeout_s: float = 120.0, say: Callable[[str], None] = lambda _: None
            ) -> Emulated:
        """Run ``schedule`` under the graph's network conditions and return what it
        measured (a ``simulator.Result`` with ``source="emulation"``) and proved
        (``emulation.backend.run_schedule``); WorkerError when a worker fails."""
        where = workdir or self.workdir / "workers" / (schedule.algo or "schedule")
        return run_schedule(self, schedule, Path(where), seed=seed, timeout_s=timeout_s,
                            say=say)

    def set_link(self, a: str, b: str, up: bool) -> None:
        """Bring graph link a-b down or up (both interfaces), as a cable pulled or plugged;
        the datapaths report the port status to the controller."""
        if not self.graph.has_edge(a, b):
            raise ValueError(f"{a}-{b} is not a link")
        status = "up" if up else "down"
        for link in self.net.linksBetween(self.net.get(mininet_name(self.topology, a)),
                                          self.net.get(mininet_name(self.topology, b))):
            for intf in (link.intf1, link.intf2):
                netns = self.port_netns.get(intf.name)
                if netns:
                    subprocess.run(["ip", "-n", netns, "link", "set", "dev", intf.name, status],
                                   capture_output=True, timeout=10)
                else:
                    intf.ifconfig(status)

    def counter_files(self) -> tuple[Path, ...]:
        """The port counters of the extra instances' namespaces (``/proc/PID/net/dev`` of
        their ovs-vswitchd), besides the root namespace's ``/proc/net/dev``."""
        pids = [i.pid("ovs-vswitchd") for i in self.instances]
        if None in pids:
            raise EmulationError("an Open vSwitch instance has no ovs-vswitchd pidfile")
        return tuple(Path(f"/proc/{pid}/net/dev") for pid in pids)

    def start_background(self, flows: list[tuple[dict, int]]) -> None:
        """Start one iperf3 flow per (``{"src", "dst", "mbps"}``, TCP port), paced at its
        rate, running until stop_background or stop()."""
        for flow, port in flows:
            self._background.append(self.popen(
                flow["dst"], ["iperf3", "-s", "-p", str(port)], stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL))
        time.sleep(0.5)  # the servers listen
        for flow, port in flows:
            self._background.append(self.popen(
                flow["src"], ["iperf3", "-c", self.ip(flow["dst"]), "-p", str(port), "-b",
                              f"{flow['mbps']:g}M", "-t", "86400", "-i", "0"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def stop_background(self) -> None:
        """End the background flows (by PID)."""
        for proc in self._background:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self._background.clear()

    def popen(self, name: str, *args, **kwargs):
        """Start a process inside host ``name``; stop() kills it if it still runs."""
        proc = self.host(name).popen(*args, **kwargs)
        self._procs.append(proc)
        return proc

    def spawn_worker(self, server: str, argv: list[str]) -> subprocess.Popen:
        """Start a socket worker (``argv``) inside ``server``, its stdin and stdout piped
        and its stderr discarded: the ``spawn`` of ``traffic.runner.run_workers``."""
        return self.popen(server, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL)

class SyncedClient(ControllerClient):
    """The controller's client, whose ``route_stats`` first waits for every Open vSwitch
    instance to end a revalidation cycle (500 ms apart by default), which pushes the
    datapath flows' counters into the OpenFlow rules: counters read right after a run
    would miss its last bytes. A cycle already running when the wait began may have read
    some counters before the last bytes, so a reader that needs every byte reads again when
    they fall short (``emulation.backend.run_schedule``): that read's cycle began after
    this one ended. ``instances``: the extra ones (``emulation.ovs.Instance``)."""

    def __init__(self, host: str, port: int, instances: list | None = None) -> None:
        super().__init__(host, port)
        self.instances = instances if instances is not None else []

    def route_stats(self) -> dict:
        ovs.revalidate(self.instances)
        return super().route_stats()


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
