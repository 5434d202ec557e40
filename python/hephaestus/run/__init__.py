"""The training job: command line, train entry, run folder, checkpoints, hooks, sinks, run lock, watchdog, host loop."""
