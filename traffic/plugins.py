"""Schedulers by name: the built-in baselines, ``drl``, and plugins.

A plugin is a function ``(graph, size_bytes, dtype) -> Schedule`` named either as
``package.module:function`` or by an entry point of the group ``allreduce_testbed.schedulers``
(entry point name -> ``package.module:function``) of an installed distribution. Pure: the
standard library; ``drl`` imports the agent (torch) only when asked for.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from importlib.metadata import entry_points

import networkx as nx

from traffic.collectives import ALGORITHMS, build
from traffic.schedule import Schedule, ScheduleError

#: The entry point group plugins register under.
GROUP = "allreduce_testbed.schedulers"

Scheduler = Callable[[nx.Graph, int, str], Schedule]


def plugin_names() -> list[str]:
    """Names of the schedulers installed distributions register in GROUP."""
    return sorted({ep.name for ep in entry_points(group=GROUP)})


def _load(target: str, name: str) -> Scheduler:
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"scheduler {name!r}: cannot import {module_name!r} ({exc})") from None
    function = module
    for part in attr.split("."):
        function = getattr(function, part, None)
        if function is None:
            raise ValueError(f"scheduler {name!r}: {module_name!r} has no {attr!r}")
    if not callable(function):
        raise ValueError(f"scheduler {name!r}: {target} is not a function")
    return function  # type: ignore[return-value]


def resolve(name: str) -> Scheduler:
    """The function behind a scheduler name: a built-in collective, ``drl``,
    ``module:function`` or an entry point of GROUP. ValueError naming it when there is
    no such scheduler."""
    if name in ALGORITHMS:
        return lambda graph, size_bytes, dtype: build(name, graph, size_bytes, dtype)
    if name == "drl":
        def drl(graph: nx.Graph, size_bytes: int, dtype: str) -> Schedule:
            from agent import schedule_for

            return schedule_for(graph, graph.graph["spec"], size_bytes, seed=0)
        return drl
    if ":" in name:
        module, _, attr = name.partition(":")
        if not module or not attr:
            raise ValueError(f"scheduler {name!r}: expected package.module:function")
        return _load(name, name)
    found = [ep for ep in entry_points(group=GROUP) if ep.name == name]
    if not found:
        known = [*ALGORITHMS, "drl", *plugin_names()]
        raise ValueError(f"unknown scheduler {name!r}; choose from {', '.join(known)}, or "
                         "give package.module:function")
    return _load(found[0].value, name)


def make_schedule(name: str, graph: nx.Graph, size_bytes: int, dtype: str) -> Schedule:
    """Run scheduler ``name`` on ``graph``. A plugin may return a Schedule or its JSON
    document (a dict or a string); anything else is a ValueError naming the plugin. The
    schedule is not validated here (``traffic.schedule.validate`` does that)."""
    out = resolve(name)(graph, size_bytes, dtype)
    if isinstance(out, Schedule):
        return out
    if isinstance(out, dict | str):
        try:
            return Schedule.from_json(out if isinstance(out, str) else json.dumps(out))
        except (ScheduleError, TypeError) as exc:
            raise ValueError(f"scheduler {name!r} returned a malformed schedule: {exc}") \
                from None
    raise ValueError(f"scheduler {name!r} returned {type(out).__name__}, not a Schedule")
