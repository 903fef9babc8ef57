"""The Ryu app: installs base rules on connect, a schedule's routes on request, and serves a
small JSON API on 127.0.0.1. The only module that imports Ryu (os-ken, its maintained fork with
the same app API, would be a change of this one file).

Rules come from ``controller.rules`` (pure); this module only maps datapaths and sends them.
Handlers never block the event loop: HTTP handlers wait for barrier and statistics replies on
green events that the OpenFlow handlers set.

API (every reply JSON; errors ``{"error": message}``):

- ``GET /health``: ``{connected, expected, ready, missing, routes}``; ready once every datapath
  of the topology file is connected and its base rules are confirmed by a barrier.
- ``GET /routes``: the installed schedule routes.
- ``PUT /routes``: body ``{"routes": [{src, dst, path, tcp_port[, transfer_ids]}, ...]}`` or a
  whole Schedule document (its ``traffic.schedule.routes``). Validated first (400 and nothing
  changes when invalid, 503 when a datapath is not connected); then every datapath deletes the
  previous schedule routes (by cookie mask) and every group (only schedule routes use
  groups), adds the new fast-failover groups, then the flows (``rules.failover_rules``), and
  answers a barrier. Reply ``{"installed": [...], "rules": n, "groups": n,
  "unprotected": [{route, reverse, hop, reason}, ...]}``.
- ``DELETE /routes``: removes all schedule routes; ``{"deleted": n}``.
- ``GET /routes/stats``: per route, packet and byte counters per datapath for its forward and
  reverse rules and its backup rules, and the path it was re-routed to if any
  (``controller.proof.stats_reply``), read by flow statistics filtered by cookie.

Link failure: fast-failover groups repair locally protected hops in the switch. When a port
goes down (EventOFPPortStatus), the routes with an unprotected hop over that link are moved to
``topology.backup_path`` (``rules.reroute``) and re-installed with FAILOVER_BIT cookies; they
stay there when the link comes back.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from dataclasses import asdict

from ryu import cfg
from ryu.app.wsgi import ControllerBase, Response, WSGIApplication, route
from ryu.app.wsgi import start_service as start_wsgi
from ryu.base import app_manager
from ryu.controller import ofp_event
from ryu.controller.handler import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    set_ev_cls,
)
from ryu.lib import hub
from ryu.ofproto import ofproto_v1_3

from controller import rules
from controller.proof import stats_reply
from controller.topofile import Topology
from traffic.schedule import Schedule, ScheduleError, routes

#: Environment variable naming the topology file (set by ``run``; also lets plain
#: ``ryu-manager controller.app`` work).
TOPOLOGY_ENV = "ARTB_TOPOLOGY"
REPLY_TIMEOUT_S = 10.0
LOG = logging.getLogger("controller")


class _Waiter:
    """Replies to one request (by xid), and a green event set when the last one arrived."""

    def __init__(self) -> None:
        self.event = hub.Event()
        self.bodies: list = []


class TestbedController(app_manager.RyuApp):
    """Proactive, loop-free routing for the testbed's topology file."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]
    _CONTEXTS = {"wsgi": WSGIApplication}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.topo = Topology.load(os.environ[TOPOLOGY_ENV])
        self.names = {dp.dpid: dp.name for dp in self.topo.datapaths.values()}
        self.base: dict[int, list[rules.FlowRule]] = {d: [] for d in self.names}
        for rule in rules.base_rules(self.topo):
            self.base[rule.dpid].append(rule)
        self.connected: dict[int, object] = {}
        self.ready: set[int] = set()
        #: The routes as chosen; ``current`` has the paths installed now (``rerouted``: the
        #: indices moved off a failed link), ``installed`` their rules.
        self.routes: list[rules.RouteSpec] = []
        self.current: list[rules.RouteSpec] = []
        self.rerouted: set[int] = set()
        self.installed = rules.RouteRules(())
        self.down: set[frozenset[str]] = set()
        self.waiters: dict[tuple[int, int], _Waiter] = {}
        self.errors: dict[int, list[str]] = {}
        self.lock = hub.Semaphore(1)
        kwargs["wsgi"].register(Api, {"app": self})
        LOG.info("topology %s: %d datapaths, %d hosts", self.topo.graph.graph.get("name"),
                 len(self.names), len(self.topo.hosts))

    # --- OpenFlow -------------------------------------------------------------------------

    def _flow_mod(self, dp, rule: rules.FlowRule):
        ofp, parser = dp.ofproto, dp.ofproto_parser
        actions = [parser.OFPActionOutput(value) if kind == "output"
                   else parser.OFPActionGroup(value) for kind, value in rule.actions]
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)] if actions else []
        return parser.OFPFlowMod(dp, cookie=rule.cookie, table_id=rule.table,
                                 command=ofp.OFPFC_ADD, priority=rule.priority,
                                 match=parser.OFPMatch(**rule.match), instructions=inst)

    def _delete(self, dp, cookie: int = 0, mask: int = 0):
        ofp, parser = dp.ofproto, dp.ofproto_parser
        return parser.OFPFlowMod(dp, cookie=cookie, cookie_mask=mask, table_id=ofp.OFPTT_ALL,
                                 command=ofp.OFPFC_DELETE, out_port=ofp.OFPP_ANY,
                                 out_group=ofp.OFPG_ANY, match=parser.OFPMatch())

    def _group_mod(self, dp, group: rules.GroupRule):
        ofp, parser = dp.ofproto, dp.ofproto_parser
        buckets = [parser.OFPBucket(watch_port=watch, actions=[parser.OFPActionOutput(out)])
                   for watch, out in group.buckets]
        return parser.OFPGroupMod(dp, command=ofp.OFPGC_ADD, type_=ofp.OFPGT_FF,
                                  group_id=group.group_id, buckets=buckets)

    def _delete_group(self, dp, group_id: int | None = None):
        """Delete one group, or every group when ``group_id`` is None."""
        ofp, parser = dp.ofproto, dp.ofproto_parser
        return parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, type_=ofp.OFPGT_FF,
                                  group_id=ofp.OFPG_ALL if group_id is None else group_id)

    def _send_rules(self, dp, built: rules.RouteRules, keep=lambda index: True) -> None:
        """Send the groups of ``built`` on ``dp``, then its flows (of the routes ``keep``
        accepts); an unanswered barrier in between makes the switch add the groups first."""
        for group in built.groups:
            if group.dpid == dp.id and keep(rules.parse_group_id(group.group_id)[0]):
                dp.send_msg(self._group_mod(dp, group))
        dp.send_msg(dp.ofproto_parser.OFPBarrierRequest(dp))
        for rule in built.flows:
            if rule.dpid == dp.id and keep(rules.parse_cookie(rule.cookie)[0]):
                dp.send_msg(self._flow_mod(dp, rule))

    def _request(self, dp, msg) -> _Waiter:
        dp.set_xid(msg)
        waiter = _Waiter()
        self.waiters[(dp.id, msg.xid)] = waiter
        dp.send_msg(msg)
        return waiter

    def _barrier(self, dp) -> _Waiter:
        return self._request(dp, dp.ofproto_parser.OFPBarrierRequest(dp))

    def _wait(self, waiters: dict[int, _Waiter], timeout: float) -> list[int]:
        """Wait (green) for every waiter; the dpids that did not answer in time."""
        deadline = hub.Timeout(timeout)
        late = []
        try:
            for w in waiters.values():
                w.event.wait()
        except hub.Timeout:
            late = [d for d, w in waiters.items() if not w.event.is_set()]
        finally:
            deadline.cancel()
        for key in [k for k, w in self.waiters.items() if w in waiters.values()]:
            del self.waiters[key]
        return late

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _on_features(self, ev):
        dp = ev.msg.datapath
        name = self.names.get(dp.id)
        if name is None:
            LOG.warning("datapath %016x is not in the topology file; ignored", dp.id)
            return
        self.connected[dp.id] = dp
        self.ready.discard(dp.id)
        dp.send_msg(self._delete(dp))
        dp.send_msg(self._delete_group(dp))
        for rule in self.base[dp.id]:
            dp.send_msg(self._flow_mod(dp, rule))
        self._send_rules(dp, self.installed)
        waiter = self._barrier(dp)
        hub.spawn(self._confirm_base, dp, waiter)
        LOG.info("datapath %s (dpid %d) connected: %d base rules sent", name, dp.id,
                 len(self.base[dp.id]))

    def _confirm_base(self, dp, waiter: _Waiter):
        if not self._wait({dp.id: waiter}, REPLY_TIMEOUT_S) and self.connected.get(dp.id) is dp:
            self.ready.add(dp.id)
            LOG.info("datapath %s ready", self.names[dp.id])

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def _on_state(self, ev):
        dp = ev.datapath
        if ev.state == DEAD_DISPATCHER and self.connected.get(dp.id) is dp:
            del self.connected[dp.id]
            self.ready.discard(dp.id)
            LOG.warning("datapath %s disconnected", self.names.get(dp.id, dp.id))

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def _on_barrier(self, ev):
        waiter = self.waiters.get((ev.msg.datapath.id, ev.msg.xid))
        if waiter is not None:
            waiter.event.set()

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def _on_flow_stats(self, ev):
        msg = ev.msg
        waiter = self.waiters.get((msg.datapath.id, msg.xid))
        if waiter is None:
            return
        waiter.bodies.extend(msg.body)
        if not msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE:
            waiter.event.set()

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _on_port_status(self, ev):
        msg = ev.msg
        dp, ofp, desc = msg.datapath, msg.datapath.ofproto, msg.desc
        name = self.names.get(dp.id)
        try:
            peer = self.topo.datapaths[name].neighbour(desc.port_no) if name else name
        except KeyError:
            return
        if peer is None or peer == name:
            return  # not a datapath of ours, or a server's own host port
        down = (msg.reason == ofp.OFPPR_DELETE or desc.state & ofp.OFPPS_LINK_DOWN
                or desc.config & ofp.OFPPC_PORT_DOWN)
        if down:
            hub.spawn(self.link_down, name, peer)
        elif frozenset((name, peer)) in self.down:
            self.down.discard(frozenset((name, peer)))
            LOG.info("link %s-%s up again; re-routed routes stay on their backup paths",
                     name, peer)

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _on_error(self, ev):
        msg = ev.msg
        text = f"type {msg.type} code {msg.code}"
        self.errors.setdefault(msg.datapath.id, []).append(text)
        LOG.error("datapath %s: OpenFlow error %s", self.names.get(msg.datapath.id), text)

    # --- operations behind the API -------------------------------------------------------

    def health(self) -> dict:
        """Connected datapaths vs expected, and whether every base rule set is confirmed."""
        missing = sorted(n for d, n in self.names.items() if d not in self.ready)
        return {"connected": len(self.connected), "expected": len(self.names),
                "ready": not missing, "missing": missing, "routes": len(self.routes)}

    def _not_connected(self) -> str | None:
        missing = sorted(n for d, n in self.names.items() if d not in self.ready)
        return f"datapaths not connected: {', '.join(missing)}" if missing else None

    def _replace(self, specs: list[rules.RouteSpec], built: rules.RouteRules) -> None:
        """Delete every schedule route and group, add ``built``, barrier everywhere;
        RuntimeError when a datapath reports an error or does not answer."""
        errors_before = {d: len(e) for d, e in self.errors.items()}
        waiters = {}
        for dpid, dp in self.connected.items():
            dp.send_msg(self._delete(dp, rules.SCHEDULE_BIT, rules.SCHEDULE_BIT))
            dp.send_msg(self._delete_group(dp))
            dp.send_msg(dp.ofproto_parser.OFPBarrierRequest(dp))
            self._send_rules(dp, built)
            waiters[dpid] = self._barrier(dp)
        self.routes, self.current, self.rerouted, self.installed = specs, specs, set(), built
        self._confirm(waiters, errors_before)

    def _confirm(self, waiters: dict[int, _Waiter], errors_before: dict[int, int]) -> None:
        """Wait for barrier replies; RuntimeError naming the datapaths that did not answer
        or reported an OpenFlow error since ``errors_before``."""
        late = self._wait(waiters, REPLY_TIMEOUT_S)
        if late:
            raise RuntimeError("no barrier reply from " + ", ".join(self.names[d] for d in late))
        failed = [self.names[d] for d, e in self.errors.items() if len(e) > errors_before.get(d, 0)]
        if failed:
            raise RuntimeError("OpenFlow errors from " + ", ".join(failed))

    def put_routes(self, specs: list[rules.RouteSpec]) -> dict:
        """Install ``specs`` (already validated) in place of the current schedule routes."""
        with self.lock:
            built = rules.failover_rules(self.topo, specs, down=[tuple(e) for e in self.down])
            self._replace(specs, built)
        LOG.info("installed %d routes (%d rules, %d failover groups, %d hops unprotected)",
                 len(specs), len(built.flows), len(built.groups), len(built.unprotected))
        return {"installed": [
            {**asdict(s), "cookie": rules.route_cookie(i),
             "datapaths": rules.route_datapaths(self.topo, s)} for i, s in enumerate(specs)],
            "rules": len(built.flows), "groups": len(built.groups),
            "unprotected": [asdict(u) for u in built.unprotected]}

    def delete_routes(self) -> dict:
        """Remove every schedule route."""
        with self.lock:
            count = len(self.routes)
            self._replace([], rules.RouteRules(()))
        return {"deleted": count}

    def link_down(self, a: str, b: str) -> None:
        """Link a-b is down: re-install, along ``backup_path``, the routes with a hop over it
        that no fast-failover group protects (green thread; logs instead of raising)."""
        link = frozenset((a, b))
        with self.lock:
            if link in self.down:
                return  # the other end's port status
            earlier = [tuple(e) for e in self.down]
            self.down.add(link)
            moved = rules.reroute(self.topo, self.current, self.installed.unprotected, a, b,
                                  earlier)
            hit = {u.route for u in self.installed.unprotected if set(u.hop) == link}
            LOG.warning("link %s-%s down: %d routes re-routed, %d without a way around", a, b,
                        len(moved), len(hit - set(moved)))
            if not moved:
                return
            old = self.installed
            current = [moved.get(i, s) for i, s in enumerate(self.current)]
            built = rules.failover_rules(self.topo, current, self.rerouted | set(moved),
                                         [tuple(e) for e in self.down])
            errors_before = {d: len(e) for d, e in self.errors.items()}
            waiters = {}
            for dpid, dp in self.connected.items():
                for index in moved:
                    dp.send_msg(self._delete(dp, rules.route_cookie(index),
                                             rules.SCHEDULE_BIT | rules.INDEX_MASK))
                for group in old.groups:
                    if group.dpid == dpid and rules.parse_group_id(group.group_id)[0] in moved:
                        dp.send_msg(self._delete_group(dp, group.group_id))
                dp.send_msg(dp.ofproto_parser.OFPBarrierRequest(dp))
                self._send_rules(dp, built, lambda index: index in moved)
                waiters[dpid] = self._barrier(dp)
            self.current, self.installed = current, built
            self.rerouted |= set(moved)
            try:
                self._confirm(waiters, errors_before)
            except RuntimeError as exc:
                LOG.error("re-routing around %s-%s: %s", a, b, exc)

    def route_stats(self) -> dict:
        """Counters of every schedule-route rule, per route and datapath."""
        waiters = {}
        for dpid, dp in self.connected.items():
            ofp, parser = dp.ofproto, dp.ofproto_parser
            req = parser.OFPFlowStatsRequest(dp, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY,
                                             rules.SCHEDULE_BIT, rules.SCHEDULE_BIT,
                                             parser.OFPMatch())
            waiters[dpid] = self._request(dp, req)
        late = set(self._wait(waiters, REPLY_TIMEOUT_S))
        counters = [(self.names[d], s.cookie, s.packet_count, s.byte_count)
                    for d, w in waiters.items() if d not in late for s in w.bodies]
        missing = [n for d, n in self.names.items() if d in late or d not in waiters]
        return stats_reply(self.routes, counters, missing,
                           {i: self.current[i].path for i in self.rerouted})


