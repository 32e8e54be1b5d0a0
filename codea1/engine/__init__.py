"""Engines: the Policy/Learner seam and its implementations (leaves).

Inside the package a module imports only from its own layer or below (``lint-imports`` checks it):
``build`` (the one place that wires engines from a configuration), then ``ray_cluster`` (engines as
Ray actors), then the engines ``hf_local``, ``vllm_local`` and ``scripted_roles``, then their helpers
``scripted``, ``loading`` and ``lora``, and ``base`` (the seam's types) at the bottom.
"""
