"""Generalised advantage estimation against values worked out by hand."""

import numpy as np
import pytest

from agent.advantage import gae


def test_terminal_reward_only_lambda_one_is_return_minus_value():
    adv, ret = gae(np.array([0.0, 0.0, 1.0]), np.array([0.5, 0.2, 0.1]),
                   np.array([0, 0, 1]), last_value=9.0, gamma=1.0, lam=1.0)
    assert ret == pytest.approx([1.0, 1.0, 1.0])
    assert adv == pytest.approx([0.5, 0.8, 0.9])


def test_hand_computed_gamma_and_lambda():
    # gamma 0.9, lambda 0.5, V = [1, 2], r = [1, 1], not terminal, V(after) = 3.
    # delta_1 = 1 + 0.9*3 - 2 = 1.7 ; delta_0 = 1 + 0.9*2 - 1 = 1.8
    # A_1 = 1.7 ; A_0 = 1.8 + 0.45 * 1.7 = 2.565
    adv, ret = gae(np.array([1.0, 1.0]), np.array([1.0, 2.0]), np.array([0, 0]),
                   last_value=3.0, gamma=0.9, lam=0.5)
    assert adv == pytest.approx([2.565, 1.7])
    assert ret == pytest.approx([3.565, 3.7])


def test_episode_boundary_stops_bootstrapping():
    # Two one-step episodes: each advantage is its own r - V.
    adv, _ = gae(np.array([1.0, -1.0]), np.array([0.25, 0.5]), np.array([1, 1]),
                 last_value=100.0, gamma=1.0, lam=0.95)
    assert adv == pytest.approx([0.75, -1.5])
