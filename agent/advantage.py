"""Generalised advantage estimation (Schulman et al., 2016), alone so it can be tested
against hand-computed values."""

from __future__ import annotations

import numpy as np


def gae(rewards: np.ndarray, values: np.ndarray, dones: np.ndarray, last_value: float,
        gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and returns of one stream of steps.

    ``dones[t]`` is 1 when step t ended its episode (then nothing is bootstrapped past it);
    ``last_value`` is the value of the state after the last step (ignored if that step was
    terminal). delta_t = r_t + gamma V_{t+1} (1 - done_t) - V_t and
    A_t = delta_t + gamma lam (1 - done_t) A_{t+1}; returns are A + V.
    """
    steps = len(rewards)
    adv = np.zeros(steps, dtype=np.float64)
    running = 0.0
    for t in reversed(range(steps)):
        alive = 1.0 - float(dones[t])
        next_value = last_value if t == steps - 1 else values[t + 1]
        delta = rewards[t] + gamma * next_value * alive - values[t]
        running = delta + gamma * lam * alive * running
        adv[t] = running
    return adv, adv + np.asarray(values, dtype=np.float64)
