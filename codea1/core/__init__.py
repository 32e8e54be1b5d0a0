"""Pure math of Code-A1: rewards, group selection, advantages, policy loss, estimators, and the
derivation of every seed of a run (``seeds``); no I/O."""
