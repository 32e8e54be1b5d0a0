"""BigCodeBench adapter (the paper's protocol: docs/algorithm.md, "The paper's configuration"): our
policy writes the samples, the ``bigcodebench`` package scores them.

Needs the optional ``bigcodebench`` package (``pip install bigcodebench``) and its data (downloaded
from the Hugging Face hub on first use), plus the package's heavy execution environment. The paper's
settings: split ``complete``, subset ``full``, n = 32, temperature 0.7, ``--pass_k 1,8,16,32``.
Everything here is guarded: without the package, :func:`require_bigcodebench` raises
:class:`BigCodeBenchUnavailable` with the install command. Not exercised by the test suite.
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from codea1.engine.base import Policy, SamplingParams
from codea1.results_file import write_text_atomic

BCB_SYSTEM = "You are a helpful code completion assistant."
BCB_USER = (
    "Complete the following function. Output the complete function, including its imports, in one "
    "```python block and nothing else.\n\n{prompt}"
)


class BigCodeBenchUnavailable(RuntimeError):
    """The ``bigcodebench`` package (or its data) cannot be used on this machine."""


def require_bigcodebench() -> ModuleType:
    """Import ``bigcodebench.data`` or raise :class:`BigCodeBenchUnavailable` saying how to install it."""
    try:
        return importlib.import_module("bigcodebench.data")
    except ImportError as e:
        raise BigCodeBenchUnavailable(
            f"BigCodeBench needs the optional package: pip install bigcodebench ({e})"
        ) from None


def load_tasks(split: str = "complete", subset: str = "full") -> dict[str, dict[str, Any]]:
    """BigCodeBench tasks (task id → task dict with ``complete_prompt``/``instruct_prompt``)."""
    data = require_bigcodebench()
    try:
        return dict(data.get_bigcodebench(subset=subset))
    except Exception as e:  # network or hub errors surface here
        raise BigCodeBenchUnavailable(f"cannot load BigCodeBench {split}/{subset}: {e}") from None


def generate_samples(
    policy: Policy, tasks: dict[str, dict[str, Any]], params: SamplingParams, split: str, out: Path
) -> Path:
    """Sample ``params.n`` solutions per task and write them as ``{"task_id", "solution"}`` JSONL."""
    from codea1.data.parsing import extract_code

    ids: Sequence[str] = list(tasks)
    key = "complete_prompt" if split == "complete" else "instruct_prompt"
    prompts = [
        policy.render(
            [
                {"role": "system", "content": BCB_SYSTEM},
                {"role": "user", "content": BCB_USER.format(prompt=tasks[t][key])},
            ]
        )
        for t in ids
    ]
    lines = []
    for c in policy.generate(prompts, params):
        task = tasks[ids[c.prompt_index]]
        code = extract_code(c.text, task.get("entry_point", "task_func")).code or c.text
        lines.append(json.dumps({"task_id": ids[c.prompt_index], "solution": code}))
    write_text_atomic(out, "\n".join(lines) + "\n")
    return out


def evaluate_samples(
    samples: Path, split: str = "complete", subset: str = "full", pass_k: str = "1,8,16,32"
) -> int:
    """Run ``bigcodebench.evaluate`` locally on ``samples``; returns its exit code (results land
    beside the samples file, in the package's own format)."""
    require_bigcodebench()
    exe = shutil.which("bigcodebench.evaluate")
    cmd = [exe] if exe else [sys.executable, "-m", "bigcodebench.evaluate"]
    cmd += ["--split", split, "--subset", subset, "--samples", str(samples)]
    cmd += ["--execution", "local", "--pass_k", pass_k]
    return subprocess.run(cmd, check=False).returncode
