"""scripts/experiments/hackmatrix_late_starts.py: games started on later stages, counted by the stage they began on."""
import json
import os
import subprocess
import sys

from hephaestus.entry_points import load_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "experiments", "hackmatrix_late_starts.py")


def test_games_are_counted_by_the_stage_they_began_on():
    late = load_script(SCRIPT, "hackmatrix_late_starts")
    zeros = [0] * 5
    # began on 3 and died there; began on 3, cleared 3 and 4, died on 5; began on 8 and won; began on 7 and won
    # with UNDO played; began on 7, cleared it, died on 8
    stats = {"stage_reached": [3, 5, 8, 8, 8], "stages_cleared": [0, 2, 1, 2, 1],
             "victory": [False, False, True, True, False], "program_UNDO": [0, 0, 0, 4, 0], "other": zeros}
    assert late.start_stages(stats).tolist() == [3, 3, 8, 7, 7]
    rows = late.by_start_stage(stats)
    assert sorted(rows) == [3, 7, 8]
    assert rows[3] == {"games": 2, "clear_own": 0.5, "victory": 0.0, "victory_without_undo": 0.0,
                       "stages_cleared": 1.0}
    assert rows[7]["games"] == 2 and rows[7]["clear_own"] == 1.0 and rows[7]["victory"] == 0.5
    assert rows[7]["victory_without_undo"] == 0.0  # its one victory played UNDO
    assert rows[8] == {"games": 1, "clear_own": 1.0, "victory": 1.0, "victory_without_undo": 1.0,
                       "stages_cleared": 1.0}


def test_quick_run_plays_every_policy_on_the_same_late_starts_and_bad_input_is_one_line(tmp_path):
    out = tmp_path / "late"
    proc = subprocess.run([sys.executable, SCRIPT, "--random", "--scripted", "exit-rush", "--max-stage", "3",
                           "--quick", "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((tmp_path / "late.json").read_text())
    results = data["by_start_stage"]
    assert set(results) == {"random policy", "scripted exit-rush"} and data["max_stage"] == 3
    for rows in results.values():
        assert set(rows) == {"2", "3"}  # every start in 2..max, both drawn in 28 games
        assert sum(r["games"] for r in rows.values()) == data["episodes"] == 28
    # the same games for both policies: the same starts
    assert {s: r["games"] for s, r in results["random policy"].items()} == \
        {s: r["games"] for s, r in results["scripted exit-rush"].items()}
    assert (tmp_path / "late.png").stat().st_size > 0 and "| scripted exit-rush | 2 |" in proc.stdout
    for bad_args, said in (([], "give agents"), (["--random", "--max-stage", "9"], "--max-stage"),
                           (["--scripted", "no-such-policy", "--quick"], "no-such-policy")):
        bad = subprocess.run([sys.executable, SCRIPT, *bad_args, "--out", str(tmp_path / "bad")], capture_output=True,
                             text=True, timeout=300, cwd=tmp_path)
        last = bad.stderr.strip().splitlines()[-1]
        assert bad.returncode == 2 and said in last and "Traceback" not in bad.stderr, bad.stderr[-1000:]


def test_an_agent_argument_may_carry_its_label(tmp_path):
    late = load_script(SCRIPT, "hackmatrix_late_starts")
    assert late.agent_label("default s0=checkpoints/run_s0") == ("default s0", "checkpoints/run_s0")
    assert late.agent_label("checkpoints/run_s0/") == ("run_s0", "checkpoints/run_s0/")
    odd = tmp_path / "a=b"  # a path that holds "=" is a path
    odd.mkdir()
    assert late.agent_label(str(odd)) == ("a=b", str(odd))
