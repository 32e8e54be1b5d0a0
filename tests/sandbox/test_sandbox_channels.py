"""Host-facing channels: which layers close them, the minimal root's paths, strict refusal."""

from __future__ import annotations

import os

import pytest

from codea1.config import SandboxConfig
from codea1.sandbox import Sandbox
from codea1.sandbox.channels import CHANNELS, channel_status, open_channels
from codea1.sandbox.local import _REQUIRED_LAYERS, strict_refusal
from codea1.sandbox.worker.minimal_root import outermost
from codea1.types import GridJob, TestCase


def test_a_channel_is_open_only_when_none_of_its_layers_is_active() -> None:
    every = {name: "active" for _, closers in CHANNELS for name in closers}
    assert open_channels(every) == []
    no_root_no_seccomp = {**every, "minimal_root": "unavailable: x", "seccomp": "unavailable: y"}
    still_open = open_channels(no_root_no_seccomp)
    assert any(c.startswith("pathname UNIX sockets") for c in still_open)
    assert not any(c.startswith("abstract UNIX sockets") for c in still_open)  # net_ns closes it
    status = dict(channel_status(no_root_no_seccomp))
    assert status[CHANNELS[0][0]] == "OPEN: needs seccomp or minimal_root"


def test_outermost_keeps_one_bind_per_tree() -> None:
    assert outermost(["/usr/lib", "/usr", "/lib64", "/usr/lib/python3", "/a/b", "/a/bc", "rel", "/a/b/"]) == [
        "/a/b", "/a/bc", "/lib64", "/usr",
    ]  # fmt: skip


def _sandbox_grid(sandbox: Sandbox, code: str, expected: str) -> str:
    (g,) = sandbox.run_grids([GridJob("g", code, "f", (code,), (TestCase("f(1)", expected),))])
    return g.oracle[0].status + "/" + g.verdicts[0][0].status


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the isolation layers are x86_64 only")
def test_minimal_root_hides_the_host_but_keeps_the_interpreter(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bait = tmp_path / "host.sock"
    bait.write_text("")
    with Sandbox(SandboxConfig(workers=1)) as sandbox:
        if sandbox.layers().get("minimal_root") != "active":
            pytest.skip(f"minimal root unavailable here: {sandbox.layers().get('minimal_root')}")
        code = (
            "import os, json, sys\n"
            f"def f(x):\n    return [os.path.lexists({str(bait)!r}), os.path.exists('/run'), os.path.exists('/proc/1'),\n"
            "            os.path.isdir(sys.base_prefix), json.loads('[1]')[0] == x]\n"
        )
        assert _sandbox_grid(sandbox, code, "[False, False, False, True, True]") == "valid/pass"


def test_strict_refuses_without_the_minimal_root_and_names_the_open_channel() -> None:
    layers = {name: "active" for name in _REQUIRED_LAYERS}
    assert strict_refusal(layers) == ""
    layers["minimal_root"] = "unavailable: mount tmpfs: Operation not permitted (errno 1)"
    why = strict_refusal(layers)
    assert why.startswith(
        "strict isolation: layers not active: minimal_root (open channels: host paths visible"
    )
