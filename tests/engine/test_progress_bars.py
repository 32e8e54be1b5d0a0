"""transformers' own progress bars are off while codea1 loads a model, and restored after."""

from __future__ import annotations

import pytest
from transformers import modeling_gguf_pytorch_utils as gguf_reader
from transformers.utils import logging as hf_logging

from codea1.engine.loading import transformers_progress_bars_off


@pytest.mark.parametrize("enabled_before", [True, False])
def test_bars_are_off_inside_and_restored_after(enabled_before: bool) -> None:
    (hf_logging.enable_progress_bar if enabled_before else hf_logging.disable_progress_bar)()
    try:
        reader_bar = gguf_reader.tqdm
        with transformers_progress_bars_off():
            assert not hf_logging.is_progress_bar_enabled()
            assert gguf_reader.tqdm([1, 2], desc="de-quantizing") == [1, 2]  # no bar: the iterable itself
        assert hf_logging.is_progress_bar_enabled() is enabled_before and gguf_reader.tqdm is reader_bar
        with pytest.raises(KeyError), transformers_progress_bars_off():
            raise KeyError("a failed load")
        assert hf_logging.is_progress_bar_enabled() is enabled_before
    finally:
        hf_logging.enable_progress_bar()
