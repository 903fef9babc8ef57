"""The simulator's event loop compiled with numba: the same model and the same rules as the
engines of ``simulator.fluid`` (which stay as the reference and as the fallback where numba
is missing), on flat arrays.

Per event: the flows that stop and start are found by a scan of the active set; the flows
re-solved are the new ones and every active flow at least as fast as the smallest rate of a
stopped flow and the smallest equal share of a new flow's links (the rule argued in
``simulator.fluid``), on the capacity the others leave; max-min rates by progressive filling
with several bottlenecks per round (``simulator.maxmin.max_min_rates``).
"""

from __future__ import annotations

import heapq

import numpy as np
from numba import njit

from simulator.maxmin import LEVEL_RTOL

BATCH_RTOL = 1e-12


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
    act = np.empty(n, dtype=np.int64)
    pos = np.full(n, -1, dtype=np.int64)
    rem = np.zeros(n)
    rate = np.zeros(n)
    fresh = np.zeros(n, dtype=np.bool_)
    nact = 0
    count = np.zeros(nl, dtype=np.int64)
    used = np.zeros(nl)
    spare = np.zeros(nl)
    share = np.zeros(nl)
    cnt = np.zeros(nl, dtype=np.int64)
    mine = np.zeros(nl, dtype=np.int64)
    seen = np.zeros(nl, dtype=np.bool_)
    touched = np.empty(nl, dtype=np.int64)
    flows = np.empty(n, dtype=np.int64)
    fmin = np.zeros(n)
    old = np.zeros(n)
    done = np.empty(n, dtype=np.int64)
    newf = np.empty(n, dtype=np.int64)
    now = 0.0
    while True:
        t_next = np.inf
        if len(ready) > 0:
            t_next = ready[0][0]
        if len(arrivals) > 0 and arrivals[0][0] < t_next:
            t_next = arrivals[0][0]
        k = -1
        t_fin = np.inf
        if nact > 0:
            best = np.inf
            for a in range(nact):
                f = act[a]
                ttf = rem[f] / rate[f]
                if ttf < best:
                    best = ttf
                    k = f
            t_fin = now + best
            if t_fin < t_next:
                t_next = t_fin
        if t_next == np.inf:
            break
        horizon = t_next * (1.0 + BATCH_RTOL)
        level = np.inf
        ndone = 0
        if nact > 0:
            dt = t_next - now
            for a in range(nact):
                f = act[a]
                if rem[f] / rate[f] <= horizon - now or (f == k and t_next == t_fin):
                    done[ndone] = f
                    ndone += 1
                rem[f] -= rate[f] * dt
            for d in range(ndone):
                f = done[d]
                if rate[f] < level:
                    level = rate[f]
                for j in range(lptr[f], lptr[f + 1]):
                    count[lidx[j]] -= 1
                    used[lidx[j]] -= rate[f]
                a = pos[f]
                last = act[nact - 1]
                act[a] = last
                pos[last] = a
                pos[f] = -1
                nact -= 1
            # Sent in index order of the active set, as the numpy engine does.
            for d in range(ndone):
                f = done[d]
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
            act[nact] = f
            pos[f] = nact
            nact += 1
            rem[f] = bits[f]
            rate[f] = 0.0
            fresh[f] = True
            for j in range(lptr[f], lptr[f + 1]):
                count[lidx[j]] += 1
        for b in range(nnew):
            f = newf[b]
            for j in range(lptr[f], lptr[f + 1]):
                s = cap[lidx[j]] / count[lidx[j]]
                if s < level:
                    level = s
        if (ndone == 0 and nnew == 0) or nact == 0:
            continue
        floor = level * (1.0 - LEVEL_RTOL)
        nres = 0
        ntouched = 0
        for a in range(nact):
            f = act[a]
            if fresh[f] or rate[f] >= floor:
                flows[nres] = f
                nres += 1
                old[f] = rate[f]
                for j in range(lptr[f], lptr[f + 1]):
                    link = lidx[j]
                    if not seen[link]:
                        seen[link] = True
                        touched[ntouched] = link
                        ntouched += 1
                        spare[link] = 0.0
                        mine[link] = 0
                    spare[link] += rate[f]
                    mine[link] += 1
        for t in range(ntouched):
            link = touched[t]
            seen[link] = False
            if mine[link] == count[link]:
                spare[link] = cap[link]
            else:
                spare[link] = max(0.0, cap[link] - used[link] + spare[link])
        _solve(flows, nres, lptr, lidx, spare, cnt, rate, share, touched, ntouched, fmin)
        for a in range(nres):
            f = flows[a]
            fresh[f] = False
            delta = rate[f] - old[f]
            if delta != 0.0:
                for j in range(lptr[f], lptr[f + 1]):
                    used[lidx[j]] += delta
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
