"""The compiled pipeline: rollout, GAE, PPO loss and update (ppo.py), the stage interface, runner state, networks, evaluation, devices, stored programs, export."""
