"""Max-min fair rates of flows over directed links (progressive filling), in two kernels: a
vectorised one for many flows and a plain-Python one for the few an event usually touches."""

from __future__ import annotations

import numpy as np

#: Links whose fair share is within this (relative) of the bottleneck saturate together.
LEVEL_RTOL = 1e-9
#: Events closer than this (relative) are simulated as simultaneous (every engine).
BATCH_RTOL = 1e-12


def max_min_rates(links: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Max-min fair rates of flows (progressive filling, many bottlenecks per round).

    ``links`` is (flows x P) directed-link ids, padded with the last id of ``cap``, a dummy
    of infinite capacity; every flow must cross at least one real link. A link's fair share
    is its spare capacity over its unfrozen flows. Each round freezes, at that share, the
    flows of every link whose share is no larger than the shares of all other links its
    flows cross: freezing a flow at a rate no above a link's share never lowers that
    share, so such a link stays the bottleneck of its flows (the plain one-bottleneck-per-
    round algorithm reaches the same rates in more rounds).
    """
    m, width = links.shape
    nl = cap.shape[0]
    rate = np.empty(m)
    remaining = cap.astype(float)
    counts = np.bincount(links.ravel(), minlength=nl).astype(float)
    counts[nl - 1] = 0.0
    open_rows = np.arange(m)
    sub = links
    inf = np.full(nl, np.inf)
    while True:
        share = np.divide(remaining, counts, out=inf.copy(), where=counts > 0.5)
        on = share[sub]
        fmin = on.min(axis=1)
        at_min = on <= fmin[:, None] * (1.0 + LEVEL_RTOL)
        # A link is no bottleneck yet if one of its flows has a tighter link elsewhere.
        blocked = np.zeros(nl, dtype=bool)
        blocked[sub[~at_min]] = True
        hit = (at_min & ~blocked[sub]).any(axis=1)
        if hit.all():
            rate[open_rows] = fmin
            return rate
        rows = open_rows[hit]
        level = fmin[hit]
        rate[rows] = level
        frozen = sub[hit].ravel()
        counts -= np.bincount(frozen, minlength=nl)
        remaining -= np.bincount(frozen, weights=np.repeat(level, width), minlength=nl)
        counts[nl - 1] = 0.0
        np.maximum(remaining, 0.0, out=remaining)
        open_rows = open_rows[~hit]
        sub = sub[~hit]




def max_min_small(paths: list[tuple[int, ...]], cap: list[float]) -> list[float]:
    """Max-min fair rates of a few flows, each a tuple of directed-link ids into ``cap``
    (every flow crosses at least one link): each round raises the unfrozen flows to the
    smallest fair share of any link and freezes the flows crossing the links at it."""
    count: dict[int, int] = {}
    spare: dict[int, float] = {}
    for links in paths:
        for link in links:
            count[link] = count.get(link, 0) + 1
            spare[link] = cap[link]
    rate = [0.0] * len(paths)
    unfrozen = set(range(len(paths)))
    while unfrozen:
        level = min(spare[link] / n for link, n in count.items() if n)
        limit = level * (1.0 + LEVEL_RTOL)
        tight = {link for link, n in count.items() if n and spare[link] / n <= limit}
        for f in [f for f in unfrozen if not tight.isdisjoint(paths[f])]:
            rate[f] = level
            unfrozen.discard(f)
            for link in paths[f]:
                count[link] -= 1
                spare[link] -= level
    return rate
