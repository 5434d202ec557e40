"""Adding an agent is one folder under hephaestus/agents/ and one import line in hephaestus/agents/__init__.py:
nothing in the core, the config or the run machinery changes. The test builds a toy agent (a fixed bonus added to
every reward, with its own option) in a copy of the package, registers it with that one line, and trains it
through `--agent` on CartPole."""

import filecmp
import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "python" / "hephaestus"

TOY_INIT = '''
"""A toy agent: a fixed bonus added to every reward (--agent fixed_bonus, --fixed-bonus-value)."""

from dataclasses import dataclass

from hephaestus.config.registry import declare_stage, register_agent, register_options
from hephaestus.core.stages import stage_loader


@register_options("fixed_bonus")
@dataclass(frozen=True)
class FixedBonusOptions:
    value: float = 0.5
    """constant the fixed_bonus stage adds to every reward"""


register_agent("fixed_bonus", ("fixed_bonus",))
declare_stage("fixed_bonus")


@stage_loader("fixed_bonus")
def _load_stages():
    from hephaestus.agents.fixed_bonus import stage  # noqa: F401
'''

TOY_STAGE = '''
import jax.numpy as jnp

from hephaestus.core.stages import Stage, add_intrinsic, register_stage


@register_stage("fixed_bonus")
def fixed_bonus_stage(ctx):
    bonus = jnp.float32(ctx.config.stages.fixed_bonus.value)

    def apply(key, train_state, batch, state):
        before = batch["reward"].mean()
        batch = {**batch, "reward": batch["reward"] + bonus,
                 "intrinsic_reward": add_intrinsic(batch, jnp.full_like(batch["reward"], bonus))}
        return train_state, batch, state, {"fixed_bonus/env_reward_mean": before,
                                           "fixed_bonus/reward_mean": batch["reward"].mean(),
                                           "fixed_bonus/intrinsic_mean": batch["intrinsic_reward"].mean()}

    return Stage(name="fixed_bonus", apply=apply)
'''


def changed_files(before: pathlib.Path, after: pathlib.Path) -> list[str]:
    """Paths (relative) added, removed or changed between two package trees (bytecode caches left out)."""
    def walk(root):
        return {p.relative_to(root).as_posix() for p in root.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts}
    a, b = walk(before), walk(after)
    return sorted((a ^ b) | {p for p in a & b if not filecmp.cmp(before / p, after / p, shallow=False)})


def test_a_new_agent_is_one_folder_and_one_import_line_and_trains_through_the_agent_flag(tmp_path):
    package = tmp_path / "python" / "hephaestus"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    toy = package / "agents" / "fixed_bonus"
    toy.mkdir()
    (toy / "__init__.py").write_text(textwrap.dedent(TOY_INIT).lstrip())
    (toy / "stage.py").write_text(textwrap.dedent(TOY_STAGE).lstrip())
    registration = package / "agents" / "__init__.py"
    lines = registration.read_text().splitlines()
    registration.write_text("\n".join(lines + ["from hephaestus.agents import fixed_bonus  # noqa: F401"]) + "\n")

    assert changed_files(PACKAGE, package) == ["agents/__init__.py", "agents/fixed_bonus/__init__.py",
                                               "agents/fixed_bonus/stage.py"]
    added = set(registration.read_text().splitlines()) - set((PACKAGE / "agents" / "__init__.py").read_text()
                                                             .splitlines())
    assert added == {"from hephaestus.agents import fixed_bonus  # noqa: F401"}

    env = {**os.environ, "PYTHONPATH": str(tmp_path / "python"), "JAX_PLATFORMS": "cpu"}
    code = "import sys; from hephaestus.run import train; sys.exit(train.main(sys.argv[1:]))"
    out = subprocess.run([sys.executable, "-c", code, "--env", "gymnax:CartPole-v1", "--agent", "fixed_bonus",
                          "--fixed-bonus-value", "0.25", "--num-envs", "4", "--num-steps", "16",
                          "--total-timesteps", "128", "--hidden-dim", "16", "--num-layers", "1",
                          "--num-minibatches", "2", "--update-epochs", "1", "--log-interval", "1", "--no-wandb",
                          "--final-eval-episodes", "0", "--run-name", "toy", "--checkpoint-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in (tmp_path / "toy" / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in records] == [1, 2]
    for record in records:  # the reward the advantage stage reads is CartPole's plus the bonus the flag set
        assert record["fixed_bonus/env_reward_mean"] > 0.9, record  # CartPole pays 1 per step
        assert record["fixed_bonus/reward_mean"] == pytest.approx(record["fixed_bonus/env_reward_mean"] + 0.25,
                                                                  abs=1e-6), record
        assert record["fixed_bonus/intrinsic_mean"] == pytest.approx(0.25), record
