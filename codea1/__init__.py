"""codea1: adversarial co-evolution of a Code LLM and a Test LLM with reinforcement learning."""

__version__ = "0.1.0"
