"""Test-wide settings: no test ever talks to wandb's servers, whatever keys the machine has."""

import os

os.environ["WANDB_MODE"] = "disabled"
os.environ.setdefault("WANDB_SILENT", "true")
