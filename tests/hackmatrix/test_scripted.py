"""Scripted HackMatrix baselines (envs/hackmatrix/scripted.py), and evaluate.py --scripted playing one."""

import functools
import json

import jax
import numpy as np
import pytest

from hephaestus.envs.hackmatrix import make_state
from hephaestus.envs.hackmatrix.constants import A_RESET, A_SIPHON, A_UNDO, A_WAIT, P_ROW
from hephaestus.envs.hackmatrix.observe import action_mask
from hephaestus.envs.hackmatrix.scripted import (
    exit_rush, exit_rush_collector, exit_rush_deep, exit_rush_programs, exit_rush_safe, exit_rush_siphon,
)

# One worker runs this module, so its cached policy programs compile once (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("test_scripted")

UP, DOWN, LEFT, RIGHT = 0, 1, 2, 3  # R5: row + 1, row - 1, col - 1, col + 1


@functools.cache
def _compiled(policy):
    return jax.jit(jax.vmap(policy, in_axes=(None, None, 0)))  # one program per policy: states share shapes


def actions(policy, state, n=32):
    """The policy's actions in `state` under n keys."""
    keys = jax.random.split(jax.random.key(0), n)
    return set(np.asarray(_compiled(policy)(state, action_mask(state), keys)).tolist())


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


def test_exit_rush_safe_and_programs_step_around_an_enemy_they_would_end_beside():
    # Straight on to the exit, (2,3) is beside the daemon at (3,3): one hit in its phase (R56). Left or down
    # cost one step more and no hit; the plain rusher takes the hit.
    beside = make_state(player=(2, 2), exit=(2, 5), enemies=[{"type": "daemon", "pos": (3, 3)}])
    assert actions(exit_rush, beside) == {RIGHT}
    assert actions(exit_rush_safe, beside) == {DOWN, LEFT}
    assert actions(exit_rush_programs, beside) == {DOWN, LEFT}
    # Beside and in line: shooting it (R42) stuns it for its phase (R22), so staying beside it is safe; counted
    # as still acting, any step away (one longer, no hit) would look better.
    in_line = make_state(player=(2, 2), exit=(2, 5), enemies=[{"type": "daemon", "pos": (2, 3)}])
    assert actions(exit_rush_safe, in_line) == {RIGHT}
    # A stunned daemon does not act in the next phase (R22): straight on again.
    stunned = make_state(player=(2, 2), exit=(2, 5), enemies=[{"type": "daemon", "pos": (3, 3), "stunned": True}])
    assert actions(exit_rush_programs, stunned) == {RIGHT}
    # A virus moves twice (R54): two steps away is as near as beside.
    virus = make_state(player=(2, 2), exit=(2, 5), enemies=[{"type": "virus", "pos": (4, 3)}])
    assert actions(exit_rush_programs, virus) == {DOWN, LEFT}


def test_exit_rush_deep_plays_the_enemy_phase_itself():
    # The daemon beside (2,3): deep also steps around it, since its own enemy phase deals the hit.
    beside = make_state(player=(2, 2), exit=(2, 5), enemies=[{"type": "daemon", "pos": (3, 3)}])
    assert actions(exit_rush_deep, beside) <= {DOWN, LEFT}
    # A cryptog out of the player's row and column is hidden (R20): the safe rusher counts only what the
    # observation shows and walks beside it; deep plays the real phase, where it attacks (R56), and goes round.
    hidden = make_state(player=(2, 2), exit=(2, 5), enemies=[{"type": "cryptog", "pos": (3, 3)}])
    assert actions(exit_rush_safe, hidden) == {RIGHT}
    assert actions(exit_rush_deep, hidden) <= {DOWN, LEFT}
    # Nothing near: straight for the exit.
    assert actions(exit_rush_deep, make_state(player=(2, 2), exit=(2, 5))) == {RIGHT}


def test_exit_rush_programs_plays_an_owned_program_when_its_moment_comes():
    # ROW (3 credits, 1 energy) on an unstunned enemy in the player's row; not on a stunned one, not unpaid.
    in_row = dict(player=(2, 0), exit=(5, 5), owned=["ROW"], credits=3, energy=1)
    assert actions(exit_rush_programs, make_state(**in_row, enemies=[{"type": "daemon", "pos": (2, 5)}])) == {5 + P_ROW}
    assert 5 + P_ROW not in actions(exit_rush_programs,
                                    make_state(**in_row, enemies=[{"type": "daemon", "pos": (2, 5), "stunned": True}]))
    assert 5 + P_ROW not in actions(exit_rush_programs, make_state(**{**in_row, "credits": 2},
                                                                   enemies=[{"type": "daemon", "pos": (2, 5)}]))
    # RESET (4 energy) at 1 HP, not at 2 (R115's waste).
    assert actions(exit_rush_programs, make_state(player=(2, 2), hp=1, owned=["RESET"], energy=4)) == {A_RESET}
    assert A_RESET not in actions(exit_rush_programs, make_state(player=(2, 2), hp=2, owned=["RESET"], energy=4))


