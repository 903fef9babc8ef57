"""The shared scorer: one MLP embeds every candidate row, a linear head scores it, and the
value comes from the pooled embeddings of the legal rows.

Rows are candidates (trees for the upper level, transfers for the lower one), so the
network is the same size on every topology and ranks any number of candidates.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

#: Logit given to masked rows.
MASKED_LOGIT = -1e9


def _layer(n_in: int, n_out: int, std: float = 2 ** 0.5) -> nn.Linear:
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, std)
    nn.init.zeros_(layer.bias)
    return layer


class RowScorer(nn.Module):
    """Actor-critic over a set of feature rows: (B, K, F) rows and a (B, K) bool mask give
    (B, K) masked logits and a (B,) value.

    ``prior`` (K fixed logits, default 0) and ``-rank_strength x obs[..., rank_col]`` are
    added to the learned scores: a policy that starts near a known rule and learns
    corrections to it (the lower level's rows come sorted oldest-ready first, and a prior
    falling with the row index starts it near the FIFO round filler; the upper level's
    rows carry their rank under a hand rule in ``rank_col``: ``agent.env.RANK_COL``)."""

    def __init__(self, n_features: int, hidden: int = 64, rows: int = 1,
                 prior: torch.Tensor | None = None, rank_col: int = -1,
                 rank_strength: float = 0.0) -> None:
        super().__init__()
        self.n_features = n_features
        self.hidden = hidden
        self.rank_col = rank_col
        self.rank_strength = rank_strength
        self.register_buffer("prior", torch.zeros(rows) if prior is None
                             else prior.float().clone())
        self.embed = nn.Sequential(_layer(n_features, hidden), nn.Tanh(),
                                   _layer(hidden, hidden), nn.Tanh())
        self.score = _layer(hidden, 1, std=0.01)
        self.value = nn.Sequential(_layer(2 * hidden, hidden), nn.Tanh(),
                                   _layer(hidden, 1, std=1.0))

    def forward(self, obs: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Masked logits and value of a batch of observations."""
        h = self.embed(obs)
        logits = self.score(h).squeeze(-1) + self.prior
        if self.rank_strength:
            logits = logits - self.rank_strength * obs[..., self.rank_col]
        logits = logits.masked_fill(~mask, MASKED_LOGIT)
        weight = mask.unsqueeze(-1).float()
        count = weight.sum(1).clamp(min=1.0)
        mean = (h * weight).sum(1) / count
        top = h.masked_fill(~mask.unsqueeze(-1), -1.0).max(1).values
        value = self.value(torch.cat([mean, top], dim=-1)).squeeze(-1)
        return logits, value


def fifo_prior(slots: int, strength: float) -> torch.Tensor:
    """Prior logits of the lower level: -strength x row index for the transfer rows, and
    -strength x 2 for the final "end the round" row."""
    prior = -strength * torch.arange(slots + 1, dtype=torch.float32)
    prior[slots] = -2.0 * strength
    return prior


class GreedyScorer:
    """The argmax of a RowScorer's masked logits in numpy (float32), for deterministic
    rollouts without recording: the same computation as ``RowScorer.forward`` without
    torch's per-call overhead. Built from the model's weights at construction."""

    def __init__(self, model: RowScorer) -> None:
        with torch.no_grad():
            first, second = model.embed[0], model.embed[2]
            self.w1 = first.weight.numpy().T.copy()
            self.b1 = first.bias.numpy().copy()
            self.w2 = second.weight.numpy().T.copy()
            self.b2 = second.bias.numpy().copy()
            self.w3 = model.score.weight.numpy()[0].copy()
            self.b3 = float(model.score.bias.numpy()[0])
            self.prior = model.prior.numpy().copy()
        self.rank_col = model.rank_col
        self.rank_strength = np.float32(model.rank_strength)

    def __call__(self, obs: np.ndarray, mask: np.ndarray) -> int:
        """The best legal row."""
        h = np.tanh(np.tanh(obs @ self.w1 + self.b1) @ self.w2 + self.b2)
        logits = h @ self.w3 + self.b3 + self.prior
        if self.rank_strength:
            logits = logits - self.rank_strength * obs[:, self.rank_col]
        return int(np.argmax(np.where(mask.astype(bool), logits, MASKED_LOGIT)))
