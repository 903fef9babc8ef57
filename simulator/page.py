"""The run report: one self-contained HTML page drawn from a run's results.json.

The emulation (``python -m emulation.run``, ``python -m emulation.report DIR``) and the
simulator (``python -m simulator ... --report F``) both write the results document described
in docs/design.md ("The results document") and turn it into the page here. The page shows the
run's table, the makespans, the topology with every link coloured by its load during the
scheduler and source chosen in the page's selectors, the busiest links over time (emulated next
to simulated), each server's transfers in flight over time, and the calibration, versions and
command line. Every figure is computed here, in Python, from the document alone; the browser
only draws (Vega-Lite through Altair, with its JavaScript inlined: the page needs no network).
Altair and vl-convert are imported only when a page is built.
"""

from __future__ import annotations

import contextlib
import functools
import html
import json
import os
from pathlib import Path
from typing import Any

import networkx as nx

from simulator.usage import LinkLoad
from traffic.schedule import Schedule

#: Version of the results document this module reads and helps to write.
SCHEMA = 2
#: Directed links shown over time, per scheduler: the busiest ones.
BUSIEST = 12
#: Time bins of the per-server timelines.
SERVER_BINS = 40
#: Top-level fields every results document has, with their JSON types.
REQUIRED = {"schema": int, "source": str, "name": str, "topology": dict, "bw_mbps": float,
            "size_bytes": int, "dtype": str, "lower_bound_s": float, "optimum_s": float,
            "network": dict, "command": str, "versions": dict, "schedulers": list}
#: Fields of every scheduler row.
ROW = {"scheduler": str, "transfers": int, "simulated_s": float, "simulated": dict,
       "simulated_links": dict, "transfer_list": list}
SOURCES = ("emulated", "simulated")
#: The project's per-user cache folder: the page's script bundle here, the emulation's
#: per-machine budgets (``emulation.budget``).
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "allreduce-testbed"


class ReportError(ValueError):
    """A results document the page cannot be drawn from; the message names the field."""


def network(graph: nx.Graph) -> dict[str, Any]:
    """The ``network`` field: every node with its role and drawing position
    (``topology.draw.positions``), every link with its rate in Mbit/s."""
    from topology.draw import positions

    pos = positions(graph)
    rate = float(graph.graph.get("bw_mbps", 0.0))
    return {"nodes": [{"name": v, "role": graph.nodes[v]["role"], "x": pos[v][0],
                       "y": pos[v][1]} for v in graph.nodes],
            "links": [{"a": a, "b": b, "bw_mbps": float(d.get("bw_mbps", rate))}
                      for a, b, d in graph.edges(data=True)]}


def conditions(graph: nx.Graph) -> dict[str, Any]:
    """The ``conditions`` field: the graph's changes (slow or removed links), background
    flows and link failures (``topology.links``)."""
    from topology.links import background_flows, link_failures

    return {"changes": graph.graph.get("degraded", []),
            "background_flows": background_flows(graph), "link_failures": link_failures(graph)}


def transfer_list(schedule: Schedule) -> list[list[Any]]:
    """The ``transfer_list`` field of a row: [id, source server, destination server,
    bytes] per transfer."""
    return [[t.id, t.src, t.dst, t.size_bytes(schedule.dtype)] for t in schedule.transfers]


def versions(*modules: str) -> dict[str, str]:
    """Versions of Python, networkx, numpy and the importable ``modules``."""
    import platform

    out = {"python": platform.python_version()}
    for name in ("networkx", "numpy", *modules):
        try:
            module = __import__(name, fromlist=["x"])
        except ImportError:
            continue
        out[name.split(".")[0]] = str(getattr(module, "__version__",
                                              getattr(module, "VERSION", "?")))
    return out


