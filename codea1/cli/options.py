"""Checks of numeric options shared by several verbs, each failing with one :class:`CliError` line."""

from __future__ import annotations

import math

from codea1.cli import CliError

MAX_WORKERS = 1024
"""Largest ``--workers`` accepted (each sandbox worker is a process tree with its own cgroups)."""


def check_workers(n: int, option: str = "--workers") -> None:
    """A worker count: 0 (one per core) up to :data:`MAX_WORKERS`."""
    if not 0 <= n <= MAX_WORKERS:
        raise CliError(f"{option} must be in [0, {MAX_WORKERS}] (0 = one per core), got {n}")


def check_seconds(value: float | None, option: str, maximum: float) -> None:
    """A CPU budget in seconds: finite, > 0 and <= ``maximum`` (``None`` = not given)."""
    if value is not None and not (math.isfinite(value) and 0 < value <= maximum):
        raise CliError(f"{option} must be a number of seconds in (0, {maximum:g}], got {value:g}")


def check_at_least(value: float, option: str, minimum: float) -> None:
    """A finite number >= ``minimum``."""
    if not (math.isfinite(value) and value >= minimum):
        raise CliError(f"{option} must be a finite number >= {minimum:g}, got {value:g}")
