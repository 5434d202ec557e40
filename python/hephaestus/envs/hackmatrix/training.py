"""HackMatrix's training defaults: the values its runs take for the options left auto (config.registry's
ENV_DEFAULTS, declared here by the env family; a flag or a config file wins). No jax here: --help and resolve read
them before any env is built.

The student: the half-width (128, cell 8) player-centred ego encoder, entropy bonus 0.1, learning from the scripted
exit-rush-collector teacher whose weight reaches 0 at half the run. The training env (`env_params`, fields of
state.py's EnvParams) pays 10 for a program's first play in a game and 4 per program acquired, both on the step
that clears its stage, drops the siphon-death penalty, pays a victory 100, turns the UNDO-across-stages quirk off,
and starts a quarter of the games on stages 2-8 with a player's resources, their rewards scaled to a fresh game's.
Evaluations play the rules' game (the env's own defaults). The measurements behind each value: specs/results/hackmatrix-learning.md and the
studies it links; configs/hackmatrix-tpu.yaml is these settings at 2048 envs and 1e8 steps.
"""

from hephaestus.config.registry import declare_env_defaults

TRAINING_ENV_PARAMS = ("program_played_coef=10", "siphon_death_penalty=0", "program_played_at_clear=1",
                       "undo_across_stages=0", "program_acquired_coef=4", "program_acquired_at_clear=1",
                       "curriculum_share=0.25", "curriculum_max_stage=8", "curriculum_program_prob=0.02",
                       "victory_bonus=100", "victory_score_coef=0", "curriculum_reward_scale=1")

TRAINING_DEFAULTS = declare_env_defaults("hackmatrix", ent_coef=0.1, teacher="exit-rush-collector", encoder="ego",
                                         hidden_dim=128, cell_dim=8, teacher_fraction=0.5,
                                         env_params=TRAINING_ENV_PARAMS)
