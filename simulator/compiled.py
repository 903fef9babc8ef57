"""The simulator's event loop compiled with numba: the same model and the same rules as the
engines of ``simulator.fluid`` (which stay as the reference and as the fallback where numba
is missing), on flat arrays.

Per event: the flows that stop come off a heap of projected finish times (a version number
retires stale entries); the flows re-solved are those connected to the touched links, through
per-link lists of the active flows, by flows that are new or at least as fast as the smallest
rate of a stopped flow and the smallest equal share of a new flow's links (the rule argued in
``simulator.fluid``), on the capacity the others leave; max-min rates by progressive filling
with several bottlenecks per round (``simulator.maxmin.max_min_rates``); only flows whose rate
changed get a new projection.
"""

from __future__ import annotations

import heapq

import numpy as np
from numba import njit

from simulator.maxmin import BATCH_RTOL, LEVEL_RTOL

#: Flows the search for the touched component visits before it takes every flow at or above
#: the event's level instead.
SEARCH_LIMIT = 1024


@njit(cache=True)
def _arrive(i, when, finish, cptr, cidx, pending, ready_at, ready, startup):
    finish[i] = when
    for j in range(cptr[i], cptr[i + 1]):
        c = cidx[j]
        pending[c] -= 1
        if when > ready_at[c]:
            ready_at[c] = when
        if pending[c] == 0:
            heapq.heappush(ready, (ready_at[c] + startup, c))


