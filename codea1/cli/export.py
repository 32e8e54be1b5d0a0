"""``codea1 export ROLE_DIR OUT``: a checkpoint's coder or tester as a standard Hugging Face model."""

from __future__ import annotations

import argparse
from pathlib import Path

from codea1.cli import CliError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``export`` subcommand."""
    p = subparsers.add_parser(
        "export",
        help="write a checkpoint's coder or tester as a Hugging Face model directory",
        description=(
            "Write RUN_DIR/checkpoints/step_N/coder (or tester) as a model directory that "
            "transformers' AutoModelForCausalLM.from_pretrained and vLLM load as it is: config, "
            "tokenizer with its chat template, safetensors. A LoRA adapter is merged into the base "
            "unless --adapter."
        ),
    )
    p.add_argument(
        "role_dir", type=Path, metavar="ROLE_DIR", help="RUN_DIR/checkpoints/step_N/coder or tester"
    )
    p.add_argument("out", type=Path, metavar="OUT", help="output directory (must not exist or be empty)")
    p.add_argument(
        "--adapter",
        action="store_true",
        help="adapters runs: write a PEFT adapter directory instead of merging",
    )
    p.add_argument(
        "--dtype", default="auto", metavar="DTYPE",
        help="auto, float32, bfloat16 or float16 (default auto: the dtype the checkpoint was saved in)",
    )  # fmt: skip
    p.add_argument("--force", action="store_true", help="replace OUT when it holds an earlier export")
    p.add_argument("--push-to-hub", metavar="REPO", help="then upload OUT to the Hugging Face Hub repo REPO")
    p.add_argument("--private", action="store_true", help="with --push-to-hub: create the repo private")
    p.add_argument(
        "--cache-dir", default="", help="where a GGUF base is dequantised (default $CODEA1_CACHE/models)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Check every argument, export, then push when asked."""
    from codea1.engine.loading import ModelLoadError
    from codea1.export import (
        ExportError,
        check_cache_dir,
        check_fits,
        check_hub_repo,
        export_checkpoint,
        plan_export,
        push_to_hub,
    )

    if args.private and not args.push_to_hub:
        raise CliError("--private applies to --push-to-hub REPO, which was not given")
    try:
        plan = plan_export(args.role_dir, args.out, adapter=args.adapter, dtype=args.dtype, force=args.force)
        if args.push_to_hub:
            check_hub_repo(args.push_to_hub)
        check_cache_dir(plan, args.cache_dir)
        check_fits(plan, cache_dir=args.cache_dir)  # before a GGUF base is de-quantised
        out = export_checkpoint(plan, cache_dir=args.cache_dir)
    except (ExportError, ModelLoadError) as e:
        raise CliError(str(e)) from None
    except OSError as e:
        raise CliError(f"export to {args.out} failed, nothing was written: {e}") from None
    kind = "PEFT adapter" if plan.adapter else ("merged LoRA" if plan.mode == "adapters" else "full model")
    print(f"exported {plan.role_dir} ({kind}, {plan.dtype}) to {out}")
    if args.push_to_hub:
        try:
            url = push_to_hub(out, args.push_to_hub, private=args.private)
        except Exception as e:  # noqa: BLE001 - network and auth failures of the hub client, one line
            reason = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            raise CliError(
                f"export written to {out}, but the upload to {args.push_to_hub} failed ({reason})"
            ) from None
        print(f"uploaded to {url}")
    return 0
