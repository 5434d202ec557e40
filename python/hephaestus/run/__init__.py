"""The training job: command line, train entry, run folder, checkpoints, training hooks, run lock, watchdog, the host loop that drives the compiled chunks."""
