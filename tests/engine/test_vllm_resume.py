"""``codea1 train`` with vLLM rollouts resumes exactly, and keeps vLLM's log lines off the console.

Per ``engine.mode``, one configuration (SmolLM2-135M, fp32 on CPU, two tiny problems, one a step,
four samples each) runs two steps straight through. It trains with the ``golden`` method: SmolLM2
solves these problems some of the time, so step 1 already has a reward signal, whereas under ``a1``
it rarely writes a valid test in its first steps, both rewards stay 0, step 1 changes nothing and
the test could not tell whether the resumed weights reached vLLM. A copy of that run directory loses its step-2 checkpoint, as if the
process had been killed after writing step 2's metrics and Mistake Book but before the checkpoint,
and ``codea1 train --resume`` recomputes step 2 in a fresh process (new vLLM engines, weights
pushed from the step-1 checkpoint). Step 2's metrics (timings aside), the final weights and the
optimizer state must be identical to the straight run's. They would differ if vLLM's samples
depended on anything but (run seed, step, role, prompt, sample), e.g. unseeded or process-global
random state; if the resumed weights did not reach vLLM before the first rollout; or if the
optimizer, problem sampler or RNG state were not restored. The learning rate is raised so that
step 1 moves the weights enough to change step 2's samples.

Both runs' consoles (stdout and stderr) must hold no vLLM INFO/WARNING line, progress bar or
``Failed to load weights`` warning (``codea1.engine.vllm_local.console``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from codea1.engine.vllm_local.available import vllm_import_error
from codea1.tracking import read_metrics
from tests.demo_model import require_demo_model

require_demo_model()
if vllm_import_error():
    pytest.skip(f"vLLM is not usable here: {vllm_import_error()}", allow_module_level=True)
pytestmark = pytest.mark.slow

PROBLEMS = [  # step 1 samples the first, step 2 the second (data.seed=1); SmolLM2 gets some right
    ("is_even", "n: int", "bool", "Return True when n is even.", "is_even(4)", "True", "n % 2 == 0",
     ["is_even(4) == True", "is_even(7) == False", "is_even(0) == True"]),
    ("largest", "xs: list[int]", "int", "Return the largest number in xs.", "largest([3, 9, 2])", "9", "max(xs)",
     ["largest([3, 9, 2]) == 9", "largest([-5, -2]) == -2"]),
]  # fmt: skip
SETTINGS = [
    "train.method=golden", "engine.rollout=vllm", "engine.device=cpu", "engine.dtype=float32", "train.steps=2",
    "train.save_every=1", "train.keep_last=2", "data.problems_per_step=1", "coder.sampling.n=4",
    "coder.sampling.max_new_tokens=64", "tracking.tensorboard=false",
]  # fmt: skip
LEARNING_RATE = {"separate": 1e-4, "adapters": 1e-3}
TIMING = re.compile(r"^time/|^memory/|(/|_)seconds$|/tokens_per_s$")
VLLM_NOISE = re.compile(
    r"^\(\w+ pid=\d+\) (DEBUG|INFO|WARNING) |Failed to load weights|Loading safetensors checkpoint shards"
    r"|FutureWarning|Triton not available"
)
STEP2 = Path("checkpoints") / "step_000002"


def train(*args: str) -> subprocess.CompletedProcess:
    """``codea1 train ARGS`` in a child process with the user's default logging environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("CODEA1_VLLM_LOGS", "VLLM_LOGGING_LEVEL")}
    cmd = [sys.executable, "-m", "codea1", "train", "--progress", "plain", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.fixture(scope="module", params=["separate", "adapters"])
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A straight 2-step run and the same run resumed after step 1, with their console output."""
    mode = request.param
    root = tmp_path_factory.mktemp(f"resume-{mode}")
    data = root / "problems.jsonl"
    data.write_text("".join(json.dumps(problem(*p)) + "\n" for p in PROBLEMS))
    straight = root / "straight"
    sets = [*SETTINGS, f"engine.mode={mode}", f"data.train={data}", f"coder.optim.lr={LEARNING_RATE[mode]}"]
    first = train(
        "--preset", "tiny-cpu", "--run-dir", str(straight), *[a for s in sets for a in ("--set", s)]
    )
    resumed = root / "resumed"
    shutil.copytree(straight, resumed)
    shutil.rmtree(resumed / STEP2)
    second = train("--resume", str(resumed))
    assert "resuming" in second.stdout
    return {"straight": straight, "resumed": resumed, "consoles": [first, second]}


def problem(
    name: str, args: str, returns: str, doc: str, example: str, answer: str, body: str, tests: list[str]
) -> dict:
    """One problem row in codea1's JSONL format."""
    head = f"def {name}({args}) -> {returns}:\n"
    return {
        "id": f"tiny/{name}", "entry_point": name, "imports": "", "source": "tiny",
        "question": f'{head}    """{doc}\n\n    >>> {example}\n    {answer}\n    """\n',
        "reference": f"{head}    return {body}\n", "golden_tests": [f"assert {t}" for t in tests],
    }  # fmt: skip


def untimed(row: dict) -> dict:
    """A metrics row without its wall-clock measurements."""
    return {k: v for k, v in row.items() if not TIMING.search(k)}


def role_tensors(run_dir: Path, step: Path, role: str) -> dict[str, torch.Tensor]:
    """A role's checkpointed weights and AdamW moments, by name."""
    from safetensors.torch import load_file

    out = load_file(str(run_dir / step / role / "weights.safetensors"))
    state = torch.load(run_dir / step / role / "optimizer.pt", map_location="cpu", weights_only=True)
    for index, moments in state["optimizer"]["state"].items():
        out.update({f"adam.{index}.{k}": v for k, v in moments.items()})
    return out


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """The same names holding bit-identical tensors."""
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_resume_after_step_one_gives_the_same_step_two(runs: dict) -> None:
    straight, resumed = read_metrics(runs["straight"]), read_metrics(runs["resumed"])
    assert [r["step"] for r in straight] == [r["step"] for r in resumed] == [1, 2]
    assert straight[1]["rollout/engine/vllm"] == 1.0
    # the test can tell: step 1 had a reward signal and moved the weights that sample step 2
    assert straight[0]["coder/reward_std"] > 0 and straight[0]["loss/coder/grad_norm"] > 0
    step1 = role_tensors(runs["straight"], Path("checkpoints") / "step_000001", "coder")
    assert not same(step1, role_tensors(runs["straight"], STEP2, "coder"))
    assert untimed(resumed[1]) == untimed(straight[1])
    assert same(role_tensors(runs["resumed"], STEP2, "coder"), role_tensors(runs["straight"], STEP2, "coder"))


def test_the_console_holds_no_vllm_log_lines(runs: dict) -> None:
    for done in runs["consoles"]:
        noise = [line for line in (done.stdout + done.stderr).splitlines() if VLLM_NOISE.search(line)]
        assert not noise, "\n".join(noise[:10])
        assert "finished step 2/2" in done.stdout
        assert "codea1 train: host memory: expected peak" in done.stdout  # the plan, before step 1
