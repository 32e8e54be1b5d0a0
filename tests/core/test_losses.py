"""PPO-clip loss with dual clip, k3 KL, entropy and aggregation modes (docs/algorithm.md item 18)."""

from __future__ import annotations

import math

import pytest
import torch

from codea1.core.losses import ADDITIVE_STATS, LossNormalizer, aggregate, k3_kl, policy_loss, stats_weighting


def one_token(ratio: float, adv: float, **kw):
    """Loss and d loss / d logp for a single token with the given ratio and advantage."""
    old = torch.zeros(1, 1)
    logp = torch.full((1, 1), math.log(ratio), requires_grad=True)
    loss, stats = policy_loss(logp, old, None, torch.tensor([adv]), torch.ones(1, 1), kl_coef=0.0, **kw)
    loss.backward()
    return loss.item(), logp.grad.item(), stats


@pytest.mark.parametrize(
    "ratio, adv, expected",
    [
        (1.0, 1.0, -1.0),  # inside the trust region: −A·ρ
        (1.1, 1.0, -1.1),
        (1.5, 1.0, -1.28),  # A > 0 clipped at 1 + 0.28
        (0.5, 1.0, -0.5),  # A > 0, ratio below: unclipped (min of objectives)
        (0.5, -1.0, 0.8),  # A < 0 clipped at 1 − 0.2
        (1.5, -1.0, 1.5),  # A < 0, ratio above: unclipped
        (20.0, -1.0, 10.0),  # dual clip bounds it at −A·c
    ],
)
def test_hand_computed_clip_cases(ratio, adv, expected):
    loss, _, _ = one_token(ratio, adv)
    assert loss == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize(
    "ratio, adv, grad_zero",
    [
        (1.0, 1.0, False),
        (1.27, 1.0, False),  # just inside the upper clip
        (1.29, 1.0, True),  # just outside
        (0.81, -1.0, False),  # just inside the lower clip
        (0.79, -1.0, True),
        (9.9, -1.0, False),  # below the dual clip: unclipped, gradient flows
        (10.1, -1.0, True),  # dual clip active
        (0.5, 1.0, False),
    ],
)
def test_gradient_at_clip_boundaries(ratio, adv, grad_zero):
    _, grad, stats = one_token(ratio, adv)
    if grad_zero:
        assert grad == 0.0
    else:
        assert grad == pytest.approx(-adv * ratio, rel=1e-4)  # d(−A·e^{logp})/dlogp
    if ratio in (1.29, 0.79):
        assert stats["loss/clipfrac"] == 1.0
    if ratio == 10.1:
        assert stats["loss/clipfrac_dual"] == 1.0


def test_dual_clip_can_be_disabled():
    loss, grad, _ = one_token(20.0, -1.0, dual_clip=0.0)
    assert loss == pytest.approx(20.0) and grad != 0.0
    with pytest.raises(ValueError):
        one_token(1.0, 1.0, dual_clip=0.5)


def test_kl_zero_for_identical_policies():
    torch.manual_seed(0)
    lp = torch.randn(3, 5)
    mask = torch.ones(3, 5)
    assert k3_kl(lp, lp).abs().max().item() == 0.0
    loss, stats = policy_loss(lp, lp, lp, torch.zeros(3), mask, kl_coef=1.0)
    assert stats["loss/kl"] == 0.0 and loss.item() == 0.0
    assert stats["loss/ratio_min"] == stats["loss/ratio_max"] == 1.0


def test_kl_hand_value_and_clamp():
    lp = torch.tensor([[0.0]])
    ref = torch.tensor([[-1.0]])
    assert k3_kl(lp, ref).item() == pytest.approx(math.exp(-1) + 1 - 1)
    assert k3_kl(torch.tensor([[0.0]]), torch.tensor([[15.0]])).item() == 10.0
    assert policy_loss(lp, lp, ref, torch.zeros(1), torch.ones(1, 1), kl_coef=0.5)[0].item() == pytest.approx(
        0.5 * math.exp(-1)
    )
    with pytest.raises(ValueError):
        policy_loss(lp, lp, None, torch.zeros(1), torch.ones(1, 1), kl_coef=0.1)


def test_aggregation_on_ragged_masks():
    v = torch.tensor([[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 0.0, 0.0], [7.0, 7.0, 7.0, 7.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]])
    assert aggregate(v, mask, "token-mean").item() == pytest.approx((1 + 2 + 3 + 10 + 20) / 5)
    assert aggregate(v, mask, "seq-mean-token-sum").item() == pytest.approx((6 + 30) / 2)
    assert aggregate(v, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 15) / 2)
    assert aggregate(v, torch.zeros_like(mask), "token-mean").item() == 0.0
    with pytest.raises(ValueError):
        aggregate(v, mask, "bogus")  # type: ignore[arg-type]


def test_padding_values_never_leak_into_the_loss():
    lp = torch.tensor([[-1.0, -2.0, 123.0]])
    old = torch.tensor([[-1.1, -2.0, -50.0]])
    mask = torch.tensor([[1, 1, 0]])
    a = policy_loss(lp, old, lp, torch.tensor([1.0]), mask)[0]
    b = policy_loss(lp.clone().index_fill_(1, torch.tensor([2]), 0.0), old, lp, torch.tensor([1.0]), mask)[0]
    assert a.item() == b.item()