def check(doc: Any) -> None:
    """ReportError naming the first field of ``doc`` that does not follow the schema."""
    if not isinstance(doc, dict):
        raise ReportError("results: the document is not a JSON object")
    for key, kind in REQUIRED.items():
        _field(doc, key, kind, "results")
    if doc["schema"] != SCHEMA:
        raise ReportError(f"results.schema is {doc['schema']}, this report reads {SCHEMA} "
                          "(re-run the emulation or simulation to write a new one)")
    if doc["source"] not in ("emulation", "simulator"):
        raise ReportError(f"results.source must be emulation or simulator, got "
                          f"{doc['source']!r}")
    for key in ("nodes", "links"):
        _field(doc["network"], key, list, "results.network")
    names = set()
    for i, node in enumerate(doc["network"]["nodes"]):
        where = f"results.network.nodes[{i}]"
        for key, kind in (("name", str), ("role", str), ("x", float), ("y", float)):
            _field(node, key, kind, where)
        names.add(node["name"])
    for i, link in enumerate(doc["network"]["links"]):
        where = f"results.network.links[{i}]"
        for key, kind in (("a", str), ("b", str), ("bw_mbps", float)):
            _field(link, key, kind, where)
        for end in (link["a"], link["b"]):
            if end not in names:
                raise ReportError(f"{where}: {end!r} is not a node")
    if not doc["schedulers"]:
        raise ReportError("results.schedulers is empty")
    for i, row in enumerate(doc["schedulers"]):
        where = f"results.schedulers[{i}]"
        for key, kind in ROW.items():
            _field(row, key, kind, where)
        for key in ("simulated_links", "emulated_links"):
            if row.get(key) is not None:
                try:
                    LinkLoad.from_dict(row[key])
                except ValueError as exc:
                    raise ReportError(f"{where}.{key}: {exc}") from None
        for key in ("simulated", "emulated"):
            if row.get(key) is not None:
                for part in ("start_s", "finish_s"):
                    _field(row[key], part, dict, f"{where}.{key}")


def _field(doc: dict, key: str, kind: type, where: str) -> None:
    if not isinstance(doc, dict) or key not in doc:
        raise ReportError(f"{where} has no field {key!r}")
    value = doc[key]
    ok = isinstance(value, int | float) and not isinstance(value, bool) if kind is float \
        else isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok:
        raise ReportError(f"{where}.{key} must be {kind.__name__}, got {value!r}")


def read(path: Path) -> dict[str, Any]:
    """The results document in ``path`` (a results.json or the directory holding one),
    checked; ReportError naming the file or field otherwise."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"{path}: cannot read it ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: not JSON ({exc})") from None
    check(doc)
    return doc


# Tables the charts draw, each a list of flat records. -----------------------------------

def _loads(row: dict) -> dict[str, LinkLoad]:
    out = {}
    for source in SOURCES:
        doc = row.get(f"{source}_links")
        if doc is not None:
            out[source] = LinkLoad.from_dict(doc)
    return out


def _end_s(row: dict, source: str) -> float:
    result = row.get(source)
    return max(result["finish_s"].values(), default=0.0) if result else 0.0


def link_records(doc: dict) -> list[dict[str, Any]]:
    """One record per (scheduler, source, link): its ends' positions and its average load in
    each direction over the run, in percent of its rate."""
    pos = {n["name"]: (n["x"], n["y"]) for n in doc["network"]["nodes"]}
    out = []
    for row in doc["schedulers"]:
        for source, load in _loads(row).items():
            end = _end_s(row, source) or load.edges_s[-1]
            for link in doc["network"]["links"]:
                a, b, rate = link["a"], link["b"], link["bw_mbps"]
                ab = 100 * _mean(load, a, b, end) / rate
                ba = 100 * _mean(load, b, a, end) / rate
                out.append({"scheduler": row["scheduler"], "source": source,
                            "link": f"{a}-{b}", "x": pos[a][0], "y": pos[a][1],
                            "x2": pos[b][0], "y2": pos[b][1], "util": round(max(ab, ba), 1),
                            "ab": f"{a}→{b} {ab:.0f} %", "ba": f"{b}→{a} {ba:.0f} %",
                            "mbps": rate})
    return out


def _mean(load: LinkLoad, a: str, b: str, end: float) -> float:
    return load.mean_mbps(a, b, end) if (a, b) in load.mbps else 0.0


def busiest_records(doc: dict, count: int = BUSIEST) -> list[dict[str, Any]]:
    """Per scheduler, its ``count`` busiest directed links (by their average load over the
    run, the higher of the two sources), each source's load over time in percent of the
    link's rate: one record per (scheduler, source, link) with the bins as lists."""
    rates = {}
    for link in doc["network"]["links"]:
        rates[(link["a"], link["b"])] = rates[(link["b"], link["a"])] = link["bw_mbps"]
    out = []
    for row in doc["schedulers"]:
        loads = _loads(row)
        means = {d: max(_mean(load, *d, _end_s(row, s) or load.edges_s[-1]) / rates[d]
                        for s, load in loads.items()) for d in rates}
        top = sorted(means, key=lambda d: (-means[d], d))[:count]
        for source, load in loads.items():
            edges = load.edges_s
            for rank, d in enumerate(top):
                values = load.mbps.get(d, (0.0,) * (len(edges) - 1))
                out.append({"scheduler": row["scheduler"], "source": source, "rank": rank,
                            "link": f"{d[0]}→{d[1]}",
                            "t0": [round(t, 4) for t in edges[:-1]],
                            "t1": [round(t, 4) for t in edges[1:]],
                            "u": [round(100 * v / rates[d], 1) for v in values]})
    return out


