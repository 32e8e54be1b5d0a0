"""What vLLM prints into codea1's console: errors only, unless ``CODEA1_VLLM_LOGS=1``.

vLLM configures its ``vllm`` logger from ``VLLM_LOGGING_LEVEL`` (default INFO, to stdout) when it
is first imported. An engine running inside the training process would then print about thirty INFO
and WARNING lines at start-up and four after every weight sync into the training console. So before
vLLM is imported (and again before an engine starts, in case something imported it earlier) codea1
sets ``VLLM_LOGGING_LEVEL=ERROR`` (inherited by vLLM's worker processes on CUDA) and the level of the
``vllm`` logger, hides vLLM's progress bars and the ``FutureWarning`` its start-up kernel scan
triggers, and quiets torch's "Triton not available" line, which only vLLM's CPU start-up causes,
and the NUMA-binding notice its native CPU worker writes straight to stderr. Errors stay visible.
``CODEA1_VLLM_LOGS=1``, or a ``VLLM_LOGGING_LEVEL`` of the user's own, leaves
vLLM's logging as vLLM configures it.

One warning is hidden even then, during codea1's own weight syncs: ``<layer>: Failed to load
weights``. vLLM logs it for every layer a reload gives no tensor to, after putting that layer's
previous tensors back. That is what a sync means here: a partial set of tensors updates only those
(``adapters`` mode sends the adapted projections only), the rotary embedding has no weights in any
checkpoint (its cos/sin table is a buffer), and an output head tied to the embedding has no tensor
of its own (``weight_sync.repack_tied_head`` rebuilds it from the new embedding).

Imports: nothing heavy (logging, warnings, tempfile).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator

VERBOSE_ENV = "CODEA1_VLLM_LOGS"
"""Set to 1 to see all of vLLM's log lines, progress bars and warnings."""
LEVEL_ENV = "VLLM_LOGGING_LEVEL"
QUIET_LEVEL = "ERROR"
QUIETED_LOGGERS = ("vllm", "torch._library.triton")
"""Loggers held at ``QUIET_LEVEL``: vLLM's own, and torch's "Triton not available" notice."""
RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"
EXPECTED_RELOAD_WARNING = "%s: Failed to load weights"
NATIVE_NOTICES = ("NUMA binding: Using MEMBIND policy",)
"""Lines vLLM's native CPU worker writes straight to stderr at every start (not through logging),
hidden while it starts (``engine_start_warnings_hidden``)."""


def verbose() -> bool:
    """True when ``CODEA1_VLLM_LOGS`` asks for vLLM's full logging (any value but empty/0/false/no)."""
    return os.environ.get(VERBOSE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def quiet_vllm_logging() -> bool:
    """Keep vLLM's logging to errors unless the user asked otherwise; returns whether it is quiet.

    Call it before ``import vllm`` (the level is read then) and before an engine starts. Idempotent.
    """
    if verbose():
        return False
    if os.environ.setdefault(LEVEL_ENV, QUIET_LEVEL).strip().upper() != QUIET_LEVEL:
        return False  # the user's own VLLM_LOGGING_LEVEL, which vLLM applies itself
    for name in QUIETED_LOGGERS:
        logging.getLogger(name).setLevel(QUIET_LEVEL)
    return True


@contextlib.contextmanager
def engine_start_warnings_hidden(quiet: bool, *, in_process: bool = False) -> Iterator[None]:
    """While an engine starts, hide the ``FutureWarning``s vLLM's modules trigger and, for an engine
    in this process (CPU), the one line its native worker writes to stderr
    (:func:`native_notices_hidden`; not around an engine that starts worker processes, which would
    inherit the held descriptor), when ``quiet``."""
    if not quiet:
        yield
        return
    native = native_notices_hidden() if in_process else contextlib.nullcontext()
    with warnings.catch_warnings(), native:
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"vllm(\.|$)")
        yield


@contextlib.contextmanager
def native_notices_hidden(notices: tuple[str, ...] = NATIVE_NOTICES) -> Iterator[None]:
    """Lines written to file descriptor 2 inside the block (by any code, native included) are held
    in an unnamed temporary file and written back afterwards, less those containing one of
    ``notices``. Everything else, errors included, still reaches stderr, in order, once the block ends."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as held:
            os.dup2(held.fileno(), 2)
            try:
                yield
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                held.seek(0)
                kept = [
                    line for line in held.read().splitlines(keepends=True) if not _is_notice(line, notices)
                ]
                if kept:
                    os.write(2, b"".join(kept))
    finally:
        os.close(saved)


def _is_notice(line: bytes, notices: tuple[str, ...]) -> bool:
    text = line.decode("utf-8", "replace")
    return any(n in text for n in notices)


class ExpectedReloadWarning(logging.Filter):
    """Drops vLLM's ``<layer>: Failed to load weights`` record, and no other (see the module doc)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """False for the one expected record, True for everything else."""
        return record.msg != EXPECTED_RELOAD_WARNING


@contextlib.contextmanager
def expected_reload_warnings_hidden() -> Iterator[None]:
    """Hide the expected ``Failed to load weights`` warnings of one in-process weight sync."""
    logger = logging.getLogger(RELOAD_LOGGER)
    hide = ExpectedReloadWarning()
    logger.addFilter(hide)
    try:
        yield
    finally:
        logger.removeFilter(hide)
