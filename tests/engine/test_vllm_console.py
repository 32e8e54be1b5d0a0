"""What vLLM may print into codea1's console (``codea1.engine.vllm_local.console``); needs no vLLM."""

from __future__ import annotations

import logging
import os
import warnings

import pytest

from codea1.engine.vllm_local import console


@pytest.fixture(autouse=True)
def _restore_loggers(monkeypatch: pytest.MonkeyPatch):
    levels = {name: logging.getLogger(name).level for name in console.QUIETED_LOGGERS}
    for name in (console.VERBOSE_ENV, console.LEVEL_ENV):  # set first, so that the end restores them
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def _levels() -> list[int]:
    return [logging.getLogger(name).level for name in console.QUIETED_LOGGERS]


def test_quiet_by_default_errors_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in console.QUIETED_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)
    assert console.quiet_vllm_logging() is True
    assert console.quiet_vllm_logging() is True  # idempotent
    assert os.environ[console.LEVEL_ENV] == "ERROR"  # for vLLM's own configuration and its workers
    assert _levels() == [logging.ERROR] * len(console.QUIETED_LOGGERS)
    child = logging.getLogger("vllm.some.module")
    assert not child.isEnabledFor(logging.WARNING) and child.isEnabledFor(logging.ERROR)


@pytest.mark.parametrize("value", ["1", "yes", "true"])
def test_codea1_vllm_logs_leaves_vllm_alone(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(console.VERBOSE_ENV, value)
    for name in console.QUIETED_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)
    assert console.quiet_vllm_logging() is False
    assert _levels() == [logging.INFO] * len(console.QUIETED_LOGGERS)
    assert console.LEVEL_ENV not in os.environ


def test_the_users_own_vllm_level_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(console.LEVEL_ENV, "DEBUG")
    monkeypatch.setenv(console.VERBOSE_ENV, "0")
    for name in console.QUIETED_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG)
    assert console.quiet_vllm_logging() is False
    assert _levels() == [logging.DEBUG] * len(console.QUIETED_LOGGERS)


def test_only_the_expected_reload_warning_is_hidden_and_only_during_a_sync(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger(console.RELOAD_LOGGER)
    logger.setLevel(logging.DEBUG)
    try:
        with caplog.at_level(logging.DEBUG, logger=console.RELOAD_LOGGER):
            with console.expected_reload_warnings_hidden():
                logger.warning("%s: Failed to load weights", "RotaryEmbedding")
                logger.warning("%s: Failed to load something else", "ParallelLMHead")
                logger.error("reload failed")
            logger.warning("%s: Failed to load weights", "ParallelLMHead")
    finally:
        logger.setLevel(logging.NOTSET)
    assert [r.getMessage() for r in caplog.records] == [
        "ParallelLMHead: Failed to load something else",
        "reload failed",
        "ParallelLMHead: Failed to load weights",
    ]
    assert not logger.filters


def test_start_warnings_hidden_only_when_quiet() -> None:
    def warn_from_vllm() -> None:
        warnings.warn_explicit("deprecated", FutureWarning, "dispatcher.py", 1, module="vllm.triton_utils")

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with console.engine_start_warnings_hidden(True):
            warn_from_vllm()
            warnings.warn_explicit("ours", FutureWarning, "x.py", 1, module="codea1.x")
        with console.engine_start_warnings_hidden(False):
            warn_from_vllm()
    assert [str(w.message) for w in seen] == ["ours", "deprecated"]
