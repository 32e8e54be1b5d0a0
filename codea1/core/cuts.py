"""Where a batch of sequences is cut into consecutive pieces (pure): the one home of every cut rule.

* :func:`even_cuts`, ``parts`` pieces of near-equal size: the trainer's mini-batches (one optimizer
  step each) and the Ray backend's shares (a learner rank's part of a batch, a rollout replica's
  part of the prompts) are cut by it.
* :func:`count_cuts` and :func:`token_cuts`, pieces of at most so many sequences or padded tokens:
  the learner's micro-batches (one forward/backward pass each). These cap a piece's size instead of
  fixing the number of pieces, so they are rules of their own: cutting micro-batches evenly would
  move the cut points (and the floating-point sums) of every batch that is not a multiple of
  ``micro_batch_size``. Where the counts agree (``count`` a multiple of ``parts``, ``micro`` the
  quotient), every rule cuts at the same points.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def even_cuts(count: int, parts: int) -> list[range]:
    """``parts`` consecutive ranges covering ``range(count)`` in order, sizes differing by at most one:
    piece ``i`` starts at ``round(i * count / parts)`` (numpy's rounding, half to even), so a piece
    may be empty when ``count < parts``."""
    if parts < 1:
        raise ValueError(f"a batch is cut into at least one piece, got {parts}")
    bounds = np.linspace(0, count, parts + 1).round().astype(int).tolist()
    return [range(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]


def count_cuts(size: int, micro: int) -> list[range]:
    """Index ranges of ``micro`` consecutive sequences each (the last may be shorter)."""
    return [range(lo, min(lo + micro, size)) for lo in range(0, size, micro)]


def token_cuts(lengths: Sequence[int], budget: int) -> list[range]:
    """Consecutive index ranges over sequences of ``lengths`` tokens (prompt + completion), cut
    greedily in order so that each range's padded size, its sequence count × its longest sequence,
    stays within ``budget`` tokens; a sequence longer than ``budget`` is alone in its range.

    The padded size bounds what the learner builds: one right-padded row per sequence, or shared
    prompt rows, which it uses only when they take no more positions (``logprobs.sharing_pays``).
    """
    if budget < 1:
        raise ValueError(f"a token budget must be >= 1, got {budget}")
    cuts: list[range] = []
    start = longest = 0
    for i, length in enumerate(lengths):
        widest = max(longest, length)
        if i > start and (i + 1 - start) * widest > budget:
            cuts.append(range(start, i))
            start, widest = i, length
        longest = widest
    if len(lengths) > start:
        cuts.append(range(start, len(lengths)))
    return cuts
