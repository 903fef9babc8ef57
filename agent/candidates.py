"""The upper level's choices: K candidate trees for one chunk, and their feature rows.

Every row describes one candidate in units that mean the same on any topology (loads in
lower-bound seconds, depths and fan-outs as fractions of the server count), so one shared
scorer network ranks the candidates of BCube, DCell or Jellyfish alike.
"""

from __future__ import annotations

import numpy as np

from agent.trees import GREEDY_WEIGHTS, Overlay, Tree, chain_tree, greedy_tree, star_tree

#: Candidate slots: chain trees of two of the overlay's cycles (both orientations), the
#: greedy weightings, and the star.
K_MAX = 4 + len(GREEDY_WEIGHTS) + 1
#: Features per candidate row (see ``features``).
F_UP = 12


def tree_slots(ov: Overlay, tree: Tree) -> tuple[np.ndarray, np.ndarray]:
    """(directed link ids, time slots) of every link crossing of a tree's transfers, each
    transfer in its as-soon-as-possible slot: the reduce of v in slot height(v) - 1 (leaves
    first), the broadcast into v in slot (height(root) - 1) + depth(v) - 1."""
    kids = tree.children()
    order, stack = [], [tree.root]
    while stack:
        v = stack.pop()
        order.append(v)
        stack.extend(kids[v])
    height = [1] * ov.n
    for v in reversed(order):
        height[v] = 1 + max((height[c] for c in kids[v]), default=0)
    depth = [0] * ov.n
    for v in order:
        for c in kids[v]:
            depth[c] = depth[v] + 1
    links, slots = [], []
    for v in order[1:]:
        up = ov.hop_fwd[tree.hop[v]]
        down = ov.hop_fwd[ov.reverse[tree.hop[v]]]
        links.extend((up, down))
        slots.extend((np.full(len(up), height[v] - 1),
                      np.full(len(down), height[tree.root] - 2 + depth[v])))
    links_a, slots_a = np.concatenate(links), np.concatenate(slots)
    keep = links_a != ov.dummy
    return links_a[keep], slots_a[keep]


class Loads:
    """Network pressure of the chunks routed so far: seconds of traffic on every directed
    link from the reduces (``up``) and the broadcasts (``down``), and the same split over
    as-soon-as-possible time slots (``slotted``, links x slots). The *slotted estimate* sum
    over slots of the busiest link's seconds is how long the plan takes if every slot
    lasts as long as its most loaded link: a cheap proxy of the simulated makespan that is
    exact for lock-step plans."""

    def __init__(self, ov: Overlay) -> None:
        self.up = np.zeros(len(ov.cap_Bps))
        self.down = np.zeros(len(ov.cap_Bps))
        self.slotted = np.zeros((len(ov.cap_Bps), 2 * ov.n))

    def estimate(self) -> float:
        """The slotted makespan estimate, seconds."""
        return float(self.slotted.max(axis=0).sum())

    def add(self, ov: Overlay, tree: Tree, chunk_bytes: float) -> None:
        """Charge one chunk of ``chunk_bytes`` carried by ``tree``."""
        up, down = ov.usage(tree)
        self.up += up * chunk_bytes / ov.cap_Bps
        self.down += down * chunk_bytes / ov.cap_Bps
        links, slots = tree_slots(ov, tree)
        np.add.at(self.slotted, (links, slots), chunk_bytes / ov.cap_Bps[links])

    def estimate_with(self, ov: Overlay, tree: Tree, chunk_bytes: float) -> float:
        """The slotted estimate after adding ``tree``, seconds (nothing is charged)."""
        links, slots = tree_slots(ov, tree)
        cols = np.unique(slots)
        part = self.slotted[:, cols].copy()
        np.add.at(part, (links, np.searchsorted(cols, slots)), chunk_bytes / ov.cap_Bps[links])
        now = self.slotted.max(axis=0)
        return float(now.sum() - now[cols].sum() + part.max(axis=0).sum())