def test_exit_rush_programs_detours_for_pick_ups_and_siphons_where_the_cross_pays():
    # Up or right are both shortest to (5,5); only right passes the pick-up at (0,5).
    assert actions(exit_rush, make_state(player=(0, 0), exit=(5, 5), data_siphons=[(0, 5)])) == {UP, RIGHT}
    assert actions(exit_rush_programs, make_state(player=(0, 0), exit=(5, 5), data_siphons=[(0, 5)])) == {RIGHT}
    # Holding a siphon on a cross of 6 credits and 3 energy: siphon. On a cross whose data block would release 9
    # transmissions (R49) and that holds nothing else: walk on.
    rich = {(2, 2): ("credits", 3), (3, 2): ("credits", 3), (2, 1): ("energy", 3)}
    assert actions(exit_rush_programs, make_state(player=(2, 2), exit=(2, 5), siphons=1, resources=rich)) == {A_SIPHON}
    costly = [{"pos": (3, 2), "kind": "data", "points": 9}]
    assert actions(exit_rush_programs, make_state(player=(2, 2), exit=(2, 5), siphons=1, blocks=costly)) == {RIGHT}


def test_exit_rush_collector_siphons_for_a_first_program_the_programs_teacher_passes_by():
    # A program block that releases 4 transmissions: worth 3 - 4 to exit-rush-programs (walk on), at least 8 - 4
    # to the collector while it owns no program (siphon), and 3 - 4 again once it owns one.
    block = [{"pos": (3, 2), "kind": "program", "program": "ROW", "spawn": 4}]
    first = make_state(player=(2, 2), exit=(2, 5), siphons=1, blocks=block)
    assert actions(exit_rush_programs, first) == {RIGHT}
    assert actions(exit_rush_collector, first) == {A_SIPHON}
    owning = make_state(player=(2, 2), exit=(2, 5), siphons=1, blocks=block, owned=["SHOW"])
    assert actions(exit_rush_collector, owning) == {RIGHT}


def test_exit_rush_collector_plays_what_it_owns_when_the_next_step_would_kill():
    # Cornered at (0,0) with a daemon diagonal at (1,1): both ways on end beside it (one hit, R56). At 1 HP the
    # collector plays its WAIT (no moment of its own) or POLY as a last resort, never UNDO; at 2 HP it walks, and
    # exit-rush-programs never plays them.
    cornered = dict(player=(0, 0), exit=(5, 5), enemies=[{"type": "daemon", "pos": (1, 1)}], credits=1, energy=1)
    assert actions(exit_rush_collector, make_state(**cornered, hp=1, owned=["WAIT", "UNDO"])) == {A_WAIT}
    undoable = make_state(**cornered, hp=1, owned=["UNDO"], history=[make_state(**cornered, hp=1, owned=["UNDO"])])
    assert action_mask(undoable)[A_UNDO] and actions(exit_rush_collector, undoable) <= {UP, RIGHT}
    assert actions(exit_rush_collector, make_state(**cornered, hp=2, owned=["WAIT"])) <= {UP, RIGHT}
    assert actions(exit_rush_programs, make_state(**cornered, hp=1, owned=["WAIT"])) <= {UP, RIGHT}


def test_evaluate_scripted_plays_the_baseline_through_the_evaluation_program(tmp_path, capsys):
    from hephaestus.tools.evaluate_agent import main

    out = tmp_path / "rush.json"
    assert main(["--scripted", "exit-rush", "--env", "hackmatrix", "--episodes", "8", "--max-steps", "60",
                 "--json", str(out)]) == 0
    assert "scripted policy exit-rush" in capsys.readouterr().out
    metrics = json.loads(out.read_text())["metrics"]
    # Running for the exit clears stage 1 in almost every game (97.5% of 200 measured); the masked-uniform random
    # policy in 16%, so 6 of 8 is beyond its reach (p ~ 1e-4). It never siphons or plays a program.
    assert metrics["eval/stage_reached>=2"] >= 0.75
    assert metrics["eval/siphons_used_per_episode"] == 0 and metrics["eval/programs_played_per_episode"] == 0


def test_every_scripted_policy_is_named_where_users_choose_one():
    """evaluate.py --help (--scripted), the --teacher flag's help and the README's option table list the names by
    hand; a new policy missing from one of them (exit-rush-deep was, in evaluate.py) fails here."""
    import pathlib
    import re

    from hephaestus.run.cli import build_parser as build_train_parser
    from hephaestus.envs.hackmatrix.scripted import POLICIES
    from hephaestus.tools.evaluate_agent import build_parser as build_eval_parser

    def option_help(parser, dest):
        return next(a.help for a in parser._actions if a.dest == dest)

    readme_row = next(line for line in (pathlib.Path(__file__).parents[2] / "README.md").read_text().splitlines()
                      if line.startswith("| `--teacher`"))
    lists = {"evaluate.py --scripted": option_help(build_eval_parser(), "scripted"),
             "train --teacher": option_help(build_train_parser(), "teacher"), "README --teacher row": readme_row}
    for where, text in lists.items():
        for name in POLICIES:  # the whole name: exit-rush must not be found inside exit-rush-safe
            assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text), f"{name} missing from {where}"
