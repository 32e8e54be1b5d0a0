"""native_notices_hidden drops the known native notice from file descriptor 2 and keeps every other
line, in order, also when the block raises (no vLLM needed: the lines are written by hand)."""

from __future__ import annotations

import subprocess
import sys

PROGRAM = r"""
import os, sys
from codea1.engine.vllm_local.console import native_notices_hidden

def block(fail):
    with native_notices_hidden():
        os.write(2, b"before\n")
        os.write(2, b"[W1203 utils.cpp:68] Warning: NUMA binding: Using MEMBIND policy for memory allocation\n")
        print("from python", file=sys.stderr)
        os.write(2, b"an error line\n")
        if fail:
            raise RuntimeError("engine did not start")

block(False)
try:
    block(True)
except RuntimeError as e:
    print(f"raised: {e}", file=sys.stderr)
os.write(2, b"after\n")
"""


def test_only_the_notice_is_dropped_and_the_rest_arrives_in_order() -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    once = ["before", "from python", "an error line"]
    assert done.stderr.splitlines() == [*once, *once, "raised: engine did not start", "after"]
    assert done.stdout == ""
