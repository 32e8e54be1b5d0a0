"""Evaluation of code generation, test generation and test-time collaboration."""
