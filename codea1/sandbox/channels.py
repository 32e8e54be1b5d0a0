"""Host-facing channels and the isolation layers that close them: what ``sandbox doctor`` reports.

A channel is closed when at least one of its layers is active (each layer closes it on its own);
docs/sandbox.md ("Layers") says how. ``isolation: strict`` refuses to start with any channel open.
"""

from __future__ import annotations

from codea1.sandbox.worker.isolation import ACTIVE

CHANNELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("pathname UNIX sockets (docker.sock, Ray's raylet, ssh-agent, journald)", ("seccomp", "minimal_root")),
    ("abstract UNIX sockets", ("seccomp", "net_ns")),
    ("TCP/UDP to the host or the network", ("net_ns", "seccomp")),
    ("host paths visible to os.stat / listdir (/tmp, /run, /home)", ("minimal_root",)),
    ("host files readable", ("minimal_root", "landlock")),
    ("files written outside scratch", ("landlock",)),
    ("System V IPC and POSIX message queues of the host", ("ipc_ns", "seccomp")),
    ("POSIX shared memory and semaphores (/dev/shm)", ("minimal_root", "landlock")),
    ("host processes (/proc entries, signals)", ("pid_ns",)),
    ("ptrace or memory of sibling processes", ("seccomp",)),
    ("process sweep of daemons after a job", ("pid_ns",)),
)
"""(channel, the layers any one of which closes it)."""


def channel_status(layers: dict[str, str]) -> list[tuple[str, str]]:
    """(channel, "closed by <layers>" or "OPEN: needs one of <layers>") for every channel."""
    out = []
    for channel, closers in CHANNELS:
        active = [name for name in closers if layers.get(name) == ACTIVE]
        out.append(
            (channel, f"closed by {', '.join(active)}" if active else f"OPEN: needs {' or '.join(closers)}")
        )
    return out


def open_channels(layers: dict[str, str]) -> list[str]:
    """The channels no active layer closes."""
    return [channel for channel, status in channel_status(layers) if status.startswith("OPEN")]
