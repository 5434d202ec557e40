"""Scripted HackMatrix baselines (envs/hackmatrix/scripted.py), and evaluate.py --scripted playing one."""

import json

import jax
import numpy as np

from hephaestus.envs.hackmatrix import make_state
from hephaestus.envs.hackmatrix.constants import A_SIPHON
from hephaestus.envs.hackmatrix.observe import action_mask
from hephaestus.envs.hackmatrix.scripted import exit_rush, exit_rush_siphon

UP, DOWN, LEFT, RIGHT = 0, 1, 2, 3  # R5: row + 1, row - 1, col - 1, col + 1


def actions(policy, state, n=32):
    """The policy's actions in `state` under n keys."""
    keys = jax.random.split(jax.random.key(0), n)
    return set(np.asarray(jax.jit(jax.vmap(policy, in_axes=(None, None, 0)))(state, action_mask(state), keys)).tolist())


def test_exit_rush_steps_toward_the_exit_around_blocks_and_breaks_ties_at_random():
    assert actions(exit_rush, make_state(player=(2, 2), exit=(2, 5))) == {RIGHT}
    # the straight way is blocked: around, up first (the only neighbour that gets nearer)
    assert actions(exit_rush, make_state(player=(0, 0), exit=(0, 5), blocks=[{"pos": (0, 1)}])) == {UP}
    # a block straight ahead: round it on either side, and on the shorter side once the other is walled
    ahead = [{"pos": (4, 2)}]
    assert actions(exit_rush, make_state(player=(3, 2), exit=(5, 2), blocks=ahead)) == {LEFT, RIGHT}
    assert actions(exit_rush, make_state(player=(3, 2), exit=(5, 2), blocks=ahead + [{"pos": (4, 1)}])) == {RIGHT}
    assert actions(exit_rush, make_state(player=(0, 0), exit=(5, 5))) == {UP, RIGHT}  # two shortest ways


def test_exit_rush_siphon_siphons_whenever_it_holds_a_siphon():
    holding = make_state(player=(2, 2), exit=(2, 5), siphons=1)
    assert actions(exit_rush_siphon, holding) == {A_SIPHON}
    assert actions(exit_rush_siphon, make_state(player=(2, 2), exit=(2, 5))) == {RIGHT}
    assert actions(exit_rush, holding) == {RIGHT}


def test_evaluate_scripted_plays_the_baseline_through_the_evaluation_program(tmp_path, capsys):
    from hephaestus.evaluate_agent import main

    out = tmp_path / "rush.json"
    assert main(["--scripted", "exit-rush", "--env", "hackmatrix", "--episodes", "8", "--max-steps", "60",
                 "--json", str(out)]) == 0
    assert "scripted policy exit-rush" in capsys.readouterr().out
    metrics = json.loads(out.read_text())["metrics"]
    # Running for the exit clears stage 1 in almost every game (97.5% of 200 measured); the masked-uniform random
    # policy in 16%, so 6 of 8 is beyond its reach (p ~ 1e-4). It never siphons or plays a program.
    assert metrics["eval/stage_reached>=2"] >= 0.75
    assert metrics["eval/siphons_used_per_episode"] == 0 and metrics["eval/programs_played_per_episode"] == 0
