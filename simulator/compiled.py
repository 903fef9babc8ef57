"""The simulator's event loop compiled with numba: the same model and the same rules as the
engines of ``simulator.fluid`` (which stay as the reference and as the fallback where numba
is missing), on flat arrays.

Per event: the flows that stop come off an indexed heap of projected finish times (one entry
per sending flow, moved in place when its rate changes; a heap that keeps stale entries grows
to many times the active flows and stops fitting the cache). The flows re-solved are those
connected to the touched links, through per-link lists of the active flows, by flows that are
new or at least as fast as the smallest rate of a stopped flow and the smallest equal share
of a new flow's links (the rule argued in ``simulator.fluid``), on the capacity the others
leave; max-min rates by progressive filling with several bottlenecks per round
(``simulator.maxmin.max_min_rates``); only flows whose rate changed get a new projection.

Finding those flows. The per-link lists hold slow flows too: in all-to-all traffic a link
carries hundreds of flows of which an event re-solves a few. The active flows are therefore
also indexed by rate (a list per bucket of 1/256 octave), which lists the flows at least as
fast as the event's level in about their own number. The walk along the links stops once it
has visited twice that many entries (plus ``WALK_SLACK``), and the event takes the list
(every fast flow, connected or not) instead. The rates are the same: max-min decomposes over
components, and a component the event did not touch keeps its rates.
"""

from __future__ import annotations

import heapq

import numpy as np
from numba import njit

from simulator.maxmin import BATCH_RTOL, LEVEL_RTOL

#: Rate buckets per octave of the rate index, and the octaves it spans (rates in bit/s,
#: 2^LOG2_MIN to 2^LOG2_MAX; rates outside fall in the end buckets, which stays exact).
BUCKETS_PER_OCTAVE = 256
LOG2_MIN = -20.0
LOG2_MAX = 60.0
NBUCKETS = int((LOG2_MAX - LOG2_MIN) * BUCKETS_PER_OCTAVE) + 1
#: Link entries the walk may visit beyond twice the number of flows the rate index lists.
WALK_SLACK = 256


@njit(cache=True)
def _bucket(r):
    """The rate index's bucket of rate ``r`` (bit/s): 1/BUCKETS_PER_OCTAVE octave each."""
    if not r > 0.0:
        return 0
    if not r < 2.0 ** LOG2_MAX:
        return NBUCKETS - 1
    return max(0, int((np.log2(r) - LOG2_MIN) * BUCKETS_PER_OCTAVE))


@njit(cache=True)
def _unlink(i, h, head, nxt, prv):
    """Take item ``i`` out of list ``h`` of the doubly linked lists (head, nxt, prv)."""
    if prv[i] >= 0:
        nxt[prv[i]] = nxt[i]
    else:
        head[h] = nxt[i]
    if nxt[i] >= 0:
        prv[nxt[i]] = prv[i]


@njit(cache=True)
def _push(i, h, head, nxt, prv):
    """Put item ``i`` at the front of list ``h`` of the doubly linked lists."""
    prv[i] = -1
    nxt[i] = head[h]
    if head[h] >= 0:
        prv[head[h]] = i
    head[h] = i


@njit(cache=True)
def _unindex(f, bof, bhead, bnext, bprev, bcount):
    """Take flow ``f`` out of the rate index (if it is in)."""
    b = bof[f]
    if b < 0:
        return
    _unlink(f, b, bhead, bnext, bprev)
    bcount[b] -= 1
    bof[f] = -1


@njit(cache=True)
def _index(f, r, bof, bhead, bnext, bprev, bcount):
    """Put flow ``f``, of rate ``r``, in the rate index; returns its bucket."""
    b = _bucket(r)
    bof[f] = b
    _push(f, b, bhead, bnext, bprev)
    bcount[b] += 1
    return b


@njit(cache=True)
def _mark_links(f, lptr, lidx, seen, out, k):
    """Append flow ``f``'s links not yet ``seen`` to ``out`` from position ``k``, marking
    them; returns the new length."""
    for e in range(lptr[f], lptr[f + 1]):
        link = lidx[e]
        if not seen[link]:
            seen[link] = True
            out[k] = link
            k += 1
    return k


@njit(cache=True)
def _hless(hkey, hflow, a, b):
    """Heap position ``a`` comes before ``b``: earlier time, then lower flow id (the order of
    the (time, flow) tuples of a plain heap)."""
    return hkey[a] < hkey[b] or (hkey[a] == hkey[b] and hflow[a] < hflow[b])


@njit(cache=True)
def _hswap(hkey, hflow, hpos, a, b):
    hkey[a], hkey[b] = hkey[b], hkey[a]
    hflow[a], hflow[b] = hflow[b], hflow[a]
    hpos[hflow[a]] = a
    hpos[hflow[b]] = b


@njit(cache=True)
def _hsift(hkey, hflow, hpos, nheap, p):
    while p > 0:
        q = (p - 1) >> 1
        if not _hless(hkey, hflow, p, q):
            break
        _hswap(hkey, hflow, hpos, p, q)
        p = q
    while True:
        c = 2 * p + 1
        if c >= nheap:
            break
        if c + 1 < nheap and _hless(hkey, hflow, c + 1, c):
            c += 1
        if not _hless(hkey, hflow, c, p):
            break
        _hswap(hkey, hflow, hpos, p, c)
        p = c


@njit(cache=True)
def _hset(hkey, hflow, hpos, nheap, f, when):
    """Put (or move) flow ``f`` at time ``when``; returns the heap's new size."""
    p = hpos[f]
    if p < 0:
        p = nheap
        nheap += 1
        hflow[p] = f
        hpos[f] = p
    hkey[p] = when
    _hsift(hkey, hflow, hpos, nheap, p)
    return nheap


