"""The simulator's event loop compiled with numba: the same model and the same rules as the
engines of ``simulator.fluid`` (which stay as the reference and as the fallback where numba
is missing), on flat arrays.

Path classes. Flows on the same path cross the same links, so max-min fairness gives them
one rate at every instant; the loop keeps one entry per path (a class) wherever the engines
of ``simulator.fluid`` keep one per flow: in the per-link lists, the rate index, the
re-solve (a class counts as its number of sending flows) and the heap of projected finish
times. A class records the service each of its flows has received since it became active
(bits per flow, advanced whenever its rate changes); a flow joining it is done when that
service reaches the service at its join plus its own bits, and the class's flows wait in a
skew heap ordered by that figure, so only the first of them has a projected finish time.
Pipelined trees put thousands of flows on a few hundred paths, and an event then costs what
its classes do; all-to-all traffic has about one flow per path and costs what it did per
flow.

Per event: the classes whose first flow stops come off an indexed heap of projected finish
times (one entry per sending class, moved in place when its rate changes). The classes
re-solved are those connected to the touched links, through per-link lists of the active
classes, by classes that are new (or gained a flow) or at least as fast as the smallest
rate of a stopped flow and the smallest equal share of a new flow's links (the rule argued
in ``simulator.fluid``), on the capacity the others leave; max-min rates by progressive
filling with several bottlenecks per round (``simulator.maxmin.max_min_rates``); only
classes whose rate changed, or whose flows changed, get a new projection.

Finding those classes. The per-link lists hold slow classes too: in all-to-all traffic a
link carries hundreds of flows of which an event re-solves a few. The active classes are
therefore also indexed by rate (a list per bucket of 1/256 octave), which lists the classes
at least as fast as the event's level in about their own number. The walk along the links
stops once it has visited twice that many entries (plus ``WALK_SLACK``), and the event takes
the list (every fast class, connected or not) instead. The rates are the same: max-min
decomposes over components, and a component the event did not touch keeps its rates.
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
def _before(key, a, b):
    """Flow ``a`` comes before ``b`` in a path class's queue: less service to reach, then
    lower flow id."""
    return key[a] < key[b] or (key[a] == key[b] and a < b)


@njit(cache=True)
def _meld(a, b, key, left, right):
    """Meld the skew heaps of flows rooted at ``a`` and ``b`` (-1: empty), ordered by
    ``_before``; returns the new root (top-down: along the merge path every node's children
    swap and the rest merges into its left)."""
    if a < 0:
        return b
    if b < 0:
        return a
    if _before(key, b, a):
        a, b = b, a
    root = a
    while True:
        r = right[a]
        right[a] = left[a]
        if r < 0:
            left[a] = b
            return root
        if _before(key, b, r):
            r, b = b, r
        left[a] = r
        a = r


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
def _stop(i, when, lat, finish, cptr, cidx, pending, ready_at, ready, startup, arrivals):
    """Transfer ``i`` stops sending at ``when``: it arrives now or ``lat[i]`` later."""
    if lat[i] == 0.0:
        _arrive(i, when, finish, cptr, cidx, pending, ready_at, ready, startup)
    else:
        heapq.heappush(arrivals, (when + lat[i], i))


@njit(cache=True)
def run_events(bits, lat, cls, kptr, kidx, cap, cptr, cidx, pending0, startup):
    """Simulate; returns (start, finish) per transfer (NaN where a transfer never ran).
    Transfer ``i`` crosses the links ``kidx[kptr[c]:kptr[c + 1]]`` of its path class
    ``c = cls[i]``; ``cptr``/``cidx`` list each transfer's dependants."""
    n = bits.shape[0]
    ncls = kptr.shape[0] - 1
    nl = cap.shape[0]
    nnz = kidx.shape[0]
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
    # Per flow: the class service at which it is done, and its place in its class's queue
    # (a skew heap by that service).
    target = np.zeros(n)
    left = np.full(n, -1, dtype=np.int64)
    right = np.full(n, -1, dtype=np.int64)
    # Per class: its sending flows (members), their common rate, the bits each of them has
    # been served (in ``target``'s terms) as of time ``since``, its queue's root and that
    # flow's target.
    members = np.zeros(ncls, dtype=np.int64)
    rate = np.zeros(ncls)
    served = np.zeros(ncls)
    since = np.zeros(ncls)
    root = np.full(ncls, -1, dtype=np.int64)
    first = np.zeros(ncls)
    fresh = np.zeros(ncls, dtype=np.bool_)
    chosen = np.zeros(ncls, dtype=np.bool_)
    old = np.zeros(ncls)
    fmin = np.zeros(ncls)
    flows = np.empty(ncls, dtype=np.int64)
    newc = np.empty(ncls, dtype=np.int64)
    # The classes' next finish times: a binary heap of (time, class) at 0..nheap-1.
    hkey = np.empty(ncls)
    hflow = np.empty(ncls, dtype=np.int64)
    hpos = np.full(ncls, -1, dtype=np.int64)
    nheap = 0
    # Per-link doubly linked lists of the active classes' link entries (entry j of kidx).
    owner = np.empty(nnz, dtype=np.int64)
    for c in range(ncls):
        for j in range(kptr[c], kptr[c + 1]):
            owner[j] = c
    head = np.full(nl, -1, dtype=np.int64)
    nxt = np.full(nnz, -1, dtype=np.int64)
    prv = np.full(nnz, -1, dtype=np.int64)
    entries = np.zeros(nl, dtype=np.int64)  # classes listed per link
    count = np.zeros(nl, dtype=np.int64)  # sending flows per link
    used = np.zeros(nl)
    spare = np.zeros(nl)
    share = np.zeros(nl)
    cnt = np.zeros(nl, dtype=np.int64)
    mine = np.zeros(nl, dtype=np.int64)
    seen = np.zeros(nl, dtype=np.bool_)
    touched = np.empty(nl, dtype=np.int64)
    stack = np.empty(nl, dtype=np.int64)
    # The rate index: active classes with a rate, in doubly linked lists per bucket.
    bof = np.full(ncls, -1, dtype=np.int64)
    bhead = np.full(NBUCKETS, -1, dtype=np.int64)
    bnext = np.full(ncls, -1, dtype=np.int64)
    bprev = np.full(ncls, -1, dtype=np.int64)
    bcount = np.zeros(NBUCKETS, dtype=np.int64)
    btop = 0  # no bucket above it holds a class
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
            c = hflow[0]
            f = root[c]
            root[c] = _meld(left[f], right[f], target, left, right)
            if root[c] >= 0:
                first[c] = target[root[c]]
            members[c] -= 1
            if rate[c] < level:
                level = rate[c]
            for j in range(kptr[c], kptr[c + 1]):
                link = kidx[j]
                count[link] -= 1
                used[link] -= rate[c]
                if not seen[link]:
                    seen[link] = True
                    stack[nseed] = link
                    nseed += 1
            _stop(f, t_next, lat, finish, cptr, cidx, pending, ready_at, ready, startup,
                  arrivals)
            if members[c] > 0:  # the next member, at the class's rate until re-solved
                nheap = _hset(hkey, hflow, hpos, nheap, c,
                              since[c] + max(0.0, first[c] - served[c]) / rate[c])
                continue
            nheap = _hpop(hkey, hflow, hpos, nheap)
            for j in range(kptr[c], kptr[c + 1]):
                _unlink(j, kidx[j], head, nxt, prv)
                entries[kidx[j]] -= 1
            rate[c] = 0.0
            _unindex(c, bof, bhead, bnext, bprev, bcount)
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
                c = cls[i]
                if not (bits[i] > 0 and kptr[c + 1] > kptr[c]):
                    _stop(i, when, lat, finish, cptr, cidx, pending, ready_at, ready,
                          startup, arrivals)
                    continue
                if members[c] == 0:
                    served[c] = 0.0
                    rate[c] = 0.0
                    for j in range(kptr[c], kptr[c + 1]):
                        _push(j, kidx[j], head, nxt, prv)
                        entries[kidx[j]] += 1
                else:
                    served[c] += rate[c] * (now - since[c])
                    for j in range(kptr[c], kptr[c + 1]):
                        used[kidx[j]] += rate[c]  # the member sends at the class's rate
                since[c] = now
                target[i] = served[c] + bits[i]
                left[i] = -1
                right[i] = -1
                root[c] = _meld(root[c], i, target, left, right)
                first[c] = target[root[c]]
                members[c] += 1
                if not fresh[c]:
                    fresh[c] = True
                    newc[nnew] = c
                    nnew += 1
                for j in range(kptr[c], kptr[c + 1]):
                    link = kidx[j]
                    count[link] += 1
                    if not seen[link]:
                        seen[link] = True
                        stack[nseed] = link
                        nseed += 1
        for b in range(nnew):
            c = newc[b]
            for j in range(kptr[c], kptr[c + 1]):
                s = cap[kidx[j]] / count[kidx[j]]
                if s < level:
                    level = s
        if nseed == 0:
            continue
        # The classes to re-solve: connected to the touched links through classes that are
        # new or at least as fast as ``level``; past its budget of link entries the walk
        # stops and every such class is taken from the rate index.
        floor = level * (1.0 - LEVEL_RTOL)
        low = _bucket(floor)
        while btop > 0 and bcount[btop] == 0:
            btop -= 1
        nfast = 0
        for b in range(low, btop + 1):
            nfast += bcount[b]
        budget = 2 * (nfast + nnew) + WALK_SLACK
        walked = 0  # link entries visited; at least the seed links' classes, so when those
        for b in range(nseed):  # alone are over budget, the walk is skipped
            walked += entries[stack[b]]
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
                c = owner[j]
                if not chosen[c] and (fresh[c] or rate[c] >= floor):
                    chosen[c] = True
                    flows[nres] = c
                    nres += 1
                    top = _mark_links(c, kptr, kidx, seen, stack, top)
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
                c = newc[b]
                chosen[c] = True
                flows[nres] = c
                nres += 1
            for b in range(low, btop + 1):
                c = bhead[b]
                while c >= 0:
                    if rate[c] >= floor and not chosen[c]:
                        chosen[c] = True
                        flows[nres] = c
                        nres += 1
                    c = bnext[c]
            for a in range(nres):
                ntouched = _mark_links(flows[a], kptr, kidx, seen, touched, ntouched)
        for t in range(ntouched):
            link = touched[t]
            seen[link] = False
            spare[link] = 0.0
            mine[link] = 0
        if nres == 0:
            continue
        for a in range(nres):
            c = flows[a]
            old[c] = rate[c]
            for j in range(kptr[c], kptr[c + 1]):
                spare[kidx[j]] += rate[c] * members[c]
                mine[kidx[j]] += 1
        for t in range(ntouched):
            link = touched[t]
            if mine[link] == entries[link]:
                spare[link] = cap[link]  # the group is alone there: no drift from ``used``
            else:
                spare[link] = max(0.0, cap[link] - used[link] + spare[link])
        _solve(flows, nres, kptr, kidx, members, spare, cnt, rate, share, touched, ntouched,
               fmin)
        for a in range(nres):
            c = flows[a]
            chosen[c] = False
            delta = rate[c] - old[c]
            if delta == 0.0 and not fresh[c]:
                continue
            fresh[c] = False
            served[c] += old[c] * (now - since[c])
            since[c] = now
            for j in range(kptr[c], kptr[c + 1]):
                used[kidx[j]] += delta * members[c]
            if _bucket(rate[c]) != bof[c]:
                _unindex(c, bof, bhead, bnext, bprev, bcount)
                btop = max(btop, _index(c, rate[c], bof, bhead, bnext, bprev, bcount))
            nheap = _hset(hkey, hflow, hpos, nheap, c,
                          now + max(0.0, first[c] - served[c]) / rate[c])
    return start, finish


@njit(cache=True)
def _solve(flows, nres, lptr, lidx, weight, spare, cnt, rate, share, touched, ntouched, fmin):
    """Max-min rates of ``flows[:nres]``, flow ``f`` standing for ``weight[f]`` flows of the
    same links, on ``spare`` (progressive filling: each round freezes, at their fair share,
    the flows of every link whose share is no larger than the shares of all other links its
    flows cross; ``spare`` is used up)."""
    for t in range(ntouched):
        cnt[touched[t]] = 0
    for a in range(nres):
        f = flows[a]
        for j in range(lptr[f], lptr[f + 1]):
            cnt[lidx[j]] += weight[f]
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
                    cnt[link] -= weight[f]
                    spare[link] -= fmin[f] * weight[f]
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


def simulate_arrays(bits: np.ndarray, lat: np.ndarray, cls: np.ndarray, kptr: np.ndarray,
                    kidx: np.ndarray, cap: np.ndarray, cptr: np.ndarray, cidx: np.ndarray,
                    pending: np.ndarray, startup_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Run the compiled event loop; see ``run_events``."""
    return run_events(bits, lat, cls, kptr, kidx, cap, cptr, cidx, pending, float(startup_s))


__all__ = ["group_by_parent", "simulate_arrays"]
