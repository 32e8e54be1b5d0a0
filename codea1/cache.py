"""Where codea1 keeps what it computes once per machine.

One root, ``$CODEA1_CACHE`` (default ``~/.cache/codea1``), with one directory per kind under it:
``models/`` (GGUF checkpoints dequantised for transformers) and ``eval/`` (reference timings of
each benchmark). Deleting any of it only costs the time to compute it again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

CACHE_ENV = "CODEA1_CACHE"

CacheKind = Literal["models", "eval"]


def cache_root() -> Path:
    """``$CODEA1_CACHE``, or ``~/.cache/codea1`` when it is unset or empty."""
    root = os.environ.get(CACHE_ENV, "").strip()
    return Path(root).expanduser() if root else Path.home() / ".cache" / "codea1"


def cache_dir(kind: CacheKind) -> Path:
    """The directory of one kind of cached data: ``<cache root>/<kind>``."""
    return cache_root() / kind