def test_entropy_bonus_lowers_loss():
    lp = torch.zeros(2, 3)
    ent = torch.full((2, 3), 2.0)
    base = policy_loss(lp, lp, lp, torch.zeros(2), torch.ones(2, 3), ent)[0]
    bonus, stats = policy_loss(lp, lp, lp, torch.zeros(2), torch.ones(2, 3), ent, entropy_coef=0.1)
    assert bonus.item() == pytest.approx(base.item() - 0.2) and stats["loss/entropy"] == 2.0


def test_loss_decreases_with_advantage_and_token_advantages_broadcast():
    torch.manual_seed(1)
    lp, old = torch.randn(2, 4), torch.randn(2, 4)
    mask = torch.ones(2, 4)
    losses = [
        policy_loss(lp, old, lp, torch.full((2,), a), mask)[0].item() for a in (-2.0, -0.5, 0.0, 0.5, 2.0)
    ]
    assert all(x > y for x, y in zip(losses, losses[1:], strict=False))
    per_seq = policy_loss(lp, old, lp, torch.tensor([0.3, -0.7]), mask)[0]
    per_tok = policy_loss(lp, old, lp, torch.tensor([[0.3] * 4, [-0.7] * 4]), mask)[0]
    assert per_seq.item() == pytest.approx(per_tok.item())


def test_bf16_inputs_are_upcast():
    lp = torch.zeros(1, 2, dtype=torch.bfloat16, requires_grad=True)
    loss, _ = policy_loss(lp, lp.detach(), lp.detach(), torch.tensor([1.0]), torch.ones(1, 2))
    assert loss.dtype == torch.float32
    loss.backward()
    assert lp.grad is not None


MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")


def test_normalizer_counts_tokens_and_nonempty_sequences():
    mask = torch.tensor([[1, 1, 1, 0], [0, 0, 0, 0], [1, 0, 0, 0]])
    n = LossNormalizer.of_mask(mask)
    assert n == LossNormalizer.of_lengths([3, 0, 1]) == LossNormalizer(tokens=4, sequences=2)
    assert n + LossNormalizer.of_lengths([2]) == LossNormalizer(tokens=6, sequences=3)
    assert n.denominator("token-mean") == 4.0 and n.denominator("seq-mean-token-mean") == 2.0
    assert LossNormalizer(0, 0).denominator("seq-mean-token-sum") == 1.0  # empty batch: loss 0
    with pytest.raises(ValueError):
        n.denominator("bogus")  # type: ignore[arg-type]


def _ragged_batch(seed: int = 3):
    """Eight responses of lengths 0..6 (one empty), random log-probs, ref, entropy and advantages."""
    g = torch.Generator().manual_seed(seed)
    lengths = [5, 0, 2, 6, 1, 3, 6, 4]
    mask = torch.zeros(len(lengths), max(lengths))
    for i, n in enumerate(lengths):
        mask[i, :n] = 1.0
    lp = torch.randn(mask.shape, generator=g) * 0.3 - 1.0
    old = lp + torch.randn(mask.shape, generator=g) * 0.3  # ratios spread over both clips
    ref = lp + torch.randn(mask.shape, generator=g) * 0.2
    ent = torch.rand(mask.shape, generator=g) * 2.0
    adv = torch.randn(len(lengths), generator=g)
    return lp, old, ref, adv, mask, ent


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cuts", [(1,) * 8, (3, 5), (2, 2, 2, 2), (1, 6, 1)])
def test_slices_with_the_global_normalizer_add_up_to_the_whole_batch(mode, cuts):
    lp, old, ref, adv, mask, ent = _ragged_batch()
    kw = {"aggregation": mode, "kl_coef": 0.1, "entropy_coef": 0.01}
    whole_lp = lp.clone().requires_grad_(True)
    whole, whole_stats = policy_loss(whole_lp, old, ref, adv, mask, ent, **kw)
    whole.backward()

    normalizer = LossNormalizer.of_mask(mask)
    sliced_lp = lp.clone().requires_grad_(True)
    total, stats_sum, lo = torch.zeros(()), dict.fromkeys(ADDITIVE_STATS, 0.0), 0
    for size in cuts:
        s = slice(lo, lo + size)
        loss, stats = policy_loss(
            sliced_lp[s], old[s], ref[s], adv[s], mask[s], ent[s], normalizer=normalizer, **kw
        )
        total = total + loss
        for k in ADDITIVE_STATS:
            stats_sum[k] += stats[k]
        lo += size
    total.backward()
    assert total.item() == pytest.approx(whole.item(), abs=1e-6)
    assert torch.allclose(sliced_lp.grad, whole_lp.grad, atol=1e-7, rtol=0)
    for k in ADDITIVE_STATS:
        assert stats_sum[k] == pytest.approx(whole_stats[k], abs=1e-6)


def test_slices_stats_are_weighted_by_tokens_only_under_token_mean() -> None:
    assert stats_weighting("token-mean") == "tokens"
    assert stats_weighting("seq-mean-token-sum") == stats_weighting("seq-mean-token-mean") == "sequences"