def server_records(doc: dict, bins: int = SERVER_BINS) -> list[dict[str, Any]]:
    """Per scheduler, source, server and direction (sends, receives): the average number of
    its transfers in flight (started, not yet arrived) in each of ``bins`` equal bins from
    0 to the later of the two makespans; the bins as lists."""
    out = []
    servers = [n["name"] for n in doc["network"]["nodes"] if n["role"] == "server"]
    for row in doc["schedulers"]:
        sources = [s for s in SOURCES if row.get(s)]
        end = max(_end_s(row, s) for s in sources) or 1.0
        edges = [end * i / bins for i in range(bins + 1)]
        for source in sources:
            start, finish = row[source]["start_s"], row[source]["finish_s"]
            busy = {(v, d): [0.0] * bins for v in servers for d in ("sends", "receives")}
            for tid, src, dst, _ in row["transfer_list"]:
                lo, hi = start.get(str(tid)), finish.get(str(tid))
                if lo is None or hi is None or hi <= lo:
                    continue
                for v, d in ((src, "sends"), (dst, "receives")):
                    cells = busy[(v, d)]
                    for i in range(bins):
                        overlap = min(hi, edges[i + 1]) - max(lo, edges[i])
                        if overlap > 0:
                            cells[i] += overlap / (edges[i + 1] - edges[i])
            for (v, d), cells in busy.items():
                out.append({"scheduler": row["scheduler"], "source": source, "server": v,
                            "direction": d, "t0": [round(t, 4) for t in edges[:-1]],
                            "t1": [round(t, 4) for t in edges[1:]],
                            "n": [round(c, 2) for c in cells]})
    return out


def makespan_records(doc: dict) -> list[dict[str, Any]]:
    """One record per (scheduler, source) with its completion time in seconds."""
    out = []
    for row in doc["schedulers"]:
        for source, key in (("simulated", "simulated_s"), ("emulated", "emulated_s")):
            if row.get(key) is not None:
                out.append({"scheduler": row["scheduler"], "source": source,
                            "seconds": round(row[key], 4)})
    return out


# The page. ------------------------------------------------------------------------------

def tables(doc: dict) -> dict[str, list[dict[str, Any]]]:
    """The charts' data, each table computed once, by the name the charts use."""
    return {"makespans": makespan_records(doc),
            "bounds": [{"what": "lower bound", "seconds": doc["lower_bound_s"]},
                       {"what": "packing optimum", "seconds": doc["optimum_s"]}],
            "links": link_records(doc), "nodes": doc["network"]["nodes"],
            "busiest": busiest_records(doc), "servers": server_records(doc)}


