"""Agent families, one folder each: its stages, options, defaults and registration."""
