"""Joining or starting the Ray cluster of a run, and reading remote results with clear errors.

Imports: ray (lazily), config, engine.base.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import socket
from collections.abc import Sequence
from typing import Any

from codea1.config import ClusterConfig
from codea1.engine.base import EngineFailure

INSTALL_HINT = "pip install 'codea1[ray]'"
REACH_TIMEOUT_S = 5.0
"""How long a cluster address has to accept a connection before the run gives up on it."""
PEER_DEATH_WAIT_S = 5.0
"""How long a failed call waits for its other results, to tell an actor death from its echo."""
TOKEN_SETUP_LOGGER = "ray._private.authentication.authentication_token_setup"
"""Where Ray announces, at WARNING, that a cluster it starts uses token authentication (its default)."""
LOGS_HINT = "the actors' logs are under the Ray session's logs/ directory, e.g. /tmp/ray/session_latest/logs"


class RayUnavailable(RuntimeError):
    """Ray is not installed or the cluster cannot be reached; the message says why."""


def import_ray() -> Any:
    """The ``ray`` module, or :class:`RayUnavailable` with the install command."""
    try:
        import ray
    except ImportError as e:
        raise RayUnavailable(f"engine.backend=ray needs Ray ({e}); install it with {INSTALL_HINT}") from None
    return ray


OVERSUBSCRIBE_MAX = 4
"""A local cluster counts at most this many logical CPUs per core."""


def local_cluster_cpus(cluster: ClusterConfig, layout_cpus: float, cores: int | None = None) -> int:
    """Logical CPUs of the local cluster a run starts: ``cluster.num_cpus`` when set; else enough
    for the run's layout, and never fewer than the machine's cores. Ray's CPUs are logical: on a
    2-core laptop the 4 one-CPU actors of ``separate`` mode share the cores. A layout that no
    sharing makes sensible (one actor wanting more CPUs than the machine has, or more than
    :data:`OVERSUBSCRIBE_MAX` per core in all) gets only the cores, and the placement then says in
    one line what it asked for and what exists."""
    if cluster.num_cpus:
        return cluster.num_cpus
    cores = cores or os.cpu_count() or 1
    need = math.ceil(layout_cpus - 1e-9)
    if cluster.cpus_per_worker > cores or need > OVERSUBSCRIBE_MAX * cores:
        return cores
    return max(cores, need)


def connect(cluster: ClusterConfig, layout_cpus: float = 0.0) -> Any:
    """Join ``cluster.address`` (or ``RAY_ADDRESS``), else start a local cluster for this run
    (:func:`local_cluster_cpus` logical CPUs: ``cluster.num_cpus``, else what the layout's
    ``layout_cpus`` need and at least the machine's cores); returns the ``ray`` module. Already
    connected: kept."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    address = cluster.address or os.environ.get("RAY_ADDRESS", "")
    # actors' output (model loading bars, vLLM's log) stays in the cluster's log files; failures reach
    # the driver as one-line errors (see gather)
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "WARNING"}
    if address:
        check_reachable(address)
        options["address"] = address
    else:
        options["num_cpus"] = local_cluster_cpus(cluster, layout_cpus)
    try:
        with contextlib.nullcontext() if address else token_notice_hidden():
            ray.init(**options)
    except Exception as e:  # ConnectionError, RuntimeError, ValueError: all mean no cluster
        where = f"the Ray cluster at {address!r}" if address else "a local Ray cluster"
        raise RayUnavailable(f"cannot reach {where}: {type(e).__name__}: {e}") from None
    return ray


class _TokenNoticeFilter(logging.Filter):
    """Drops Ray's notice that a cluster it starts has token authentication on (the secure default,
    nothing for the user to do); the warning that authentication is off still shows."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Token authentication is enabled" not in record.getMessage()


@contextlib.contextmanager
def token_notice_hidden() -> Any:
    """While a local cluster starts for the run, Ray's token-authentication notice is not printed."""
    hidden = _TokenNoticeFilter()
    token_logger = logging.getLogger(TOKEN_SETUP_LOGGER)
    token_logger.addFilter(hidden)
    try:
        yield
    finally:
        token_logger.removeFilter(hidden)


def check_reachable(address: str, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """A ``HOST:PORT`` or ``ray://HOST:PORT`` address must accept a connection within ``timeout_s``;
    otherwise :class:`RayUnavailable` at once (Ray itself retries the GCS for minutes).
    ``auto`` and other forms are left to Ray."""
    match = re.fullmatch(r"(?:ray://)?\[?([^\[\]/]+?)\]?:(\d+)", address)
    if match is None:
        return
    host, port = match.group(1), int(match.group(2))
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as e:
        raise RayUnavailable(
            f"cannot reach the Ray cluster at {address!r}: {e.strerror or e}; start it with "
            "`ray start --head` there, or fix cluster.address (or RAY_ADDRESS)"
        ) from None


def starts_local_cluster(cluster: ClusterConfig) -> bool:
    """True when :func:`connect` starts a local cluster of the run's own (no address given, none
    in ``RAY_ADDRESS``): a cluster no node joins."""
    return not (cluster.address or os.environ.get("RAY_ADDRESS", ""))


def gather(
    refs: Sequence[Any], what: str, timeout_s: float | None = None, *, peers: Sequence[Any] = ()
) -> list[Any]:
    """``ray.get`` of ``refs``; an actor that died or raised becomes one :class:`EngineFailure`
    naming ``what`` (e.g. "coder learner group") and the cause's last line. ``peers`` are refs of
    the same call whose values stay in the object store; they are read only when the call fails
    (a death among their actors is then the cause reported)."""
    ray = import_ray()
    try:
        return list(ray.get(list(refs), timeout=timeout_s))
    except ray.exceptions.GetTimeoutError:
        raise EngineFailure(f"{what}: no answer within {timeout_s:.0f} s") from None
    except ray.exceptions.RayActorError as e:
        _settle(ray, [*refs, *peers])
        raise EngineFailure(_died(what, e)) from None
    except ray.exceptions.RayTaskError as e:
        death = _settle(ray, [*refs, *peers])
        if death is not None:  # e.g. a rank whose peer died, failing in a collective first
            raise EngineFailure(_died(what, death)) from None
        raise EngineFailure(f"{what}: {_last_line(e)} ({LOGS_HINT})") from None


def _died(what: str, error: BaseException) -> str:
    return f"{what}: an actor died ({_last_line(error)}; {LOGS_HINT})"


def _settle(ray: Any, refs: Sequence[Any]) -> BaseException | None:
    """Read the results of a failed call that arrive within :data:`PEER_DEATH_WAIT_S` (Ray would
    print the errors never read as unhandled, tracebacks and all); the first actor death among them.

    When a learner rank dies, the others fail in their next collective at once ("connection closed
    by peer"), usually before Ray has noticed the death; the death is the cause worth reporting."""
    done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=PEER_DEATH_WAIT_S)
    death = None
    for ref in done:
        try:
            ray.get(ref)
        except ray.exceptions.RayActorError as e:
            death = death or e
        except ray.exceptions.RayError:
            continue
    return death


def _last_line(error: BaseException) -> str:
    """The error's own line (``SomeError: why``) out of a remote traceback, cut to a readable length."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    named = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Exit|Interrupt)\b", line)]
    line = (named or lines or [type(error).__name__])[-1]
    return line if len(line) <= 400 else line[:397] + "..."