def spec(doc: dict) -> dict[str, Any]:
    """The page's Vega-Lite specification: ``chart(doc)`` with the ``tables(doc)`` as its
    named datasets, added after Altair has built the spec (Altair would otherwise walk and
    copy every record of every table)."""
    out = chart(doc).to_dict()
    out.setdefault("datasets", {}).update(tables(doc))
    return out


def chart(doc: dict):
    """The page's charts as one Altair chart, with the scheduler and source selectors; its
    data are the named datasets of ``tables`` (``spec`` adds them)."""
    import altair as alt

    names = [row["scheduler"] for row in doc["schedulers"]]
    sources = [s for s in SOURCES if any(row.get(f"{s}_links") for row in doc["schedulers"])]
    scheduler = alt.param(name="scheduler", value=names[0],
                          bind=alt.binding_select(options=names, name="scheduler ",
                                                  element="#controls"))
    source = alt.param(name="source", value=sources[0],
                       bind=alt.binding_radio(options=sources, name="map: link load ",
                                              element="#controls"))
    heat = alt.Scale(scheme="yelloworangered", domain=[0, 100], clamp=True)
    colours = alt.Scale(domain=list(SOURCES), range=["#f58518", "#4c78a8"])
    width = 900

    bars = alt.Chart(alt.Data(name="makespans")).mark_bar().encode(
        x=alt.X("scheduler:N", sort=names, title=None),
        xOffset=alt.XOffset("source:N", sort=list(SOURCES)),
        y=alt.Y("seconds:Q", title="AllReduce completion (s)"),
        color=alt.Color("source:N", scale=colours, title=None),
        opacity=alt.condition(alt.datum.scheduler == scheduler, alt.value(1.0),
                              alt.value(0.35)),
        tooltip=["scheduler:N", "source:N", "seconds:Q"],
    ).properties(width=width, height=180, title="Completion time", name="makespans")
    bound = alt.Chart(alt.Data(name="bounds")).mark_rule(
        strokeDash=[4, 3], color="#555").encode(y="seconds:Q", tooltip=["what:N", "seconds:Q"])

    pos = alt.Scale(domain=[-0.04, 1.04])
    links = alt.Chart(alt.Data(name="links")).transform_filter(
        (alt.datum.scheduler == scheduler) & (alt.datum.source == source)).mark_rule(
        strokeWidth=3).encode(
        x=alt.X("x:Q", scale=pos, axis=None), y=alt.Y("y:Q", scale=pos, axis=None),
        x2="x2:Q", y2="y2:Q",
        color=alt.Color("util:Q", scale=heat, title="link load %"),
        tooltip=[alt.Tooltip("link:N"), alt.Tooltip("mbps:Q", title="Mbit/s"),
                 alt.Tooltip("ab:N", title="load"), alt.Tooltip("ba:N", title="load")]
    ).properties(name="map_links")
    nodes = doc["network"]["nodes"]
    dots = alt.Chart(alt.Data(name="nodes")).mark_point(filled=True, size=90,
                                                         opacity=1).encode(
        x=alt.X("x:Q", scale=pos), y=alt.Y("y:Q", scale=pos),
        shape=alt.Shape("role:N", scale=alt.Scale(domain=["server", "switch"],
                                                  range=["circle", "square"])),
        fill=alt.Fill("role:N", scale=alt.Scale(domain=["server", "switch"],
                                                range=["#4c78a8", "#54a24b"])),
        tooltip=["name:N", "role:N"]).properties(name="map_nodes")
    layers = [links, dots]
    if sum(1 for n in nodes if n["role"] == "server") <= 64:
        layers.append(alt.Chart(alt.Data(name="nodes")).mark_text(
            dy=-11, fontSize=9, color="#333").encode(x=alt.X("x:Q", scale=pos),
                                                      y=alt.Y("y:Q", scale=pos), text="name:N"))
    topo = alt.layer(*layers).properties(
        width=width, height=460,
        title=alt.Title("Link load during the chosen scheduler's run",
                        subtitle="average over the run, in % of the link's rate, the busier "
                                 "direction; hover a link for both"))

    time_x = alt.X("t0:Q", title="seconds after the start", scale=alt.Scale(nice=False))
    busy = alt.Chart(alt.Data(name="busiest")).transform_filter(
        alt.datum.scheduler == scheduler).transform_flatten(["t0", "t1", "u"]).mark_rect(
    ).encode(
        x=time_x, x2="t1:Q",
        y=alt.Y("link:N", sort=alt.EncodingSortField("rank", op="min"), title=None),
        color=alt.Color("u:Q", scale=heat, title="link load %"),
        column=alt.Column("source:N", sort=list(SOURCES), title=None),
        tooltip=["link:N", "source:N", alt.Tooltip("t0:Q", title="from s"),
                 alt.Tooltip("t1:Q", title="to s"), alt.Tooltip("u:Q", title="load %")],
    ).properties(width=width // len(sources) - 60, height=16 * BUSIEST, name="busiest",
                 title=f"The {BUSIEST} busiest directed links over time")

    def servers(direction: str):
        return alt.Chart(alt.Data(name="servers")).transform_filter(
            (alt.datum.scheduler == scheduler) & (alt.datum.direction == direction)
        ).transform_flatten(["t0", "t1", "n"]).mark_rect().encode(
            x=time_x, x2="t1:Q", y=alt.Y("server:N", title=None, sort=None),
            color=alt.Color("n:Q", scale=alt.Scale(scheme="blues"),
                            title="transfers in flight"),
            column=alt.Column("source:N", sort=list(SOURCES), title=None),
            tooltip=["server:N", "source:N", alt.Tooltip("t0:Q", title="from s"),
                     alt.Tooltip("t1:Q", title="to s"),
                     alt.Tooltip("n:Q", title="in flight")],
        ).properties(width=width // len(sources) - 60, name=f"server_{direction}", height=12 * len(
            [n for n in nodes if n["role"] == "server"]),
            title=f"What each server {direction[:-1]}s over time (transfers in flight)")

    return alt.vconcat(alt.layer(bars, bound), topo, busy, servers("sends"),
                       servers("receives")).add_params(scheduler, source).resolve_scale(
        color="independent")


