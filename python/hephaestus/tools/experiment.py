"""The experiments' shared harness (scripts/experiments/*.py): their parser, where results go, agents, games.

* `parser(name, doc)`: an argparse parser with one-line errors and `--out PREFIX`, where the script writes
  PREFIX.json, PREFIX.md and PREFIX.png. The default is `checkpoints/experiments/<name>`: results go under
  checkpoints/ (ignored by git, where runs go), never into the working directory. `--out x.json` means `x`.
* `check_out(p, out, name)`: --out checked before the work (the default's folder made); `write_json`, `write_md`,
  `save_figure` write the three files, `write_results` all three at once.
* `seeds(args)` / `add_seeds(p)`: the training command's `--seed` and `--num-seeds` (seeds S .. S + n - 1).
* `load_agent(p, path)`: `hephaestus.load_agent` with a bad path or file as the parser's one-line error.

Nothing here imports jax at module level, so a script's `--help` stays instant.
"""

from __future__ import annotations

import argparse
import json
import os

RESULTS_DIR = os.path.join("checkpoints", "experiments")


def default_out(name: str) -> str:
    """`checkpoints/experiments/<name>`: where an experiment's results go unless --out says otherwise."""
    return os.path.join(RESULTS_DIR, name)


def parser(name: str, description: str, out_help: str = "writes OUT.json, OUT.md and OUT.png",
           **kwargs) -> argparse.ArgumentParser:
    """The experiment's parser (the commands' one-line errors, exit 2), with `--out` (a results prefix, default
    under checkpoints/experiments/)."""
    from hephaestus.run.cli import OneLineParser

    p = OneLineParser(prog=f"{name}.py", description=description, **kwargs)
    add_out(p, name, out_help)
    return p


def add_out(p: argparse.ArgumentParser, name: str, out_help: str = "writes OUT.json, OUT.md and OUT.png") -> None:
    p.add_argument("--out", default=default_out(name), metavar="OUT",
                   help=f"results prefix: {out_help} (default: {default_out(name)})")


def add_seeds(p: argparse.ArgumentParser, num_seeds: int = 1) -> None:
    """--seed and --num-seeds, as the training command has them."""
    p.add_argument("--seed", type=int, default=0, help="the first seed (default 0)")
    p.add_argument("--num-seeds", type=int, default=num_seeds,
                   help=f"seeds --seed .. --seed + n - 1 (default {num_seeds})")


def seeds(args) -> list[int]:
    return list(range(args.seed, args.seed + args.num_seeds))


def check_out(p: argparse.ArgumentParser, out: str, name: str) -> str:
    """`--out` checked before any work: the default's folder is made; a folder given that does not exist is the
    parser's one-line error (a typo costs no run). Returns the prefix (`x.json` means `x`)."""
    if out == default_out(name):
        return out_prefix(out)
    if not os.path.isdir(os.path.dirname(os.path.abspath(out))):
        p.error(f"--out {out}: directory does not exist")
    return out[:-len(".json")] if out.endswith(".json") else out


def out_prefix(out: str) -> str:
    """The results prefix of `--out` (`x.json` means `x`), with its folder made."""
    if out.endswith(".json"):
        out = out[:-len(".json")]
    folder = os.path.dirname(os.path.abspath(out))
    os.makedirs(folder, exist_ok=True)
    return out


def write_json(out: str, data, **kwargs) -> str:
    path = out_prefix(out) + ".json"
    with open(path, "w") as f:
        json.dump(data, f, **{"indent": 1, "default": float, **kwargs})
    return path


def write_md(out: str, text: str) -> str:
    path = out_prefix(out) + ".md"
    with open(path, "w") as f:
        f.write(text if text.endswith("\n") else text + "\n")
    return path


def write_results(out: str, results, lines: list[str], plot_fn=None) -> list[str]:
    """OUT.json (`results`), OUT.md (the table `lines`, also printed) and OUT.png (`plot_fn(results, path)`, if
    given): the three files of an experiment, their paths printed and returned."""
    paths = [write_json(out, results, indent=None), write_md(out, "\n".join(lines))]
    print("\n".join(lines))
    if plot_fn is not None:
        paths.append(out_prefix(out) + ".png")
        plot_fn(results, paths[-1])
    print(f"results: {', '.join(paths)}")
    return paths


def save_figure(fig, out: str, **kwargs) -> str:
    """`fig` (matplotlib) as OUT.png, closed after."""
    import matplotlib.pyplot as plt

    path = out_prefix(out) + ".png"
    fig.savefig(path, **kwargs)
    plt.close(fig)
    return path


def load_agent(p: argparse.ArgumentParser, path: str, **kwargs):
    """`hephaestus.load_agent(path, **kwargs)`; a bad path, file or env is the parser's one-line error (exit 2)."""
    from hephaestus.tools.saved_agent import LoadError, load_agent as load
    from hephaestus.envs.registry import UnknownEnvError

    try:
        return load(path, **kwargs)
    except (LoadError, UnknownEnvError) as err:
        p.error(str(err))
