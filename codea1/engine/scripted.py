"""Deterministic FAKE engine for unit tests and dry runs: no model, canned completions.

``ScriptedPolicy`` answers each prompt from a script (a callable ``(prompt, sample_index) -> text``
or a list cycled in call order); token ids are the UTF-8 bytes of the text and every token has the
same fixed log-prob. ``ScriptedLearner`` holds one tiny torch parameter, a per-byte logit table, so
``train_step`` really runs the supplied ``loss_fn`` and AdamW really moves something,
deterministically. Neither says anything about model quality; they exist to exercise the loop.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from codea1.engine.base import Completion, LossFn, SamplingParams, TrainBatch

Script = Callable[[str, int], str] | Sequence[str]
"""A function of (prompt text, sample index within the prompt) → completion text, or a list of texts."""

FAKE_LOGPROB = -1.0
"""Log-prob reported by :class:`ScriptedPolicy` for every token."""


def byte_ids(text: str) -> tuple[int, ...]:
    """Fake tokenization: the UTF-8 bytes of ``text``."""
    return tuple(text.encode("utf-8"))


class ScriptedPolicy:
    """A fake :class:`~codea1.engine.base.Policy` returning scripted completions (for tests)."""

    name = "scripted"

    def __init__(self, script: Script, eos: str = "") -> None:
        self.script = script
        self.eos = eos
        self.calls = 0
        self.weight_loads = 0
        self._cursor = 0
        self.last_stats: dict[str, float] = {}

    def render(self, messages: Sequence[dict[str, str]]) -> str:
        """A readable ChatML-like rendering ending with the assistant turn opener."""
        body = "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages)
        return body + "<|assistant|>\n"

    def count_tokens(self, text: str) -> int:
        """Number of UTF-8 bytes."""
        return len(byte_ids(text))

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Count the load (the script ignores weights)."""
        self.weight_loads += 1

    def load_adapter(self, role: str, weights: Mapping[str, torch.Tensor]) -> None:
        """Count the load (the script ignores weights)."""
        self.weight_loads += 1

    def _next(self, prompt: str, j: int) -> str:
        if callable(self.script):
            return self.script(prompt, j)
        if not self.script:
            raise ValueError("ScriptedPolicy has an empty script")
        text = self.script[self._cursor % len(self.script)]
        self._cursor += 1
        return text

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[Completion]:
        """``params.n`` scripted completions per prompt, prompt-major, truncated to ``max_new_tokens``."""
        self.calls += 1
        out = []
        for i, prompt in enumerate(prompts):
            for j in range(params.n):
                ids = byte_ids(self._next(prompt, j) + self.eos)
                finished = len(ids) <= params.max_new_tokens
                ids = ids[: params.max_new_tokens]
                out.append(
                    Completion(
                        prompt_index=i,
                        text=bytes(ids).decode("utf-8", errors="ignore"),
                        prompt_ids=byte_ids(prompt),
                        completion_ids=ids,
                        logprobs=(FAKE_LOGPROB,) * len(ids),
                        finished=finished,
                    )
                )
        new = sum(len(c.completion_ids) for c in out)
        self.last_stats = {"sequences": float(len(out)), "new_tokens": float(new), "seconds": 0.0}
        return out


class ScriptedLearner:
    """A fake :class:`~codea1.engine.base.Learner`: log-probs from a learnable 256-entry byte table.

    ``logprobs[t] = log_softmax(table)[byte_t]`` (the prompt is ignored); the reference is the
    table at construction. ``train_step`` runs ``loss_fn`` on these and takes one AdamW step.
    """

    def __init__(self, lr: float = 0.1, seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.table = torch.nn.Parameter(torch.randn(256, generator=gen) * 0.01)
        self.reference = self.table.detach().clone()
        self.optimizer = torch.optim.AdamW([self.table], lr=lr, weight_decay=0.0)
        self.steps = 0
        self.adapter: str | None = None
        self.last_stats: dict[str, float] = {}

    def _logprobs(
        self, table: torch.Tensor, comps: Sequence[Sequence[int]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        width = max([len(c) for c in comps] + [1])
        ids = torch.zeros((len(comps), width), dtype=torch.long)
        mask = torch.zeros((len(comps), width))
        for i, c in enumerate(comps):
            ids[i, : len(c)] = torch.tensor(list(c), dtype=torch.long)
            mask[i, : len(c)] = 1.0
        return torch.log_softmax(table, dim=0)[ids] * mask, mask

    def logprobs(self, batch: TrainBatch, reference: bool = False) -> list[tuple[float, ...]]:
        """Per-token log-probs of each completion under the table (or the initial table)."""
        with torch.no_grad():
            lp, _ = self._logprobs(self.reference if reference else self.table, batch.completion_ids)
        return [tuple(lp[i, : len(c)].tolist()) for i, c in enumerate(batch.completion_ids)]

    def train_step(self, batch: TrainBatch, loss_fn: LossFn) -> dict[str, float]:
        """Run ``loss_fn`` over the whole batch and take one AdamW step."""
        lp, mask = self._logprobs(self.table, batch.completion_ids)
        old = batch.old_logprobs if batch.old_logprobs is not None else self.logprobs(batch)
        width = lp.shape[1]

        def pad(rows: Sequence[Sequence[float]]) -> torch.Tensor:
            t = torch.zeros((len(rows), width))
            for i, r in enumerate(rows):
                t[i, : len(r)] = torch.tensor(list(r), dtype=torch.float32)
            return t

        ref = None if batch.ref_logprobs is None else pad(batch.ref_logprobs)
        self.optimizer.zero_grad(set_to_none=True)
        loss, stats = loss_fn(
            lp, pad(old), ref, torch.tensor(batch.advantages, dtype=torch.float32), mask, None
        )
        loss.backward()
        grad_norm = float(self.table.grad.norm()) if self.table.grad is not None else 0.0
        self.optimizer.step()
        self.steps += 1
        lr = self.optimizer.param_groups[0]["lr"]
        self.last_stats = {
            **{k: float(v) for k, v in stats.items()},
            "loss": float(loss.detach()),
            "grad_norm": grad_norm,
            "lr": lr,
        }
        return self.last_stats

    def named_weights(self) -> dict[str, torch.Tensor]:
        """The byte table (detached, not copied)."""
        return {"table": self.table.detach()}

    def save(self, path: Path) -> None:
        """Write the table and optimizer state under ``path`` (atomically per file)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        tmp = path / f".weights.{os.getpid()}.tmp"
        save_file({"table": self.table.detach().clone(), "reference": self.reference}, str(tmp))
        tmp.replace(path / "weights.safetensors")
        tmp = path / f".optimizer.{os.getpid()}.tmp"
        torch.save({"optimizer": self.optimizer.state_dict(), "steps": self.steps}, tmp)
        tmp.replace(path / "optimizer.pt")

    def load(self, path: Path) -> None:
        """Restore what :meth:`save` wrote."""
        path = Path(path)
        tensors = load_file(str(path / "weights.safetensors"))
        with torch.no_grad():
            self.table.copy_(tensors["table"])
        self.reference = tensors["reference"]
        state = torch.load(path / "optimizer.pt", weights_only=True)
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps = int(state["steps"])
