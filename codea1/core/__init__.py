"""Pure math of Code-A1: rewards, group selection, advantages, policy loss, estimators (no I/O)."""
