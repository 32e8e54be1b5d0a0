"""The arguments of a seconds-long ``codea1 train`` run on the scripted engine, for CLI tests."""

from __future__ import annotations

SCRIPTED_RUN = [
    "--preset",
    "tiny-cpu",
    "--engine",
    "scripted",
    "--progress",
    "plain",
    "--set",
    "tracking.tensorboard=false",
]
"""``tiny-cpu`` named (not the default demo), the scripted engine, plain progress, no TensorBoard."""
