"""A star AllReduce: every server reduces its whole buffer into the lowest-ranked server,
which copies the sum back to each. An example of a scheduler plugin for allreduce-testbed
(see its README, "Scheduler plugins"); it uses only the testbed's public API.

>>> from topology import make_graph
>>> from traffic.schedule import validate
>>> schedule = star(make_graph("bcube", n=2, k=1), 4000, "float32")
>>> len(schedule.transfers), schedule.algo
(6, 'star')
>>> validate(schedule, make_graph("bcube", n=2, k=1))
"""

from __future__ import annotations

from topology import paths, servers
from traffic.schedule import DTYPES, Schedule, Transfer


def star(graph, size_bytes: int, dtype: str) -> Schedule:
    """Reduce into rank 0 along each server's first routing path, then copy back."""
    names = servers(graph)
    root, count = names[0], size_bytes // DTYPES[dtype]
    transfers = []
    for v in names[1:]:
        transfers.append(Transfer(len(transfers), v, root, 0, count, "reduce",
                                  tuple(paths(graph, v, root)[0])))
    reduces = tuple(t.id for t in transfers)
    for v in names[1:]:
        transfers.append(Transfer(len(transfers), root, v, 0, count, "copy",
                                  tuple(paths(graph, root, v)[0]), reduces))
    return Schedule(graph.graph["spec"], size_bytes, dtype, tuple(transfers), "star")