@njit(cache=True)
def _hpop(hkey, hflow, hpos, nheap):
    """Take the first entry off; returns the heap's new size."""
    hpos[hflow[0]] = -1
    nheap -= 1
    if nheap > 0:
        hkey[0] = hkey[nheap]
        hflow[0] = hflow[nheap]
        hpos[hflow[0]] = 0
        _hsift(hkey, hflow, hpos, nheap, 0)
    return nheap


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
    # The projected finish times: a binary heap of (time, flow) at positions 0..nheap-1.
    hkey = np.empty(n)
    hflow = np.empty(n, dtype=np.int64)
    hpos = np.full(n, -1, dtype=np.int64)
    nheap = 0
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
    # The rate index: active flows with a rate, in doubly linked lists per bucket.
    bof = np.full(n, -1, dtype=np.int64)
    bhead = np.full(NBUCKETS, -1, dtype=np.int64)
    bnext = np.full(n, -1, dtype=np.int64)
    bprev = np.full(n, -1, dtype=np.int64)
    bcount = np.zeros(NBUCKETS, dtype=np.int64)
    btop = 0  # no bucket above it holds a flow
    now = 0.0
    while True:
        t_next = np.inf
        if len(ready) > 0:
            t_next = ready[0][0]
        if len(arrivals) > 0 and arrivals[0][0] < t_next:
            t_next = arrivals[0][0]
        if nheap > 0 and hkey[0] < t_next:
            t_next = hkey[0]
        if t_next == np.inf:
            break
        if t_next < now:
            t_next = now
        horizon = t_next * (1.0 + BATCH_RTOL)
        level = np.inf
        nseed = 0
        while nheap > 0 and hkey[0] <= horizon:
            f = hflow[0]
            nheap = _hpop(hkey, hflow, hpos, nheap)
            if rate[f] < level:
                level = rate[f]
            for j in range(lptr[f], lptr[f + 1]):
                link = lidx[j]
                _unlink(j, link, head, nxt, prv)
                count[link] -= 1
                used[link] -= rate[f]
                if not seen[link]:
                    seen[link] = True
                    stack[nseed] = link
                    nseed += 1
            rate[f] = 0.0
            _unindex(f, bof, bhead, bnext, bprev, bcount)
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
                _push(j, link, head, nxt, prv)
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
        # or at least as fast as ``level``; past its budget of link entries the walk stops
        # and every such flow is taken from the rate index.
        floor = level * (1.0 - LEVEL_RTOL)
        low = _bucket(floor)
        while btop > 0 and bcount[btop] == 0:
            btop -= 1
        nfast = 0
        for b in range(low, btop + 1):
            nfast += bcount[b]
        budget = 2 * (nfast + nnew) + WALK_SLACK
        walked = 0  # link entries visited; at least the seed links' flows, so when those
        for b in range(nseed):  # alone are over budget, the walk is skipped
            walked += count[stack[b]]
        if walked <= budget:
            walked = 0
        nres = 0
        ntouched = 0
        top = nseed
        while top > 0 and walked <= budget:  # (skipped when ``walked`` is over already)
            top -= 1
            link = stack[top]
            touched[ntouched] = link
            ntouched += 1
            j = head[link]
            while j >= 0:
                walked += 1
                f = owner[j]
                if not chosen[f] and (fresh[f] or rate[f] >= floor):
                    chosen[f] = True
                    flows[nres] = f
                    nres += 1
                    top = _mark_links(f, lptr, lidx, seen, stack, top)
                j = nxt[j]
        if walked > budget:
            while top > 0:  # links pushed but not visited: still marked
                top -= 1
                touched[ntouched] = stack[top]
                ntouched += 1
            for a in range(nres):
                chosen[flows[a]] = False
            nres = 0
            for b in range(nnew):
                f = newf[b]
                chosen[f] = True
                flows[nres] = f
                nres += 1
            for b in range(low, btop + 1):
                f = bhead[b]
                while f >= 0:
                    if rate[f] >= floor and not chosen[f]:
                        chosen[f] = True
                        flows[nres] = f
                        nres += 1
                    f = bnext[f]
            for a in range(nres):
                ntouched = _mark_links(flows[a], lptr, lidx, seen, touched, ntouched)
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
            if _bucket(rate[f]) != bof[f]:
                _unindex(f, bof, bhead, bnext, bprev, bcount)
                btop = max(btop, _index(f, rate[f], bof, bhead, bnext, bprev, bcount))
            nheap = _hset(hkey, hflow, hpos, nheap, f, now + rem[f] / rate[f])
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


@njit(cache=True)
def group_by_parent(parent, child, n):
    """The children of each of ``n`` transfers as CSR arrays (cptr, cidx): the children of
    ``p`` are ``cidx[cptr[p]:cptr[p + 1]]``, in their order in ``child`` (a stable counting
    sort of the (parent, child) pairs)."""
    cptr = np.zeros(n + 1, dtype=np.int64)
    for p in parent:
        cptr[p + 1] += 1
    for p in range(n):
        cptr[p + 1] += cptr[p]
    fill = cptr[:-1].copy()
    cidx = np.empty(parent.shape[0], dtype=np.int64)
    for e in range(parent.shape[0]):
        cidx[fill[parent[e]]] = child[e]
        fill[parent[e]] += 1
    return cptr, cidx


def simulate_arrays(bits: np.ndarray, lat: np.ndarray, lptr: np.ndarray, lidx: np.ndarray,
                    cap: np.ndarray, cptr: np.ndarray, cidx: np.ndarray, pending: np.ndarray,
                    startup_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Run the compiled event loop; see ``run_events``."""
    return run_events(bits, lat, lptr, lidx, cap, cptr, cidx, pending, float(startup_s))


__all__ = ["group_by_parent", "simulate_arrays"]
