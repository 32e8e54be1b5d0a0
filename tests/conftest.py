"""Skip ``gpu``-marked tests where no CUDA device is present (they run on GPU machines only); mark
``slow`` tests by place; give Ctrl-C tests Python's own SIGINT handler."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """Python's own Ctrl-C handler for the test, put back as it was afterwards. A process started in
    the background by a shell (``cmd &``) begins with SIGINT ignored, and then neither a real SIGINT
    nor ``_thread.interrupt_main`` raises ``KeyboardInterrupt``."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``slow`` by place (:func:`_mark_slow_by_place`); skip every ``gpu`` test when torch sees no
    CUDA device."""
    _mark_slow_by_place(items)
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in gpu_items:
        item.add_marker(skip)


SLOW_BY_NAME = ("vllm",)
"""Test files whose name holds one of these (the vLLM engine) are ``slow``."""
SLOW_BY_IMPORT = ("ray", "require_demo_model", "make_tiny_model")
"""Test modules that hold one of these names (they start a Ray cluster, or load a real or tiny
random model) are ``slow``."""


def _mark_slow_by_place(items: list[pytest.Item]) -> None:
    """Mark ``slow`` what starts Ray or vLLM or loads a model, so none slips into the fast set."""
    for item in items:
        module = getattr(item, "module", None)
        names = vars(module) if module is not None else {}
        if any(w in item.path.name for w in SLOW_BY_NAME) or any(n in names for n in SLOW_BY_IMPORT):
            item.add_marker(pytest.mark.slow)
