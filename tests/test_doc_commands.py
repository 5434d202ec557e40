"""Every command the docs show runs: each ```bash block of README.md and specs/ (result pages included) is parsed, its
`python scripts/...` commands are run in order at a tiny budget in a fresh folder (in this process, as Python runs a
script: `_run`), and a non-zero exit fails.

Nothing is listed by hand: a command added to the docs is tested the next time the suite runs. The rules
below are the only exceptions and rewrites; each says why.

Not run (cannot run here by nature):
  * `pip install ...`            installs packages over the network (the suite runs with them installed).
  * `python -m pytest ...`       the suite itself.
  * `scripts/tpu/*.py`           drive `gcloud` against a Cloud TPU VM (tests/test_tpu_scripts.py runs them
                                 against a fake gcloud).
  * `watch_agent.py --window`    needs a display.

Rewritten so that they are fast (the command is otherwise run as written):
  * train_purejaxrl.py, and scripts whose --help offers --total-timesteps (sweep.py; not bench.py):
                                 TINY_TRAIN is appended (argparse keeps the last value), so any --num-envs or
                                 --total-timesteps in the docs is overridden; a --resume gets a budget one
                                 update larger, so it trains; the final evaluation runs 2 episodes of at
                                 most 20 steps (as evaluate.py below: the same compiled program). A sweep
                                 also gets `--seeds 1` (TINY_SWEEP: its points still share one program;
                                 tests/test_sweep.py checks several seeds).
  * watch_agent.py               one short episode (`--episodes 1 --max-steps 20`).
  * evaluate.py                  two episodes of at most 20 steps (`--episodes 2 --batch-size 2 --max-steps 20`).
  * scripts/experiments/*.py     run with `--quick` (their documented quick mode) if `--help` offers it, else
                                 only `--help` (a full experiment takes hours). Those a test of their own runs
                                 `--quick` (TESTED_ELSEWHERE) get only `--help` here: the same minute twice.
  * `RUN` (a placeholder)        the name of a run this test trains first (TINY_TRAIN); `--latest` finds it too.
  * `checkpoints/<run>/<n>/`     a step the tiny run did not reach becomes the run's earliest step directory.
  * `checkpoints/pretrained/<x>` a shipped agent of this checkout: run from the checkout where it is there, else
                                 (not shipped in this checkout) the tiny run stands in for it, as for `RUN`.

Like every test, the commands compile with LLVM at -O0 (tests/conftest.py): they check that a command works, not
its speed.
"""

import contextlib
import functools
import io
import os
import re
import runpy
import shlex
import sys
import traceback
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "specs").rglob("*.md"))]  # result pages (specs/results/) too

TINY_TRAIN = ["--num-envs", "2", "--num-steps", "16", "--total-timesteps", "64", "--num-minibatches", "1",
              "--update-epochs", "1", "--hidden-dim", "16", "--num-layers", "1", "--log-interval", "1",
              "--save-interval", "1", "--no-wandb",
              # the end-of-run evaluation at the same tiny size as TINY_EVALUATE: one compiled program for both
              "--final-eval-episodes", "2", "--eval-episodes", "2", "--eval-max-steps", "20"]
TINY_SWEEP = ["--seeds", "1"]  # a sweep's points still share one program; a one-agent sweep is the tiny run's program
RESUME_TIMESTEPS = "96"  # one update more than TINY_TRAIN's 2 updates of 2 x 16 steps (16: --dtc-seq-len divides it)
TINY_WATCH = ["--episodes", "1", "--max-steps", "20"]
TINY_EVALUATE = ["--episodes", "2", "--batch-size", "2", "--max-steps", "20"]  # last flag wins

# Experiment scripts whose --quick run a test of their own makes (with at least the flags the docs show).
TESTED_ELSEWHERE = {"scripts/experiments/deepsea.py": "tests/test_exploration.py",
                    "scripts/experiments/hackmatrix_late_starts.py": "tests/test_hackmatrix_experiments.py",
                    "scripts/experiments/hackmatrix_handoff.py": "tests/test_hackmatrix_experiments.py",
                    "scripts/experiments/hackmatrix_advantage_shares.py": "tests/test_hackmatrix_experiments.py",
                    "scripts/experiments/hackmatrix_undo_after_exit.py": "tests/test_hackmatrix_experiments.py"}

