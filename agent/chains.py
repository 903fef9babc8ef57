"""The longest dependency chain of a pipelined, periodic set of transfers, on flat arrays;
compiled with numba where it imports (the same function runs interpreted where it does not).

A *period* is the T transfers of one piece (for a tree copy: one piece's reduces and copies,
``traffic.trees.emit_tree``); piece p's transfer t depends on transfers ``same[t]`` of piece
p and ``prev[t]`` of piece p - 1, and costs ``fixed_s + piece_bytes[p] / rate[t]`` seconds.
The arithmetic is the one of ``agent.forest.Costs.add`` (start: the latest (finish, chain
length) of its dependencies; finish: start + fixed cost + bytes / rate, in that order), so the
answer is equal, bit for bit, to feeding the transfers one by one.
"""

from __future__ import annotations

import numpy as np

try:
    from numba import njit
except ImportError:  # numba missing: the same function, interpreted
    def njit(**_):
        return lambda function: function


@njit(cache=True)
def longest_chain(same_ptr, same_idx, prev_ptr, prev_idx, rate, piece_bytes, fixed_s):
    """(finish seconds, chain length) of the latest transfer over all pieces (ties: the longer
    chain); ``same_*`` and ``prev_*`` are CSR lists of period indices, ``rate`` bytes/s."""
    periods = rate.shape[0]
    finish = np.zeros(periods)
    depth = np.zeros(periods, np.int64)
    last_f, last_d = 0.0, 0
    for p in range(piece_bytes.shape[0]):
        before_f = finish.copy()
        before_d = depth.copy()
        for t in range(periods):
            start_f, start_d = 0.0, 0
            for k in range(same_ptr[t], same_ptr[t + 1]):
                d = same_idx[k]
                if finish[d] > start_f or (finish[d] == start_f and depth[d] > start_d):
                    start_f, start_d = finish[d], depth[d]
            if p > 0:
                for k in range(prev_ptr[t], prev_ptr[t + 1]):
                    d = prev_idx[k]
                    if before_f[d] > start_f or (before_f[d] == start_f
                                                 and before_d[d] > start_d):
                        start_f, start_d = before_f[d], before_d[d]
            finish[t] = start_f + fixed_s + piece_bytes[p] / rate[t]
            depth[t] = start_d + 1
            if finish[t] > last_f or (finish[t] == last_f and depth[t] > last_d):
                last_f, last_d = finish[t], depth[t]
    return last_f, last_d
