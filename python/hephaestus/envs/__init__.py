"""Environments: one adapter boundary (adapters.py) and a name registry (registry.py)."""
