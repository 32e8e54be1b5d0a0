"""The vLLM rollout engine: in-process on CPU, vLLM's normal mode on CUDA (``engine.rollout=vllm``).

Only sampling runs in vLLM; the learners stay the transformers engine's (``hf_local``), and the
trainer moves their weights into vLLM after every update. Only ``engine.build`` imports this
package, and vLLM itself is imported only when an engine starts.

Imports: torch, transformers, vllm, config, engine.base, engine.loading, engine.lora, engine.memory.
"""

from codea1.engine.vllm_local.policy import VLLMPolicy, VLLMRollout
from codea1.engine.vllm_local.roles import VLLMStartError, attach_vllm, kv_cache_bytes

__all__ = ["VLLMPolicy", "VLLMRollout", "VLLMStartError", "attach_vllm", "kv_cache_bytes"]
