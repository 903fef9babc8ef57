"""PPO with masked categorical actions (clipped objective, value loss, entropy bonus), in
the CleanRL style: a rollout buffer, one ``act`` for sampling or greedy choice, and one
``update`` that reads top to bottom."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from agent.advantage import gae
from agent.networks import RowScorer


class Rollout:
    """Steps of one level, in order, across whole episodes."""

    def __init__(self) -> None:
        self.obs: list[np.ndarray] = []
        self.mask: list[np.ndarray] = []
        self.action: list[int] = []
        self.logp: list[float] = []
        self.value: list[float] = []
        self.reward: list[float] = []
        self.done: list[float] = []

    def __len__(self) -> int:
        return len(self.action)

    def add(self, obs: np.ndarray, mask: np.ndarray, action: int, logp: float,
            value: float) -> None:
        """Record one decision (its reward is 0 until ``end_episode``)."""
        self.obs.append(obs)
        self.mask.append(mask.astype(bool))
        self.action.append(action)
        self.logp.append(logp)
        self.value.append(value)
        self.reward.append(0.0)
        self.done.append(0.0)

    def end_episode(self, reward: float) -> None:
        """Give the episode's terminal reward to its last step."""
        if self.action:
            self.reward[-1] += reward
            self.done[-1] = 1.0


@torch.inference_mode()
def act(model: RowScorer, obs: np.ndarray, mask: np.ndarray, greedy: bool,
        generator: torch.Generator | None = None) -> tuple[int, float, float]:
    """(action, log-probability, value) for one observation: the best legal row when
    ``greedy``, else a sample of the masked softmax."""
    o = torch.as_tensor(obs).unsqueeze(0)
    m = torch.as_tensor(mask.astype(bool)).unsqueeze(0)
    logits, value = model(o, m)
    logp_all = torch.log_softmax(logits, dim=-1)[0]
    if greedy:
        action = int(torch.argmax(logits[0]))
    else:
        action = int(torch.multinomial(logp_all.exp(), 1, generator=generator))
    return action, float(logp_all[action]), float(value[0])


def update(model: RowScorer, optimizer: torch.optim.Optimizer, ro: Rollout, *, gamma: float,
           lam: float, clip: float, ent_coef: float, vf_coef: float, epochs: int,
           minibatches: int, max_grad_norm: float, rng: np.random.Generator) -> dict[str, float]:
    """PPO epochs over the rollout; returns the mean losses of the last epoch."""
    adv, ret = gae(np.array(ro.reward), np.array(ro.value), np.array(ro.done), 0.0, gamma, lam)
    obs = torch.as_tensor(np.stack(ro.obs))
    mask = torch.as_tensor(np.stack(ro.mask))
    actions = torch.as_tensor(ro.action)
    old_logp = torch.as_tensor(ro.logp, dtype=torch.float32)
    adv_t = torch.as_tensor(adv, dtype=torch.float32)
    ret_t = torch.as_tensor(ret, dtype=torch.float32)
    n = len(ro)
    size = max(1, n // minibatches)
    stats: dict[str, list[float]] = {"pg": [], "v": [], "ent": [], "kl": []}
    for _ in range(epochs):
        perm = rng.permutation(n)
        stats = {key: [] for key in stats}
        for start in range(0, n, size):
            idx = torch.as_tensor(perm[start:start + size])
            logits, value = model(obs[idx], mask[idx])
            logp_all = torch.log_softmax(logits, dim=-1)
            logp = logp_all.gather(1, actions[idx].unsqueeze(1)).squeeze(1)
            # Masked rows have probability 0: leave them out of the entropy.
            probs = logp_all.exp()
            entropy = -(probs * torch.where(mask[idx], logp_all, 0.0)).sum(1)
            ratio = (logp - old_logp[idx]).exp()
            a = adv_t[idx]
            if a.numel() > 1:
                a = (a - a.mean()) / (a.std() + 1e-8)
            pg = torch.max(-a * ratio, -a * ratio.clamp(1 - clip, 1 + clip)).mean()
            v_loss = 0.5 * ((value - ret_t[idx]) ** 2).mean()
            loss = pg + vf_coef * v_loss - ent_coef * entropy.mean()
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            optimizer.step()
            with torch.no_grad():
                kl = ((ratio - 1) - (logp - old_logp[idx])).mean()
            stats["pg"].append(pg.item())
            stats["v"].append(v_loss.item())
            stats["ent"].append(entropy.mean().item())
            stats["kl"].append(kl.item())
    return {key: float(np.mean(vals)) for key, vals in stats.items()}


def rank_update(model: RowScorer, optimizer: torch.optim.Optimizer, obs: list[np.ndarray],
                ratios: list[np.ndarray], *, temp: float, epochs: int,
                max_grad_norm: float) -> float:
    """Full-information steps for decisions whose rows' outcomes are all known
    (``ratios``: per decision, each row's makespan over the reference, inf where not
    known): fits the model's softmax over the known rows to softmax(-ratio / ``temp``) by
    cross-entropy, ``epochs`` full-batch steps. Returns the KL divergence (target to model)
    measured at the last step, before its update."""
    o = torch.as_tensor(np.stack(obs))
    r = torch.as_tensor(np.stack(ratios), dtype=torch.float32)
    known = torch.isfinite(r)
    best = torch.where(known, r, torch.inf).min(1, keepdim=True).values
    target = torch.softmax(torch.where(known, -(r - best) / temp, -torch.inf), dim=-1)
    entropy = -(target * torch.where(known, target.clamp_min(1e-30).log(), 0.0)).sum(1)
    kl = torch.zeros(())
    for _ in range(epochs):
        logits, _ = model(o, known)
        logp = torch.log_softmax(logits, dim=-1)
        loss = -(target * torch.where(known, logp, 0.0)).sum(1).mean()
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        kl = loss.detach() - entropy.mean()
    return float(kl)