SKIP_RULES = [  # (pattern on the command, reason)
    (re.compile(r"^pip install\b"), "installs packages over the network"),
    (re.compile(r"^python -m pytest\b"), "the test suite itself"),
    (re.compile(r"\bscripts/tpu/"), "drives gcloud against a Cloud TPU VM (tests/test_tpu_scripts.py)"),
    (re.compile(r"\bwatch_agent\.py\b.*--window\b"), "needs a display"),
]


def bash_blocks(path: Path):
    """The ```bash blocks of a markdown file: (first line number, text)."""
    lines = path.read_text().splitlines()
    blocks, start = [], None
    for i, line in enumerate(lines):
        if start is None and line.strip() == "```bash":
            start = i + 1
        elif start is not None and line.strip() == "```":
            blocks.append((start + 1, "\n".join(lines[start:i])))
            start = None
    return blocks


def block_commands(text: str):
    """Shell commands in a block: continuation lines joined, comments dropped, `a && b` split."""
    commands = []
    for line in text.replace("\\\n", " ").splitlines():
        line = re.split(r"(?:^|\s)#", line, maxsplit=1)[0].strip()
        commands += [part.strip() for part in line.split("&&") if part.strip()]
    return commands


def skip_reason(command: str):
    return next((reason for pattern, reason in SKIP_RULES if pattern.search(command)), None)


def doc_blocks():
    """One pytest param per bash block holding at least one command this test runs."""
    params = []
    for doc in DOCS:
        for line, text in bash_blocks(doc):
            runnable = [c for c in block_commands(text) if c.startswith("python scripts/") and not skip_reason(c)]
            if runnable:
                params.append(pytest.param(runnable, id=f"{doc.name}:{line}"))
    return params


