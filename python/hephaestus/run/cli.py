"""Command line -> TrainConfig. Bad input becomes a one-line error and exit code 2, never a traceback.

The flags are generated from the config's dataclasses (config.options()): one flag per option, named by its flat
name (`--num-envs`) or its field's "flag" metadata (`--project`), help from the field's docstring, grouped by
section. Only flags given on the command line change anything: a parsed namespace holds nothing else, so the same
flags apply on top of the defaults, of a `--config` file, or of a resumed checkpoint's stored config:

    defaults  <  --config FILE (and its base: chain)  <  flags           a new run
    checkpoint's resolved config  <  --config FILE  <  flags             --resume

Why argparse and not tyro (the issue's suggestion): tyro's errors are multi-line boxes with its own wording, and
the one-line argparse messages ("invalid int value", "unrecognized arguments", "invalid choice: 'conv'") and
`--dtc-bootstrap 0|1` are part of the interface the tests pin; generating argparse from the same dataclasses
keeps them with ~60 lines.
"""

from __future__ import annotations

import argparse
import math
import sys

from hephaestus.config.train_config import Option, TrainConfig, env_param_name, env_params_of, options


class OneLineParser(argparse.ArgumentParser):
    """argparse prints the whole usage on an error; users asked for the one line that matters."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def number(text: str) -> int:
    """Accept 1e8, 1_000_000, 5e5 for step counts."""
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    if value != int(value):
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    return int(value)


def _bool01(text: str) -> bool:
    if text not in ("0", "1"):
        raise argparse.ArgumentTypeError(f"expected 0 or 1, got {text!r}")
    return text == "1"


def comma_separated(text: str) -> tuple[str, ...]:
    """A comma-separated flag value as a tuple of its non-empty, stripped items (the "csv" options' parser)."""
    return tuple(s.strip() for s in text.split(",") if s.strip())


def whole_numbers(text: str) -> tuple[int, ...]:
    try:
        return tuple(number(s) for s in comma_separated(text))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from None


def _add_option(group, option: Option) -> None:
    kind, choices = option.kind()
    help_text = f"{option.help} (default: {option.default_text()})".replace("%", "%%")
    kwargs = dict(dest=option.flat, default=argparse.SUPPRESS, help=help_text)
    if kind == "bool" and option.metadata.get("values") != "01":
        group.add_argument(option.flag, action=argparse.BooleanOptionalAction, **kwargs)
        return
    if not choices:
        kwargs.update(metavar=option.metadata.get("metavar", option.flag[2:].upper().replace("-", "_")))
    if kind == "bool":
        kwargs.update(type=_bool01, metavar="0|1")
    elif kind == "tuple":
        kwargs.update(type=comma_separated if option.element is str else whole_numbers,
                      metavar=option.metadata.get("metavar", "NAME[,NAME...]"))
    elif option.metadata.get("parse") == "number":
        kwargs.update(type=number)
    elif choices:
        kwargs.update(choices=choices)
    else:
        kwargs.update(type={"int": int, "float": float, "str": str}[kind])
    group.add_argument(option.flag, **kwargs)


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    """Every option of TrainConfig as a flag, plus --config."""
    g = p.add_argument_group("config files")
    g.add_argument("--config", default=None, metavar="FILE",
                   help="a YAML file of options (configs/*.yaml; `base: other.yaml` inherits one); flags given here "
                        "override it")
    groups = {}
    for option in options().values():
        if option.group not in groups:
            groups[option.group] = p.add_argument_group(option.group)
        _add_option(groups[option.group], option)


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="train_purejaxrl.py",
                      description="Train PPO with the whole loop (env, rollout, GAE, update) compiled into one "
                                  "XLA program. Prints one line per chunk and writes "
                                  "<checkpoint-dir>/<run-name>/metrics.jsonl.")
    add_train_arguments(p)
    return p


def given(args: argparse.Namespace) -> dict:
    """{flat name: value} of the options given on the command line."""
    table = options()
    return {name: value for name, value in vars(args).items() if name in table}


def base_config(args: argparse.Namespace, under: TrainConfig | None = None) -> TrainConfig:
    """What the flags apply on top of: `under` (default: the defaults; a resumed run's stored config), with the
    --config file's values over it where one is given."""
    base = TrainConfig() if under is None else under
    if getattr(args, "config", None):
        from hephaestus.config.files import load_config_file

        base = load_config_file(args.config, base)
    return base


def config_from_args(args: argparse.Namespace, base: TrainConfig | None = None) -> TrainConfig:
    """`base` (default: the defaults, or the --config file's) with the flags given on the command line."""
    return (base_config(args) if base is None else base).replace(**given(args))


def parse(argv=None) -> tuple[TrainConfig, object]:
    """(unresolved config, the located --resume checkpoint or None) of a training command line. ConfigError or
    checkpoint.CheckpointError (one line) for bad input; argparse exits 2 itself on a malformed flag."""
    args = build_parser().parse_args(argv)
    resume_path = getattr(args, "resume", "")
    ckpt = None
    if resume_path:
        from hephaestus.run.checkpoint import config_of, locate

        ckpt = locate(resume_path)
    # a resumed run starts from the resolved config it was trained with, stored in its own run folder
    base = base_config(args, None if ckpt is None else config_of(ckpt))
    flags = given(args)
    config = base.replace(**flags)
    if "env_params" in flags:  # the list under it: the same flags without it
        note_replaced_env_params(base.replace(**{k: v for k, v in flags.items() if k != "env_params"}), config)
    return config, ckpt


def note_replaced_env_params(before: TrainConfig, after: TrainConfig) -> None:
    """A --env-params list replaces the list under it (the env family's default, a --config file's, a resumed
    run's), so the names it leaves out go back to the env's own defaults. Say which, on stderr: adding one value
    to a HackMatrix run without repeating its list drops the run's training reward."""
    kept = {env_param_name(item) for item in env_params_of(after.env)}
    dropped = [item for item in env_params_of(before.env) if env_param_name(item) not in kept]
    if dropped:
        print(f"note: --env-params replaces the list it is given over; no longer set: {','.join(dropped)} "
              "(list them again to keep them)", file=sys.stderr)


def fail(message: str, code: int = 2):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)
