"""make_state (D12): unknown keys are errors; the exit cell and exitPosition can differ (R13, R94)."""
import pytest

from hephaestus.envs.hackmatrix import make_state
from hephaestus.envs.hackmatrix.constants import EXIT, PROGRAM_NAMES

from hm_helpers import cell, step, terms

# The HackMatrix tests' xdist group: one worker compiles the shared step (hm_helpers.step) once (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("hackmatrix")

RIGHT, UP = 3, 0


@pytest.mark.parametrize("kwargs, named", [
    ({"blocks": [{"pos": (2, 2), "spwan": 3}]}, "'spwan'"),
    ({"enemies": [{"type": "virus", "pos": (2, 2), "stuned": True}]}, "'stuned'"),
    ({"transmissions": [{"pos": (2, 2), "turn": 3}]}, "'turn'"),
    ({"blocks": [{"pos": (2, 2), "kind": "date"}]}, "'date'"),
    ({"enemies": [{"type": "viruss", "pos": (2, 2)}]}, "'viruss'"),
    ({"resources": {(2, 2): ("credit", 2)}}, "'credit'"),
    ({"enemies": [{"type": "virus", "pos": (6, 0)}]}, "(6, 0)"),
    ({"transmissions": [{"turns": 2}]}, "'pos'"),
])
def test_D12_make_state_rejects_what_it_does_not_know(kwargs, named):
    with pytest.raises(ValueError, match="make_state") as err:
        make_state(**kwargs)
    msg = str(err.value)
    assert named in msg
    if "key" in msg:                                        # the message lists the known keys
        assert "known keys:" in msg and "pos" in msg


def test_D12_make_state_known_keys_still_build_the_position():
    s = make_state(blocks=[{"pos": (2, 2), "kind": "question", "payload": "program", "program": "WARP",
                            "spawn": 1, "siphoned": False}],
                   enemies=[{"type": "glitch", "pos": (2, 2), "hp": 1, "disabled": 2, "stunned": True,
                             "sched": True, "siphon": True}],
                   transmissions=[{"pos": (4, 4), "turns": 3, "type": "cryptog", "sched": False,
                                   "siphon": True}],
                   resources={(1, 1): ("energy", 2)})
    i = cell(2, 2)
    assert int(s.blk_spawn[i]) == 1 and int(s.blk_program[i]) == PROGRAM_NAMES.index("WARP")
    assert bool(s.blk_question[i]) and int(s.res_energy[cell(1, 1)]) == 2
    assert int(s.ent_hp[0]) == 1 and int(s.ent_disabled[0]) == 2 and bool(s.ent_stunned[0])
    assert int(s.ent_turns[1]) == 3 and int(s.ent_type[1]) == 3 and bool(s.ent_siphon[1])


def test_R13_R94_exit_cell_and_exit_position_can_differ():
    s = make_state(player=(0, 0), exit=(0, 1), exit_pos=(5, 5))
    assert int(s.content[cell(0, 1)]) == EXIT and int(s.content[cell(5, 5)]) != EXIT
    assert int(s.exit_pos) == cell(5, 5)
    assert int(make_state(exit=(0, 1)).exit_pos) == cell(0, 1)          # default: the same cell

    # R45/R94: walking onto the exit *cell* completes the stage; the shaping distance (R108) is
    # measured to exitPosition, 10 steps away, not to the cell just reached
    _, s2, _, term, info = step(s, RIGHT)
    assert int(s2.stage) == 2 and not bool(term)
    assert abs(terms(info)["distance"] - 0.05 * 10) < 1e-6

    # R108/R118: an ordinary move toward exitPosition is shaped even though it leaves the exit cell behind
    _, s3, _, _, info3 = step(s, UP)
    assert int(s3.stage) == 1 and abs(terms(info3)["distance"] - 0.05) < 1e-6

    # R74: WARP lands on exitPosition, which holds no exit content, and completes the stage
    w = make_state(player=(0, 0), exit=(0, 5), exit_pos=(3, 3), credits=2, energy=2, owned=["WARP"],
                   enemies=[{"type": "daemon", "pos": (3, 3)}])
    _, w2, _, _, _ = step(w, 5 + PROGRAM_NAMES.index("WARP"))
    assert int(w2.stage) == 2