def _json(doc: dict, status: int = 200) -> Response:
    return Response(status=status, content_type="application/json", charset="utf-8",
                    body=json.dumps(doc).encode())


class Api(ControllerBase):
    """The JSON API; every handler is quick or waits green."""

    def __init__(self, req, link, data, **config):
        super().__init__(req, link, data, **config)
        self.app: TestbedController = data["app"]

    @route("health", "/health", methods=["GET"])
    def health(self, req, **_):
        return _json(self.app.health())

    @route("routes", "/routes", methods=["GET"])
    def get_routes(self, req, **_):
        return _json({"routes": [asdict(s) for s in self.app.routes]})

    @route("routes", "/routes", methods=["PUT"])
    def put_routes(self, req, **_):
        try:
            doc = json.loads(req.body or b"null")
            if isinstance(doc, dict) and "transfers" in doc:
                found = routes(Schedule.from_json(req.body.decode()))
            elif isinstance(doc, dict) and set(doc) == {"routes"} and isinstance(
                    doc["routes"], list):
                found = doc["routes"]
            else:
                raise ValueError('body must be {"routes": [...]} or a Schedule document')
            specs = rules.validate_routes(self.app.topo, found)
        except (ValueError, ScheduleError, UnicodeDecodeError) as exc:
            return _json({"error": str(exc)}, 400)
        problem = self.app._not_connected()
        if problem:
            return _json({"error": problem}, 503)
        try:
            return _json(self.app.put_routes(specs))
        except RuntimeError as exc:
            return _json({"error": str(exc)}, 500)

    @route("routes", "/routes", methods=["DELETE"])
    def delete_routes(self, req, **_):
        try:
            return _json(self.app.delete_routes())
        except RuntimeError as exc:
            return _json({"error": str(exc)}, 500)

    @route("stats", "/routes/stats", methods=["GET"])
    def stats(self, req, **_):
        return _json(self.app.route_stats())


_STOP = {"requested": False}


def _stop(signum, frame):
    # Only set a flag: raising here would hit whichever green thread happens to run.
    _STOP["requested"] = True


def run(topology: str, of_port: int, api_host: str, api_port: int,
        log_file: str | None = None) -> int:
    """Run the controller in this process until SIGTERM or SIGINT; returns the exit code."""
    hub.patch(thread=True)
    logging.basicConfig(filename=log_file, level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    Topology.load(topology)
    os.environ[TOPOLOGY_ENV] = os.path.abspath(topology)
    cfg.CONF(args=["--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port", str(of_port),
                   "--wsapi-host", api_host, "--wsapi-port", str(api_port)],
             project="ryu", version="ryu 4.34")
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    manager = app_manager.AppManager.get_instance()
    manager.load_apps([__name__])
    services = manager.instantiate_apps(**manager.create_contexts())
    web = start_wsgi(manager)
    services.append(hub.spawn(web))
    LOG.info("listening: OpenFlow 127.0.0.1:%d, API %s:%d", of_port, api_host, api_port)
    try:
        while not _STOP["requested"] and not all(t.dead for t in services):
            hub.sleep(0.2)
        LOG.info("stopping")
    finally:
        manager.close()
    return 0
