"""Tools around trained agents and runs: watch, evaluate, sweep, plot, inspect, the entry points."""
