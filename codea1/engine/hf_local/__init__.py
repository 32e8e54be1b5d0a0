"""The transformers + torch (+ peft) engine: CPU and CUDA, one process.

``build_roles`` loads the model(s) and returns each role's :class:`HFPolicy` (sampling) and
:class:`HFLearner` (log-probs and updates). Only the CLI and :mod:`codea1.export` import this package.
"""

from codea1.engine.hf_local.learner import HFLearner, lr_factor
from codea1.engine.hf_local.policy import HFPolicy
from codea1.engine.hf_local.roles import (
    LocalRoles,
    base_model_spec,
    build_roles,
    load_checkpoint_model,
    load_policy,
)

__all__ = [
    "HFLearner",
    "HFPolicy",
    "LocalRoles",
    "base_model_spec",
    "build_roles",
    "load_checkpoint_model",
    "load_policy",
    "lr_factor",
]
