"""Which problems each training step draws: seeded draws without replacement, epoch by epoch.

Imports: numpy, core.seeds.
"""

from __future__ import annotations

import numpy as np

from codea1.core.seeds import epoch_order


class ProblemSampler:
    """Seeded draws without replacement: a fresh permutation per epoch, incomplete tails dropped
    (the reference's ``RandomSampler`` with ``drop_last=True``). Its position is checkpointed."""

    def __init__(self, n_problems: int, batch: int, seed: int, shuffle: bool = True) -> None:
        if n_problems < batch:
            raise ValueError(f"data.problems_per_step={batch} exceeds the {n_problems} training problems")
        self.n, self.batch, self.seed, self.shuffle = n_problems, batch, seed, shuffle
        self.epoch, self.pos = 0, 0

    def _order(self) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.n)
        return epoch_order(self.seed, self.epoch, self.n)

    def next(self) -> list[int]:
        """Indices of the next batch of problems."""
        if self.pos + self.batch > self.n:
            self.epoch, self.pos = self.epoch + 1, 0
        out = self._order()[self.pos : self.pos + self.batch]
        self.pos += self.batch
        return [int(i) for i in out]

    def state(self) -> dict[str, int]:
        """Position, for checkpoints."""
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state(self, state: dict[str, int]) -> None:
        """Inverse of :meth:`state`."""
        self.epoch, self.pos = int(state["epoch"]), int(state["pos"])
