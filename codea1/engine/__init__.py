"""Engines: the Policy/Learner seam and its implementations (leaves)."""
