"""Isolated execution of untrusted code against generated tests."""
