"""The package version, stored in checkpoints and exports (kept apart so every layer can read it)."""

__version__ = "0.1.0"
