"""How an evaluation sampled is part of its results file's key: engine, seed and sampling values."""

from __future__ import annotations

import argparse

import pytest

from codea1.cli.eval_args import add_parsers, sampler_settings


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers(dest="command"))
    return parser.parse_args(["eval", *argv])


@pytest.mark.parametrize("verb", ["code", "tests", "bon"])
def test_every_sampling_verb_takes_the_engine_and_defaults_to_transformers(verb: str) -> None:
    assert _args(verb).engine == "transformers"
    assert _args(verb, "--engine", "vllm").engine == "vllm"


def test_the_key_names_the_engine_only_when_it_is_not_transformers() -> None:
    base = sampler_settings(_args("tests", "--seed", "3", "--max-new-tokens", "64"), 1)
    assert base == {"n": 1, "temperature": 0.7, "top_p": 0.95, "seed": 3, "max_new_tokens": 64}
    vllm = sampler_settings(_args("tests", "--seed", "3", "--max-new-tokens", "64", "--engine", "vllm"), 1)
    assert vllm == {**base, "engine": "vllm"}
    assert sampler_settings(_args("tests", "--seed", "4", "--max-new-tokens", "64"), 1) != base


def test_an_unknown_engine_is_refused_by_the_parser(capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        _args("code", "--engine", "llama")
    assert stop.value.code == 2 and "invalid choice: 'llama'" in capsys.readouterr().err


def test_a_long_model_path_is_named_by_its_last_whole_words() -> None:
    from codea1.results_file import SLUG_CHARS, slug

    name = slug("/runs/methods-easy/a1-reward.mutation_weight=0.5-s0/checkpoints/step_000016/tester")
    assert name == "reward.mutation_weight_0.5-s0_checkpoints_step_000016_tester"
    assert len(name) <= SLUG_CHARS
    assert slug("smollm2-135m") == "smollm2-135m" and slug("///") == "model"
    assert slug("a" * 80) == "a" * SLUG_CHARS  # one long word: its end, as before


def test_a_results_file_named_by_an_earlier_slug_is_resumed(tmp_path) -> None:
    from codea1.results_file import ResultStore, run_key_digest

    key = {"model": "/runs/x/" + "m" * 70, "dataset": "d"}
    earlier = tmp_path / f"tests-{'m' * 59}-{run_key_digest(key)}.jsonl"  # a word cut in two
    earlier.write_text('{"run_key": ' + __import__("json").dumps(key) + '}\n{"id": "p1", "valid": 1}\n')
    store = ResultStore(tmp_path, "tests", key)
    assert store.path == earlier and store.done("p1")
    other = ResultStore(tmp_path, "code", key)  # another task's file is never taken
    assert other.path != earlier and not other.done("p1")
