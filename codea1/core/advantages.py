"""Group-relative (GRPO) advantages (docs/algorithm.md, step 11 and item 17).

``A_i = (r_i − mean_g) / (std_g + eps)`` over the samples of group g. As in verl's
``compute_grpo_outcome_advantage``, std is the **unbiased** (Bessel-corrected, n − 1) sample std.
Deliberate differences, all documented in docs/algorithm.md:

- a group of size 1 gets advantage 0 (verl uses mean 0, std 1, i.e. A = r: a lone sample would be
  pushed by its raw reward, with no baseline);
- a group whose rewards are all equal gets exactly 0 (not a rounding residue divided by eps), and
  such groups are counted, since they carry no learning signal;
- ``norm_by_std=False`` only centres the rewards (Dr.GRPO style).

Rewards are read in float64 and advantages returned in float32 (never bf16, docs/algorithm.md bug R9).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class AdvantageStats:
    """What the normalisation saw: group counts and the spread of the result."""

    n_groups: int
    n_singleton_groups: int
    n_zero_variance_groups: int
    """Groups of size ≥ 2 whose rewards are all equal (advantage 0 for every member)."""
    adv_mean: float
    adv_abs_max: float

    def to_dict(self) -> dict[str, float]:
        """Metric form (floats)."""
        return {k: float(v) for k, v in asdict(self).items()}


def _group_index(group_ids: Sequence[Hashable] | torch.Tensor, n: int) -> torch.Tensor:
    """Dense group index per sample, 0..G−1 in order of first appearance."""
    ids = group_ids.tolist() if isinstance(group_ids, torch.Tensor) else list(group_ids)
    if len(ids) != n:
        raise ValueError(f"{len(ids)} group ids for {n} rewards")
    first: dict[Hashable, int] = {}
    return torch.tensor([first.setdefault(g, len(first)) for g in ids], dtype=torch.long)


def group_advantages(
    rewards: torch.Tensor | Sequence[float],
    group_ids: Sequence[Hashable] | torch.Tensor,
    *,
    norm_by_std: bool = True,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, AdvantageStats]:
    """Per-sample advantages ``[n]`` (float32) from scalar rewards ``[n]`` and their group ids."""
    r = torch.as_tensor(rewards, dtype=torch.float64).reshape(-1)
    n = r.numel()
    idx = _group_index(group_ids, n)
    n_groups = int(idx.max()) + 1 if n else 0
    count = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, idx, torch.ones(n, dtype=torch.float64))
    mean = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, idx, r) / count.clamp(min=1)
    centred = r - mean[idx]
    sq = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, idx, centred * centred)
    std = torch.sqrt(sq / (count - 1).clamp(min=1))
    # All-equal groups: max == min exactly (no tolerance), so the advantage is 0, not residue / eps.
    gmax = torch.zeros(n_groups, dtype=torch.float64).scatter_reduce(0, idx, r, "amax", include_self=False)
    gmin = torch.zeros(n_groups, dtype=torch.float64).scatter_reduce(0, idx, r, "amin", include_self=False)
    all_equal = gmax == gmin
    dead = all_equal | (count < 2)
    adv = centred / (std[idx] + eps) if norm_by_std else centred
    adv = torch.where(dead[idx], torch.zeros_like(adv), adv).to(torch.float32)
    stats = AdvantageStats(
        n_groups=n_groups,
        n_singleton_groups=int((count == 1).sum()),
        n_zero_variance_groups=int((all_equal & (count >= 2)).sum()),
        adv_mean=float(adv.mean()) if n else 0.0,
        adv_abs_max=float(adv.abs().max()) if n else 0.0,
    )
    return adv, stats
