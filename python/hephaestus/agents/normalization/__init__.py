"""Reward scaling and observation normalisation stages."""
