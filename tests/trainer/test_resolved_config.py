"""The values ``codea1 train`` resolves after loading (model paths from the environment, the scripted
engine's byte lengths) make a new configuration, checked again; the loaded one is left as it was."""

from __future__ import annotations

import pytest

import codea1.config as config_module
from codea1.cli import train as train_cli
from codea1.config import ConfigError, RunConfig, load_config


def _counting_checks(monkeypatch: pytest.MonkeyPatch) -> list[RunConfig]:
    """Record every configuration :func:`codea1.config.check_invariants` checks."""
    checked: list[RunConfig] = []
    real = config_module.check_invariants

    def check(cfg: RunConfig) -> None:
        checked.append(cfg)
        real(cfg)

    monkeypatch.setattr(config_module, "check_invariants", check)
    return checked


def test_byte_lengths_replaces_and_rechecks(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_config("demo-cpu", ["engine.kind=scripted"])
    before = cfg.to_dict()
    checked = _counting_checks(monkeypatch)
    wide = train_cli.byte_lengths(cfg)
    assert checked == [wide]  # the new configuration, checked once
    assert cfg.to_dict() == before  # the loaded one unchanged
    assert wide.coder.sampling.max_new_tokens == 4096 and wide.tester.sampling.max_prompt_tokens == 16384


def test_expand_model_paths_replaces_and_rechecks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEA1_TEST_MODEL", "/models/coder")
    cfg = load_config("demo-cpu", ["engine.coder_model=${CODEA1_TEST_MODEL}"])
    checked = _counting_checks(monkeypatch)
    resolved = train_cli.expand_model_paths(cfg)
    assert checked == [resolved]
    assert (cfg.engine.coder_model, resolved.engine.coder_model) == ("${CODEA1_TEST_MODEL}", "/models/coder")


def test_a_resolved_value_that_breaks_an_invariant_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The re-check is real: a resolved configuration that cannot work raises, as a loaded one does."""
    cfg = load_config("demo-cpu", ["engine.kind=scripted"])
    real = config_module.check_invariants

    def strict(c: RunConfig) -> None:
        real(c)
        if c.coder.sampling.max_new_tokens > 1024:
            raise ConfigError("invalid configuration: coder.sampling.max_new_tokens too large")

    monkeypatch.setattr(config_module, "check_invariants", strict)
    with pytest.raises(ConfigError, match="max_new_tokens too large"):
        train_cli.byte_lengths(cfg)