def _table(doc: dict) -> str:
    marks = doc.get("table", {})
    marked = set(marks.get("marked", []))
    head = ("<tr><th>scheduler</th><th>transfers</th><th>simulated s</th><th>emulated s</th>"
            "<th>error %</th><th>raw err %</th><th>verified</th></tr>")
    body = []
    for row in doc["schedulers"]:
        emu = row.get("emulated_s")
        err = row.get("error_pct")
        raw = row.get("error_raw_pct")
        verdict = "yes" if row.get("verified") else (
            f"NO: {row.get('failure', 'not run')}" if doc["source"] == "emulation"
            else "simulated only")
        cells = [row["scheduler"], str(row["transfers"]), f"{row['simulated_s']:.3f}",
                 "-" if emu is None else f"{emu:.3f}",
                 "-" if err is None else f"{err:+.1f}"
                 + ("*" if row["scheduler"] in marked else ""),
                 "-" if raw is None else f"{raw:+.1f}", verdict]
        body.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    notes = "".join(f"<p class='note'>{html.escape(n)}</p>" for n in marks.get("footnotes", []))
    return f"<table id='runs'>{head}{''.join(body)}</table>{notes}"


def _facts(title: str, facts: dict | None) -> str:
    if not facts:
        return ""
    rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_text(v))}</td></tr>"
                   for k, v in facts.items())
    return f"<h2>{html.escape(title)}</h2><table class='facts'>{rows}</table>"


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em auto; max-width: 1100px;
       color: #222; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border-bottom: 1px solid #ddd; padding: 3px 10px; text-align: right; }