@njit(cache=True)
def run_events(bits, lat, lptr, lidx, cap, cptr, cidx, pending0, startup):
    """Simulate; returns (start, finish) per transfer (NaN where a transfer never ran)."""
    n = bits.shape[0]
    nl = cap.shape[0]
    nnz = lidx.shape[0]
    start = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    pending = pending0.copy()
    ready_at = np.zeros(n)
    ready = [(startup, np.int64(0))]
    ready.pop()
    for i in range(n):
        if pending[i] == 0:
            ready.append((startup, np.int64(i)))
    heapq.heapify(ready)
    arrivals = [(0.0, np.int64(0))]
    arrivals.pop()
    projected = [(0.0, np.int64(0), np.int64(0))]
    projected.pop()
    # Per-link doubly linked lists of the active flows' link entries (entry j of lidx).
    owner = np.empty(nnz, dtype=np.int64)
    for f in range(n):
        for j in range(lptr[f], lptr[f + 1]):
            owner[j] = f
    head = np.full(nl, -1, dtype=np.int64)
    nxt = np.full(nnz, -1, dtype=np.int64)
    prv = np.full(nnz, -1, dtype=np.int64)
    rem = np.zeros(n)
    since = np.zeros(n)
    rate = np.zeros(n)
    version = np.zeros(n, dtype=np.int64)
    fresh = np.zeros(n, dtype=np.bool_)
    chosen = np.zeros(n, dtype=np.bool_)
    count = np.zeros(nl, dtype=np.int64)
    used = np.zeros(nl)
    spare = np.zeros(nl)
    share = np.zeros(nl)
    cnt = np.zeros(nl, dtype=np.int64)
    mine = np.zeros(nl, dtype=np.int64)
    seen = np.zeros(nl, dtype=np.bool_)
    touched = np.empty(nl, dtype=np.int64)
    stack = np.empty(nl, dtype=np.int64)
    flows = np.empty(n, dtype=np.int64)
    fmin = np.zeros(n)
    old = np.zeros(n)
    newf = np.empty(n, dtype=np.int64)
    act = np.empty(n, dtype=np.int64)
    pos = np.full(n, -1, dtype=np.int64)
    nact = 0
    now = 0.0
    while True:
        while len(projected) > 0 and projected[0][2] != version[projected[0][1]]:
            heapq.heappop(projected)
        t_next = np.inf
        if len(ready) > 0:
            t_next = ready[0][0]
        if len(arrivals) > 0 and arrivals[0][0] < t_next:
            t_next = arrivals[0][0]
        if len(projected) > 0 and projected[0][0] < t_next:
            t_next = projected[0][0]
        if t_next == np.inf:
            break
        if t_next < now:
            t_next = now
        horizon = t_next * (1.0 + BATCH_RTOL)
        level = np.inf
        nseed = 0
        while len(projected) > 0 and projected[0][0] <= horizon:
            _, f, ver = heapq.heappop(projected)
            if ver != version[f]:
                continue
            version[f] += 1
            if rate[f] < level:
                level = rate[f]
            for j in range(lptr[f], lptr[f + 1]):
                link = lidx[j]
                if prv[j] >= 0:
                    nxt[prv[j]] = nxt[j]
                else:
                    head[link] = nxt[j]
                if nxt[j] >= 0:
                    prv[nxt[j]] = prv[j]
                count[link] -= 1
                used[link] -= rate[f]
                if not seen[link]:
                    seen[link] = True
                    stack[nseed] = link
                    nseed += 1
            rate[f] = 0.0
            last = act[nact - 1]
            act[pos[f]] = last
            pos[last] = pos[f]
            pos[f] = -1
            nact -= 1
            if lat[f] == 0.0:
                _arrive(f, t_next, finish, cptr, cidx, pending, ready_at, ready, startup)
            else:
                heapq.heappush(arrivals, (t_next + lat[f], f))
        now = t_next
        nnew = 0
        while ((len(arrivals) > 0 and arrivals[0][0] <= horizon)
               or (len(ready) > 0 and ready[0][0] <= horizon)):
            while len(arrivals) > 0 and arrivals[0][0] <= horizon:
                when, i = heapq.heappop(arrivals)
                _arrive(i, when, finish, cptr, cidx, pending, ready_at, ready, startup)
            while len(ready) > 0 and ready[0][0] <= horizon:
                when, i = heapq.heappop(ready)
                start[i] = when
                if bits[i] > 0 and lptr[i + 1] > lptr[i]:
                    newf[nnew] = i
                    nnew += 1
                elif lat[i] == 0.0:
                    _arrive(i, when, finish, cptr, cidx, pending, ready_at, ready, startup)
                else:
                    heapq.heappush(arrivals, (when + lat[i], i))
        for b in range(nnew):
            f = newf[b]
            rem[f] = bits[f]
            since[f] = now
            rate[f] = 0.0
            fresh[f] = True
            act[nact] = f
            pos[f] = nact
            nact += 1
            for j in range(lptr[f], lptr[f + 1]):
                link = lidx[j]
                nxt[j] = head[link]
                prv[j] = -1
                if head[link] >= 0:
                    prv[head[link]] = j
                head[link] = j
                count[link] += 1
                if not seen[link]:
                    seen[link] = True
                    stack[nseed] = link
                    nseed += 1
        for b in range(nnew):
            f = newf[b]
            for j in range(lptr[f], lptr[f + 1]):
                s = cap[lidx[j]] / count[lidx[j]]
                if s < level:
                    level = s
        if nseed == 0:
            continue
        # The flows to re-solve: connected to the touched links through flows that are new
        # or at least as fast as ``level``; past SEARCH_LIMIT flows the search stops and every
        # such flow is taken (all-to-all traffic connects nearly everything).
        floor = level * (1.0 - LEVEL_RTOL)
        nres = 0
        ntouched = 0
        top = nseed
        while top > 0 and nres <= SEARCH_LIMIT:
            top -= 1
            link = stack[top]
            touched[ntouched] = link
            ntouched += 1
            j = head[link]
            while j >= 0:
                f = owner[j]
                if not chosen[f] and (fresh[f] or rate[f] >= floor):
                    chosen[f] = True
                    flows[nres] = f
                    nres += 1
                    for e in range(lptr[f], lptr[f + 1]):
                        other = lidx[e]
                        if not seen[other]:
                            seen[other] = True
                            stack[top] = other
                            top += 1
                j = nxt[j]
        if nres > SEARCH_LIMIT:
            while top > 0:  # links pushed but not visited: still marked
                top -= 1
                touched[ntouched] = stack[top]
                ntouched += 1
            for a in range(nres):
                chosen[flows[a]] = False
            nres = 0
            for a in range(nact):
                f = act[a]
                if fresh[f] or rate[f] >= floor:
                    chosen[f] = True
                    flows[nres] = f
                    nres += 1
                    for e in range(lptr[f], lptr[f + 1]):
                        other = lidx[e]
                        if not seen[other]:
                            seen[other] = True
                            touched[ntouched] = other
                            ntouched += 1
        for t in range(ntouched):
            link = touched[t]
            seen[link] = False
            spare[link] = 0.0
            mine[link] = 0
        if nres == 0:
            continue
        for a in range(nres):
            f = flows[a]
            old[f] = rate[f]
            for j in range(lptr[f], lptr[f + 1]):
                spare[lidx[j]] += rate[f]
                mine[lidx[j]] += 1
        for t in range(ntouched):
            link = touched[t]
            if mine[link] == count[link]:
                spare[link] = cap[link]  # the group is alone there: no drift from ``used``
            else:
                spare[link] = max(0.0, cap[link] - used[link] + spare[link])
        _solve(flows, nres, lptr, lidx, spare, cnt, rate, share, touched, ntouched, fmin)
        for a in range(nres):
            f = flows[a]
            chosen[f] = False
            delta = rate[f] - old[f]
            if delta == 0.0 and not fresh[f]:
                continue
            fresh[f] = False
            rem[f] = max(0.0, rem[f] - old[f] * (now - since[f]))
            since[f] = now
            for j in range(lptr[f], lptr[f + 1]):
                used[lidx[j]] += delta
            version[f] += 1
            heapq.heappush(projected, (now + rem[f] / rate[f], f, version[f]))
    return start, finish


