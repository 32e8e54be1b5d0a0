"""Export one role of a training checkpoint as a standard Hugging Face model directory.

``RUN_DIR/checkpoints/step_N/coder`` (or ``tester``) holds only what training needs to resume: the
trainable tensors and the optimizer state, next to the run's ``config.yaml`` that names the base
model. :func:`export_checkpoint` turns it into a directory that ``transformers`` and vLLM load as it
is, with no codea1 installed:

- **merged** (the default): ``config.json``, ``generation_config.json``, ``model.safetensors`` and
  the tokenizer files with the chat template. A LoRA adapter (``engine.mode=adapters``) is merged
  into the base weights in float32 before the export dtype is applied;
- **adapter** (``adapter=True``, adapters runs only): a PEFT adapter directory,
  ``adapter_config.json`` + ``adapter_model.safetensors`` + the tokenizer. Its
  ``base_model_name_or_path`` names the base, so the base must be loadable by name: a hub id or a
  model directory (an absolute path), not a GGUF file.

Every argument is checked by :func:`plan_export` before anything is loaded or written. The output is
written to a temporary directory beside ``OUT`` and renamed at the end, so a failure leaves nothing
behind. :func:`push_to_hub` uploads a finished export through ``huggingface_hub``.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import shutil
import struct
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from codea1.config import ConfigError, EngineConfig, load_config
from codea1.engine.hf_local.learner import WEIGHTS_FILE

RUN_CONFIG = "config.yaml"
"""The resolved run configuration beside the role directories of a checkpoint."""
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
MODEL_MARKERS = ("config.json", ADAPTER_CONFIG)
"""Files that make a directory a model export (the only kind ``force`` may replace)."""
DTYPES = ("auto", "float32", "bfloat16", "float16")
_SAFETENSORS_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}
_HEADER_LIMIT = 100 << 20


class ExportError(ValueError):
    """The export cannot be done as asked; the message (one line) says why."""


@dataclass(frozen=True)
class ExportPlan:
    """A checked export request (see :func:`plan_export`)."""

    role_dir: Path
    out: Path
    role: str
    mode: Literal["separate", "adapters"]
    base: str
    """The base model spec from the run's ``config.yaml``."""
    adapter: bool
    dtype: str
    """Resolved export dtype: ``float32``, ``bfloat16`` or ``float16``."""
    base_location: str = ""
    """Adapter exports: what ``base_model_name_or_path`` says (hub id or absolute directory)."""


def plan_export(
    role_dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    adapter: bool = False,
    dtype: str = "auto",
    force: bool = False,
) -> ExportPlan:
    """Check an export request without loading a model or writing anything; raise :class:`ExportError`.

    ``dtype="auto"`` keeps the dtype the checkpoint's tensors were saved in. ``force`` allows a
    non-empty ``out`` only when it is itself a model directory (a previous export), which is then
    replaced whole.
    """
    role_dir, out = Path(role_dir), Path(out)
    weights, run_config = role_dir / WEIGHTS_FILE, role_dir.parent / RUN_CONFIG
    if not role_dir.is_dir():
        raise ExportError(f"{role_dir}: no such checkpoint role directory (RUN_DIR/checkpoints/step_N/coder)")
    if not weights.is_file() or not run_config.is_file():
        missing = weights if not weights.is_file() else run_config
        raise ExportError(
            f"{role_dir} is not a role directory of a codea1 checkpoint: {missing} is missing "
            "(give RUN_DIR/checkpoints/step_N/coder or .../tester)"
        )
    try:
        trained = load_config(str(run_config)).engine
    except ConfigError as e:
        reason = " ".join(str(e).split())  # one line
        raise ExportError(f"{run_config}: cannot read the checkpoint's configuration: {reason}") from None
    role = role_dir.name
    base = trained.role_model(role)
    if dtype not in DTYPES:
        raise ExportError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    resolved = _stored_dtype(weights) if dtype == "auto" else dtype
    base_location = ""
    if adapter:
        if trained.mode != "adapters":
            raise ExportError(
                f"--adapter: {role_dir} holds full weights (engine.mode={trained.mode}), not a LoRA "
                "adapter; export it without --adapter"
            )
        base_location = _loadable_base(base)
    _check_output(out, role_dir, force)
    return ExportPlan(role_dir, out, role, trained.mode, base, adapter, resolved, base_location)