th:first-child, td:first-child, .facts th, .facts td { text-align: left; }
.facts td { font-family: ui-monospace, monospace; font-size: 12px; word-break: break-all; }
.note { color: #555; font-size: 12px; margin: 0.2em 0; } .sub { color: #555; }
#controls { position: sticky; top: 0; z-index: 2; background: #fff; padding: 6px 0;
            border-bottom: 1px solid #ddd; }
#controls .vega-bind { display: inline-block; margin-right: 2em; }
pre { background: #f6f6f6; padding: 0.6em; white-space: pre-wrap; word-break: break-all; }
"""


def build(doc: dict) -> str:
    """The report page of the results document ``doc`` (checked first), as one HTML
    string with its JavaScript and data inlined."""
    check(doc)
    vega = spec(doc)
    bundle = _bundle()
    what = "emulated and simulated" if doc["source"] == "emulation" else "simulated"
    title = f"{doc['name']}: AllReduce of {doc['size_bytes'] / 1e6:g} MB ({doc['dtype']})"
    summary = (f"{len(doc['schedulers'])} schedulers, {what}; links {doc['bw_mbps']:g} Mbit/s; "
               f"lower bound {doc['lower_bound_s']:.3f} s, packing optimum "
               f"{doc['optimum_s']:.3f} s")
    run = {k: doc[k] for k in ("rate", "datapath", "link_delay_ms", "link_loss_pct",
                               "wall_s", "median_abs_error_pct") if doc.get(k) is not None}
    if doc.get("budget"):
        run["budget_mbps"] = doc["budget"].get("budget_mbps")
        if doc["budget"].get("budget_transfers_per_s") is not None:
            run["budget_transfers_per_s"] = round(doc["budget"]["budget_transfers_per_s"])
    conditions = {k: v for k, v in (doc.get("conditions") or {}).items() if v}
    # "</" inside a string would end the script element early
    data = json.dumps(vega, separators=(",", ":")).replace("</", "<\\/")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{html.escape(title)}</title>
<style>{_STYLE}</style>
<script>{bundle}</script>
</head><body>
<h1>{html.escape(title)}</h1>
<p class="sub">{html.escape(summary)}</p>
<h2>The run</h2>
{_table(doc)}
<h2>Where the network was busy</h2>
<p class="sub">Emulated link load comes from the switches' port counters (bytes on the wire),
simulated load from the simulator's max-min fair rates (payload).</p>
<div id="controls"></div>
<div id="charts"></div>
{_facts("Run", run)}
{_facts("Network conditions", conditions)}
{_facts("Calibration", doc.get("calibration"))}
{_facts("Versions", doc["versions"])}
<h2>Command line</h2>
<pre id="command">{html.escape(doc["command"])}</pre>
<script>
vegaEmbed("#charts", {data}, {{"renderer": "svg", "actions": false}})
  .then(function () {{ document.body.dataset.ready = "1"; }})
  .catch(function (err) {{ console.error(err); }});
</script>
</body></html>
"""


@functools.cache
def _bundle(cache: Path = CACHE) -> str:
    """Vega, Vega-Lite and vega-embed in one script (vl-convert's, offline), made once per
    vl-convert version and kept in ``cache``; without a writable cache, made each time."""
    import vl_convert

    path = cache / f"vega-bundle-{vl_convert.__version__}.js"
    try:
        return path.read_text()
    except (OSError, UnicodeError):
        pass
    bundle = vl_convert.javascript_bundle()
    part = path.with_name(f"{path.name}.{os.getpid()}")
    try:
        cache.mkdir(parents=True, exist_ok=True)
        part.write_text(bundle)
        part.replace(path)  # whole or not at all: another run may read it meanwhile
    except OSError:
        with contextlib.suppress(OSError):
            part.unlink(missing_ok=True)
    return bundle


def write(doc: dict, path: Path) -> Path:
    """Write the report page of ``doc`` to ``path``; returns ``path``."""
    path = Path(path)
    path.write_text(build(doc))
    return path