def offered_chains(ov: Overlay, turn: int) -> list[tuple[int, bool] | None]:
    """The four chain slots (cycle index, clockwise) of a chunk of the owner's ``turn``-th
    round (chunk c has turn c // N); None marks an empty slot. With one or two cycles:
    each cycle in both orientations. With more (a ring packing's tours) only cycle
    turn // 2 in the turn's orientation (clockwise on even turns): the packing is fast
    only if every cycle carries the same share both ways from every owner (a few chunks
    too many on one cycle cost more than its gain), and a free choice among several
    cycles is one the load features cannot steer (tried: 1.47-1.68 x the bound against
    1.14 for the exact share), so the owner's successive turns walk through the cycles
    and the policy chooses between that chain and the other trees."""
    count = len(ov.cycles)
    if count <= 2:
        return [(c, cw) if c < count else None for c in range(2) for cw in (True, False)]
    return [((turn // 2) % count, turn % 2 == 0), None, None, None]


def candidate_trees(ov: Overlay, root: int, loads: Loads, chunk_bytes: float,
                    turn: int = 0) -> list[Tree | None]:
    """K_MAX slots of candidate trees rooted at ``root`` for a chunk of the owner's
    ``turn``-th round; None marks an empty slot (a graph with a single cycle)."""
    out: list[Tree | None] = [None if slot is None else
                              chain_tree(ov, ov.cycles[slot[0]], root, slot[1])
                              for slot in offered_chains(ov, turn)]
    total = loads.up + loads.down
    for link_w, depth_w in GREEDY_WEIGHTS:
        out.append(greedy_tree(ov, root, total, chunk_bytes, link_w, depth_w))
    out.append(star_tree(ov, root, total))
    return out


def features(ov: Overlay, trees: list[Tree | None], loads: Loads, chunk_bytes: float,
             lb_s: float, progress: float) -> tuple[np.ndarray, np.ndarray]:
    """(K_MAX x F_UP float32 rows, int8 mask). Row: increase of the slotted estimate (in
    chunk link-times / 2(N-1)) and the estimate after adding the candidate (in lower
    bounds), peak link load after adding it and its increase (chunk link-times / (N-1)),
    peak reduce and broadcast load after, mean load now on its links, depth, links per hop
    (relayed hops count extra), largest fan-out, progress, and the current slotted
    estimate."""
    obs = np.zeros((K_MAX, F_UP), np.float32)
    mask = np.zeros(K_MAX, np.int8)
    unit = chunk_bytes / float(ov.cap_Bps[:-1].min())
    total = loads.up + loads.down
    now = (total.max(), loads.up.max(), loads.down.max())
    estimate = loads.estimate()
    n = ov.n
    for k, tree in enumerate(trees):
        if tree is None:
            continue
        up, down = ov.usage(tree)
        up = loads.up + up * chunk_bytes / ov.cap_Bps
        down = loads.down + down * chunk_bytes / ov.cap_Bps
        after = (up + down).max(), up.max(), down.max()
        hops = [h for v, h in enumerate(tree.hop) if v != tree.root]
        on = np.unique(ov.hop_links[hops])
        on = on[on != ov.dummy]
        fan = max(len(c) for c in tree.children())
        links = ov.hop_len[hops]
        est = loads.estimate_with(ov, tree, chunk_bytes)
        # Increases are in chunk link-times, scaled by their largest plausible value (a
        # chain adds 2 (N-1) slots, a star N-1 crossings of one link) to stay near [0, 1].
        obs[k] = ((est - estimate) / unit / (2 * (n - 1)), est / lb_s, after[0] / lb_s,
                  (after[0] - now[0]) / unit / (n - 1), 2 * after[1] / lb_s, 2 * after[2] / lb_s,
                  total[on].mean() / lb_s, tree.depth() / (n - 1),
                  (links.mean() + (links > 2).mean()) / 4.0, fan / (n - 1),
                  progress, estimate / lb_s)
        mask[k] = 1
    return obs, mask
