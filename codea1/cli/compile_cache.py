"""torch's compile-cache directory, not left behind when nothing was compiled.

Importing ``torch._dynamo``, which every torch optimizer does when it is built (its
``add_param_group`` is wrapped by ``torch._disable_dynamo``), creates Inductor's cache directory
``$TMPDIR/torchinductor_<user>`` at import time, whether anything is compiled or not. So every
``codea1 train``, even ``--engine scripted``, left an empty one behind. The import cannot be avoided,
and pointing ``TORCHINDUCTOR_CACHE_DIR`` elsewhere would throw away what a real compile caches (vLLM
compiles its model), so the command removes the directory when it ends only if this command created
it and it holds no file: a cache someone uses is never touched, nor one ``TORCHINDUCTOR_CACHE_DIR``
names.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import tempfile
from collections.abc import Iterator

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
"""The variable that moves Inductor's cache (set by the user, or by torch to the default it made)."""


def default_compile_cache() -> str:
    """Where torch puts its Inductor cache when :data:`CACHE_ENV` is unset (torch's
    ``cache_dir_utils.default_cache_dir``, computed without importing torch)."""
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        user = f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"
    return os.path.abspath(
        os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))
    )


def remove_empty_tree(root: str) -> bool:
    """Remove ``root`` and the directories under it if none holds a file; returns whether it is gone."""
    for here, _, files in os.walk(root, topdown=False):
        if files:
            return False
        with contextlib.suppress(OSError):  # not empty after all (a file appeared): kept
            os.rmdir(here)
    return not os.path.exists(root)


@contextlib.contextmanager
def no_empty_compile_cache() -> Iterator[None]:
    """Around a command: the empty Inductor cache directory it made, if any, is removed at its end."""
    if os.environ.get(CACHE_ENV):
        yield
        return
    path = default_compile_cache()
    existed = os.path.lexists(path)
    try:
        yield
    finally:
        if not existed and os.path.isdir(path) and not os.path.islink(path):
            remove_empty_tree(path)