def _header(weights: Path) -> dict[str, Any]:
    """The tensors of a safetensors file (name -> ``{"dtype", "shape", ...}``), from its header alone."""
    try:
        with weights.open("rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            if size > _HEADER_LIMIT:
                raise ValueError("header too large")
            header = json.loads(f.read(size))
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
        return {k: v for k, v in header.items() if k != "__metadata__"}
    except (OSError, ValueError, struct.error) as e:
        raise ExportError(f"{weights}: not a readable safetensors file ({e})") from None


def _stored_dtype(weights: Path) -> str:
    """The most common tensor dtype in a safetensors file, read from its header alone."""
    header = _header(weights)
    try:
        counts = Counter(v["dtype"] for v in header.values())
    except (TypeError, KeyError) as e:
        raise ExportError(f"{weights}: not a readable safetensors file ({e})") from None
    if not counts:
        raise ExportError(f"{weights}: holds no tensors")
    code = counts.most_common(1)[0][0]
    if code not in _SAFETENSORS_DTYPES:
        raise ExportError(f"{weights}: tensors of dtype {code} cannot be exported; pass --dtype")
    return _SAFETENSORS_DTYPES[code]


def _loadable_base(base: str) -> str:
    """What ``base_model_name_or_path`` of an adapter export says: a hub id or an absolute directory."""
    from codea1.engine.loading import ModelLoadError, resolve_model

    try:
        source = resolve_model(base)
    except ModelLoadError as e:
        raise ExportError(f"--adapter: the run's base model cannot be found: {e}") from None
    if source.kind == "gguf":
        raise ExportError(
            f"--adapter: the run's base model {base!r} is a GGUF file, which transformers cannot load as "
            "the base of an adapter; export the merged model (without --adapter)"
        )
    return source.location


def _check_output(out: Path, role_dir: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ExportError(f"output {out} exists and is not a directory")
    resolved_out, resolved_role = out.resolve(), role_dir.resolve()
    if resolved_out == resolved_role or resolved_out in resolved_role.parents:
        raise ExportError(f"output {out} would contain the checkpoint {role_dir}; choose another directory")
    if resolved_role in resolved_out.parents:
        raise ExportError(f"output {out} is inside the checkpoint {role_dir}; choose another directory")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise ExportError(
                f"output directory {out} is not empty (pass --force to replace an earlier export)"
            )
        if not any((out / name).is_file() for name in MODEL_MARKERS):
            raise ExportError(
                f"--force replaces only a model directory (with {' or '.join(MODEL_MARKERS)}); {out} is not one"
            )
    parent = resolved_out.parent
    if not parent.is_dir():
        raise ExportError(f"output {out}: parent directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise ExportError(f"output {out}: parent directory {parent} is not writable")


def check_cache_dir(plan: ExportPlan, cache_dir: str = "") -> None:
    """Raise :class:`ExportError` when the model cache (``cache_dir``, else the default one) lies
    inside the checkpoint or the output: a GGUF base is de-quantised there (~0.5 GB for a 0.5B
    model), which would grow the checkpoint or end up in the export."""
    from codea1.engine.loading import default_cache_dir

    cache = (Path(cache_dir).expanduser() if cache_dir else default_cache_dir()).resolve()
    option = f"--cache-dir {cache_dir}" if cache_dir else f"the model cache {cache}"
    for what, directory in (("the checkpoint", plan.role_dir.parent), ("the output", plan.out)):
        inside = directory.resolve()
        if cache == inside or inside in cache.parents:
            raise ExportError(
                f"{option} is inside {what} {directory}: a GGUF base is de-quantised into it; "
                "choose a cache directory outside both"
            )


def check_fits(plan: ExportPlan, *, cache_dir: str = "") -> None:
    """Raise :class:`ExportError` when the checkpoint's tensors do not fit the base model: a name the
    base (with the run's LoRA adapters, in adapters mode) does not have, or another shape. The base
    is built from its configuration alone on the ``meta`` device: no weight is read and a GGUF base
    is not de-quantised, so a checkpoint of another model is refused in seconds. A base whose
    configuration cannot be read here is left to the load, which says why."""
    stored = {
        name: tuple(info.get("shape", ())) for name, info in _header(plan.role_dir / WEIGHTS_FILE).items()
    }
    expected = _base_shapes(plan, cache_dir)
    if expected is None:
        return
    unknown = sorted(set(stored) - set(expected))
    if unknown:
        raise ExportError(
            f"{plan.role_dir / WEIGHTS_FILE} does not fit base model {plan.base!r} ({len(unknown)} tensors it "
            f"lacks, e.g. {unknown[0]}); nothing was loaded or written"
        )
    wrong = [name for name in sorted(stored) if stored[name] != expected[name]]
    if wrong:
        name = wrong[0]
        raise ExportError(
            f"{plan.role_dir / WEIGHTS_FILE} does not fit base model {plan.base!r} ({len(wrong)} tensors of "
            f"another shape, e.g. {name}: {list(stored[name])} vs {list(expected[name])}); nothing was "
            "loaded or written"
        )


def _base_shapes(plan: ExportPlan, cache_dir: str) -> dict[str, tuple[int, ...]] | None:
    """Parameter name -> shape of the base model as training held it (with the role's adapter in
    adapters mode), built on the ``meta`` device; None when its configuration cannot be read here."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from codea1.engine.hf_local.roles import with_adapters
    from codea1.engine.loading import ModelLoadError, default_cache_dir, gguf_cache_path, resolve_model

    try:
        source = resolve_model(plan.base)
        if source.kind == "gguf":
            gguf = Path(source.location)
            cached = gguf_cache_path(gguf, Path(cache_dir) if cache_dir else default_cache_dir())
            if (cached / "config.json").is_file():
                config = AutoConfig.from_pretrained(str(cached))
            else:  # the GGUF's metadata only: its tensors are not read
                config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        else:
            config = AutoConfig.from_pretrained(source.location)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except (ModelLoadError, OSError, ValueError, KeyError, ImportError):  # the load will say why
        return None
    if plan.mode == "adapters":
        model = with_adapters(model, load_config(str(plan.role_dir.parent / RUN_CONFIG)).engine, [plan.role])
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


def export_checkpoint(plan: ExportPlan, *, cache_dir: str = "") -> Path:
    """Load the checkpoint (base model + trained tensors, in float32 on the CPU) and write ``plan.out``.

    ``cache_dir`` is where a GGUF base is dequantised once (default ``$CODEA1_CACHE/models``). Returns the
    output directory.
    """
    import torch

    from codea1.engine.hf_local import load_checkpoint_model

    engine = EngineConfig(coder_model=plan.base, dtype="float32", device="cpu", cache_dir=cache_dir)
    model, tokenizer, _ = load_checkpoint_model(plan.role_dir, engine, merge=not plan.adapter)
    dtype = getattr(torch, plan.dtype)
    tmp = Path(
        tempfile.mkdtemp(prefix=f".{plan.out.name}.", suffix=".export.tmp", dir=plan.out.resolve().parent)
    )
    try:
        if plan.adapter:
            _write_adapter(model, plan, dtype, tmp)
        else:
            model.to(dtype).save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        _move_into_place(tmp, plan.out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return plan.out


def _write_adapter(peft_model: Any, plan: ExportPlan, dtype: Any, directory: Path) -> None:
    """PEFT's own adapter layout: the role's LoRA tensors without the adapter name, and its config."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    state = get_peft_model_state_dict(peft_model, adapter_name=plan.role)
    save_file(
        {k: v.detach().to("cpu", dtype).contiguous() for k, v in state.items()},
        str(directory / ADAPTER_WEIGHTS),
        metadata={"format": "pt"},
    )
    config = copy.deepcopy(peft_model.peft_config[plan.role])
    config.base_model_name_or_path = plan.base_location
    config.inference_mode = True
    config.save_pretrained(str(directory))


def _move_into_place(tmp: Path, out: Path) -> None:
    """Rename ``tmp`` to ``out``; an existing ``out`` (empty, or a forced earlier export) is replaced."""
    if not out.exists():
        os.rename(tmp, out)
        return
    old = out.with_name(f".{out.name}.replaced-{os.getpid()}")
    os.rename(out, old)
    try:
        os.rename(tmp, out)
    except OSError:
        os.rename(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)


def check_hub_repo(repo_id: str) -> None:
    """Raise :class:`ExportError` unless ``huggingface_hub`` is installed and ``repo_id`` is valid."""
    if importlib.util.find_spec("huggingface_hub") is None:
        raise ExportError("--push-to-hub needs the huggingface_hub package (pip install huggingface_hub)")
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as e:
        raise ExportError(f"--push-to-hub {repo_id!r}: not a valid repository id ({e})") from None


def push_to_hub(directory: Path, repo_id: str, *, private: bool = False) -> str:
    """Create the model repository ``repo_id`` if needed and upload ``directory``; returns its URL.

    Credentials come from ``huggingface_hub``'s usual places (``HF_TOKEN``, ``huggingface-cli login``).
    """
    from huggingface_hub import HfApi

    api = HfApi()
    url = api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    api.upload_folder(
        folder_path=str(directory), repo_id=repo_id, repo_type="model", commit_message="Upload codea1 export"
    )
    return str(url)
