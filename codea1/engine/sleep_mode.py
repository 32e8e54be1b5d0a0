"""vLLM's sleep mode for an engine that shares its GPU with learners (CUDA only).

An engine started with ``enable_sleep_mode=True`` keeps its weights, KV cache and runtime buffers in
vLLM's CuMem pool. :class:`EngineSleep` drives it through vLLM's own calls, in the order verl's
sharding manager uses them:

* :meth:`~EngineSleep.sleep` before a learner computes: ``LLM.sleep(level)`` discards the KV cache
  and empties torch's cache, leaving the GPU to the learner (what stays, outside the pool, is
  ``memory.ENGINE_FIXED_GIB``); the weights are backed up in pinned host memory at level 1 and
  discarded at level 2 (:func:`sleep_level`);
* :meth:`~EngineSleep.wake_weights` before a weight sync: ``wake_up(tags=["weights"])`` (the KV cache
  stays released while the new weights arrive);
* :meth:`~EngineSleep.wake_kv_cache` after it, and :meth:`~EngineSleep.wake` before sampling:
  ``wake_up(tags=["kv_cache"])``.

**The level follows the kind of sync** (:func:`sleep_level`). In ``separate`` mode every sync
overwrites every weight, so level 2: nothing is copied to the host and back each step (at 7B a
level-1 engine pins ~15 GB of host memory and copies it both ways every step). In ``adapters`` mode
a sync writes only the adapted projections, so level 1 keeps the rest. An engine woken at level 2
holds undefined weights until a sync: :meth:`~EngineSleep.wake` before one raises rather than
sample from them.

Each call is made only when it changes something, so callers may ask twice. An engine that cannot
sleep (on a CPU, where vLLM has no sleep mode, or alone on its GPU) gets ``enabled`` False and every
call is a no-op. ``before_wake`` hooks run before any part of the engine wakes: the Ray backend moves
the colocated learner ranks off the GPU there.

Imports: nothing of codea1 (the engine object is vLLM's ``LLM``, or a fake with its two methods).

It lives beside the engines rather than in ``vllm_local``: the local backend and the Ray replicas use it
through ``vllm_local.policy``, and its tests need no vLLM.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ASLEEP, WEIGHTS, AWAKE = "asleep", "weights", "awake"


def sleep_level(*, full_syncs: bool) -> int:
    """vLLM's sleep level for an engine whose every sync writes all its weights (``full_syncs``:
    ``separate`` mode) — 2, weights discarded — or only some of them (``adapters`` mode) — 1,
    weights backed up in host memory."""
    return 2 if full_syncs else 1


class EngineSleep:
    """The sleep state of one vLLM engine: ``awake`` (as started), ``asleep`` or ``weights`` (weights
    back, KV cache still released). ``level`` is vLLM's sleep level (:func:`sleep_level`);
    ``stale`` is True from a level-2 wake of the weights until :meth:`loaded` says a sync wrote
    them. ``calls`` counts the vLLM calls made (``sleep``, ``wake_weights``, ``wake_kv_cache``)."""

    def __init__(self, llm: Any, *, enabled: bool, level: int = 1) -> None:
        if level not in (1, 2):
            raise ValueError(f"vLLM's sleep level is 1 or 2, got {level}")
        self.llm = llm
        self.enabled = enabled
        self.level = level
        self.stale = False
        self.state = AWAKE
        self.before_wake: list[Callable[[], None]] = []
        self.calls: dict[str, int] = {"sleep": 0, "wake_weights": 0, "wake_kv_cache": 0}

    def sleep(self) -> None:
        """Free the GPU for a learner: KV cache discarded, weights to host memory (level 1) or
        discarded (level 2)."""
        if self.enabled and self.state != ASLEEP:
            self.llm.sleep(level=self.level)
            self.state = ASLEEP
            self.calls["sleep"] += 1

    def wake_weights(self) -> None:
        """Bring the weights' memory back (before a weight sync), the KV cache still released; at
        level 2 its contents are undefined until the sync (``stale``)."""
        if self.enabled and self.state == ASLEEP:
            for hook in self.before_wake:
                hook()
            self.llm.wake_up(tags=["weights"])
            self.state = WEIGHTS
            self.stale = self.level == 2
            self.calls["wake_weights"] += 1

    def loaded(self) -> None:
        """A sync wrote every weight of the engine (a level-2 wake's weights are defined again)."""
        self.stale = False

    def wake_kv_cache(self) -> None:
        """Take the KV cache's memory back (after a weight sync, before sampling)."""
        if self.enabled and self.state == WEIGHTS:
            self.llm.wake_up(tags=["kv_cache"])
            self.state = AWAKE
            self.calls["wake_kv_cache"] += 1

    def wake(self) -> None:
        """Fully awake, ready to sample: the weights, then the KV cache. After a level-2 sleep the
        weights must have been synced since (``RuntimeError`` otherwise: vLLM discarded them)."""
        self.wake_weights()
        if self.stale:
            raise RuntimeError(
                "a vLLM engine slept at level 2 (its weights discarded) was woken to sample before a "
                "weight sync wrote them"
            )
        self.wake_kv_cache()
