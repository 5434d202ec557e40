"""Hephaestus: a PureJaxRL-style training pipeline compiled into one XLA program."""

__version__ = "0.1.0"
