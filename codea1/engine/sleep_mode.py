"""vLLM's sleep mode for an engine that shares its GPU with learners (CUDA only).

An engine started with ``enable_sleep_mode=True`` keeps its weights, KV cache and runtime buffers in
vLLM's CuMem pool. :class:`EngineSleep` drives it through vLLM's own calls, in the order verl's
sharding manager uses them:

* :meth:`~EngineSleep.sleep` before a learner computes: ``LLM.sleep(level=1)`` backs the weights up
  in host memory, discards the KV cache and empties torch's cache, leaving the GPU to the learner
  (what stays, outside the pool, is ``memory.ENGINE_FIXED_GIB``);
* :meth:`~EngineSleep.wake_weights` before a weight sync: ``wake_up(tags=["weights"])`` (the KV cache
  stays released while the new weights arrive);
* :meth:`~EngineSleep.wake_kv_cache` after it, and :meth:`~EngineSleep.wake` before sampling:
  ``wake_up(tags=["kv_cache"])``.

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


class EngineSleep:
    """The sleep state of one vLLM engine: ``awake`` (as started), ``asleep`` or ``weights`` (weights
    back, KV cache still released). ``calls`` counts the vLLM calls made (``sleep``,
    ``wake_weights``, ``wake_kv_cache``)."""

    def __init__(self, llm: Any, *, enabled: bool) -> None:
        self.llm = llm
        self.enabled = enabled
        self.state = AWAKE
        self.before_wake: list[Callable[[], None]] = []
        self.calls: dict[str, int] = {"sleep": 0, "wake_weights": 0, "wake_kv_cache": 0}

    def sleep(self) -> None:
        """Free the GPU for a learner: weights to host memory, KV cache discarded (level 1)."""
        if self.enabled and self.state != ASLEEP:
            self.llm.sleep(level=1)
            self.state = ASLEEP
            self.calls["sleep"] += 1

    def wake_weights(self) -> None:
        """Bring the weights back (before a weight sync), the KV cache still released."""
        if self.enabled and self.state == ASLEEP:
            for hook in self.before_wake:
                hook()
            self.llm.wake_up(tags=["weights"])
            self.state = WEIGHTS
            self.calls["wake_weights"] += 1

    def wake_kv_cache(self) -> None:
        """Take the KV cache's memory back (after a weight sync, before sampling)."""
        if self.enabled and self.state == WEIGHTS:
            self.llm.wake_up(tags=["kv_cache"])
            self.state = AWAKE
            self.calls["wake_kv_cache"] += 1

    def wake(self) -> None:
        """Fully awake, ready to sample: the weights, then the KV cache."""
        self.wake_weights()
        self.wake_kv_cache()
