"""Checks of numeric options shared by several verbs, each failing with one :class:`CliError` line."""

from __future__ import annotations

import math

from codea1.cli import CliError
from codea1.limits import MAX_RESAMPLES, MAX_SEED, WORKERS_PER_CORE, cores, max_workers


def check_workers(n: int, option: str = "--workers") -> None:
    """A sandbox worker count: 0 (one per core) up to :func:`codea1.limits.max_workers`, a few per
    core of this machine (each worker is a process tree with its own cgroups)."""
    limit = max_workers()
    if not 0 <= n <= limit:
        raise CliError(
            f"{option} must be in [0, {limit}] (0 = one per core; at most {WORKERS_PER_CORE} per core, "
            f"this machine has {cores()}), got {n}"
        )


def check_at_most(value: int, option: str, maximum: int) -> None:
    """A size no larger than ``maximum`` (see :mod:`codea1.limits`)."""
    if value > maximum:
        raise CliError(f"{option} must be at most {maximum}, got {value}")


def check_seconds(value: float | None, option: str, maximum: float) -> None:
    """A CPU budget in seconds: finite, > 0 and <= ``maximum`` (``None`` = not given)."""
    if value is not None and not (math.isfinite(value) and 0 < value <= maximum):
        raise CliError(f"{option} must be a number of seconds in (0, {maximum:g}], got {value:g}")


def check_at_least(value: float, option: str, minimum: float) -> None:
    """A finite number >= ``minimum``."""
    if not (math.isfinite(value) and value >= minimum):
        raise CliError(f"{option} must be a finite number >= {minimum:g}, got {value:g}")


def check_seed(value: int, option: str = "--seed") -> None:
    """A seed: an integer in [0, :data:`codea1.limits.MAX_SEED`]."""
    if not 0 <= value <= MAX_SEED:
        raise CliError(f"{option} must be an integer in [0, 2**63 - 1], got {value}")


def check_resamples(value: int, option: str = "--resamples") -> None:
    """A bootstrap resample count: 1 to :data:`codea1.limits.MAX_RESAMPLES`."""
    if not 1 <= value <= MAX_RESAMPLES:
        raise CliError(f"{option} must be in [1, {MAX_RESAMPLES:,}], got {value}")
