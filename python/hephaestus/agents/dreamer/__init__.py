"""The dreamer: actor-critic learned in the imagination of a world model, in place of GAE and PPO."""