@njit(cache=True)
def _solve(flows, nres, lptr, lidx, spare, cnt, rate, share, touched, ntouched, fmin):
    """Max-min rates of ``flows[:nres]`` on ``spare`` (progressive filling: each round
    freezes, at their fair share, the flows of every link whose share is no larger than the
    shares of all other links its flows cross; ``spare`` is used up)."""
    for t in range(ntouched):
        cnt[touched[t]] = 0
    for a in range(nres):
        f = flows[a]
        for j in range(lptr[f], lptr[f + 1]):
            cnt[lidx[j]] += 1
    open_f = flows[:nres].copy()
    open_n = nres
    blocked = np.zeros(spare.shape[0], dtype=np.bool_)
    hit = np.zeros(nres, dtype=np.bool_)
    while open_n > 0:
        for t in range(ntouched):
            link = touched[t]
            share[link] = spare[link] / cnt[link] if cnt[link] > 0 else np.inf
            blocked[link] = False
        for a in range(open_n):
            f = open_f[a]
            m = np.inf
            for j in range(lptr[f], lptr[f + 1]):
                s = share[lidx[j]]
                if s < m:
                    m = s
            fmin[f] = m
        for a in range(open_n):
            f = open_f[a]
            limit = fmin[f] * (1.0 + LEVEL_RTOL)
            for j in range(lptr[f], lptr[f + 1]):
                if share[lidx[j]] > limit:
                    blocked[lidx[j]] = True
        nhit = 0
        for a in range(open_n):
            f = open_f[a]
            limit = fmin[f] * (1.0 + LEVEL_RTOL)
            hit[a] = False
            for j in range(lptr[f], lptr[f + 1]):
                link = lidx[j]
                if share[link] <= limit and not blocked[link]:
                    hit[a] = True
                    break
            if hit[a]:
                nhit += 1
        if nhit == open_n or nhit == 0:  # (none: only by round-off; freeze all)
            for a in range(open_n):
                rate[open_f[a]] = fmin[open_f[a]]
            return
        kept = 0
        for a in range(open_n):
            f = open_f[a]
            if hit[a]:
                rate[f] = fmin[f]
                for j in range(lptr[f], lptr[f + 1]):
                    link = lidx[j]
                    cnt[link] -= 1
                    spare[link] -= fmin[f]
            else:
                open_f[kept] = f
                kept += 1
        for t in range(ntouched):
            link = touched[t]
            if spare[link] < 0.0:
                spare[link] = 0.0
        open_n = kept


def simulate_arrays(bits: np.ndarray, lat: np.ndarray, lptr: np.ndarray, lidx: np.ndarray,
                    cap: np.ndarray, cptr: np.ndarray, cidx: np.ndarray, pending: np.ndarray,
                    startup_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Run the compiled event loop; see ``run_events``."""
    return run_events(bits, lat, lptr, lidx, cap, cptr, cidx, pending, float(startup_s))


__all__ = ["simulate_arrays"]