class Result(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def _run(argv, cwd):
    """`python SCRIPT ARGS...` in `cwd`, run in this process as Python runs a script (runpy, `__name__` ==
    "__main__", sys.argv set): the exit code and what it printed. In-process, not a subprocess: each command
    would otherwise pay a Python and jax start of its own (about 100 s of the suite over the docs' commands), and
    programs the commands share (the tiny runs' chunks) are traced and compiled once."""
    out, err, code = io.StringIO(), io.StringIO(), 0
    saved_argv, saved_cwd, saved_mode = sys.argv, os.getcwd(), os.environ.get("WANDB_MODE")
    sys.argv = [str(a) for a in argv]
    os.environ["WANDB_MODE"] = "disabled"
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_path(str(argv[0]), run_name="__main__")
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
                if isinstance(stop.code, str):
                    err.write(stop.code + "\n")
            except Exception:  # a traceback fails the command, as Python's exit code 1 would
                err.write(traceback.format_exc())
                code = 1
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        if saved_mode is None:
            os.environ.pop("WANDB_MODE", None)
        else:
            os.environ["WANDB_MODE"] = saved_mode
    return Result(code, out.getvalue(), err.getvalue())


@functools.lru_cache(maxsize=None)
def _help(script: str) -> str:
    return _run([script, "--help"], ROOT).stdout


def _earliest_step(run_dir: Path):
    steps = sorted(int(p.name) for p in run_dir.iterdir() if p.is_dir() and p.name.isdigit())
    return run_dir / str(steps[0]) if steps else run_dir


PRETRAINED = "checkpoints/pretrained/"


def _pretrained(arg: str, run_name: str) -> str:
    """A shipped agent's path: the checkout's copy where it exists, else the tiny run's folder."""
    return str(ROOT / arg) if (ROOT / arg).exists() else f"checkpoints/{run_name}"


def _needs_run(commands) -> bool:
    """Whether a block names a run it does not train: `RUN`, `--latest`, or a shipped agent not in this checkout."""
    args = [a for c in commands for a in shlex.split(c)]
    return any(a == "RUN" or "/RUN" in a or a == "--latest" or (a.startswith(PRETRAINED) and not (ROOT / a).exists())
               for a in args)


def rewrite(command: str, cwd: Path, run_name: str):
    """The argv (script first) to run for a doc command, after the rules in the module docstring."""
    argv = shlex.split(command)[1:]  # drop "python"
    script = argv[0]
    argv[0] = str(ROOT / script)
    argv = [run_name if a == "RUN" else a.replace("/RUN/", f"/{run_name}/").replace("/RUN", f"/{run_name}")
            for a in argv]
    argv = [_pretrained(a, run_name) if a.startswith(PRETRAINED) else a for a in argv]
    for i, arg in enumerate(argv):  # a step directory the tiny run did not reach -> its earliest step
        m = re.fullmatch(r"(checkpoints/[^/]+)/(\d+)/?", arg)
        if m and not (cwd / arg).exists() and (cwd / m.group(1)).is_dir():
            argv[i] = str(_earliest_step(cwd / m.group(1)).relative_to(cwd))
    if script.endswith("train_purejaxrl.py") or (script != "scripts/bench.py" and "--total-timesteps" in _help(argv[0])):
        argv += TINY_TRAIN  # the trainer, and scripts built on its flags (scripts/sweep.py)
        if script.endswith("sweep.py"):
            argv += TINY_SWEEP
        if "--resume" in argv:
            argv += ["--total-timesteps", RESUME_TIMESTEPS]
    elif script.endswith("watch_agent.py"):
        argv += TINY_WATCH
    elif script.endswith("evaluate.py"):
        argv += TINY_EVALUATE
    elif script.startswith("scripts/experiments/"):
        if "--quick" not in _help(argv[0]) or script in TESTED_ELSEWHERE:
            return [argv[0], "--help"]
        argv += [] if "--quick" in argv else ["--quick"]
    return argv


def test_doc_commands_are_found():
    """The parser sees the README's commands (a broken parser would make the test below vacuous)."""
    found = [c for p in doc_blocks() for c in p.values[0]]
    assert any("--env jumanji:Snake-v1" in c for c in found)
    assert any("watch_agent.py" in c for c in found) and any("inspect_checkpoint.py" in c for c in found)
    assert any(c.startswith("python scripts/experiments/") for c in found)
    for script, test in TESTED_ELSEWHERE.items():  # the rule holds only while that test runs the script --quick
        text = (ROOT / test).read_text()
        assert Path(script).name in text and '"--quick"' in text
    readme = (ROOT / "README.md").read_text()
    assert skip_reason("python scripts/tpu/create.py $NAME --zone $ZONE") and "scripts/tpu/" in readme
    assert not skip_reason("python scripts/train_purejaxrl.py --env jumanji:Snake-v1")
    shipped = "python scripts/watch_agent.py checkpoints/pretrained/hackmatrix"
    watch_section = readme.split("## Watch an agent", 1)[1]
    first = next(line for line in watch_section.splitlines() if line.startswith("python "))
    assert first.startswith(shipped)  # the watch section starts with the shipped HackMatrix agent
    assert _needs_run([shipped]) != (ROOT / "checkpoints/pretrained/hackmatrix").exists()
    assert rewrite(shipped, ROOT, "doc-run")[1] in (str(ROOT / "checkpoints/pretrained/hackmatrix"),
                                                    "checkpoints/doc-run")


# One xdist group: the blocks run one after another on one worker, so the programs many of them share (the tiny
# HackMatrix and CartPole runs, a sweep's batched agents) are compiled once and read from the compilation cache
# after that. Run side by side, two blocks compiled the same HackMatrix program at once: 53 s against 15 s warm.
@pytest.mark.heavy
@pytest.mark.xdist_group("doc-commands")
@pytest.mark.parametrize("commands", doc_blocks())
def test_doc_block_runs(commands, tmp_path):
    run_name = "doc-run"
    if _needs_run(commands) and not any("train_purejaxrl.py" in c for c in commands):
        result = _run([str(ROOT / "scripts/train_purejaxrl.py"), "--env", "gymnax:CartPole-v1",
                       "--run-name", run_name, *TINY_TRAIN], tmp_path)
        assert result.returncode == 0, result.stderr[-2000:]
    for command in commands:
        result = _run(rewrite(command, tmp_path, run_name), tmp_path)
        assert result.returncode == 0, f"`{command}` exited {result.returncode}:\n{result.stderr[-3000:]}"
