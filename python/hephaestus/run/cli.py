"""Command line -> TrainConfig. Bad input becomes a one-line error and exit code 2, never a traceback.

The flags are generated from the config's dataclasses (config.options()): one flag per option, named by its flat
name (`--num-envs`) or its field's "flag" metadata (`--project`), help from the field's docstring, grouped by
section. `--help` shows the common ones (COMMON_FLAGS) and names the sections, `--help SECTION` one section,
`--help-all` every flag. Only flags given on the command line change anything: a parsed namespace holds nothing else, so the same
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
import textwrap

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


def add_train_arguments(p: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    """Every option of TrainConfig as a flag (but those `skip` names by flat name), plus --config."""
    g = p.add_argument_group("config files")
    g.add_argument("--config", default=None, metavar="FILE",
                   help="a YAML file of options (configs/*.yaml; `base: other.yaml` inherits one); flags given here "
                        "override it")
    groups = {}
    for option in options().values():
        if option.flat in skip:
            continue
        if option.group not in groups:
            groups[option.group] = p.add_argument_group(option.group)
        _add_option(groups[option.group], option)


# The flags a newcomer changes, by section: `--help` shows these; `--help SECTION` one section; `--help-all` every flag.
COMMON_FLAGS = ("--config", "--env", "--num-envs", "--num-steps", "--total-timesteps", "--env-params", "--lr",
                "--ent-coef", "--teacher", "--hidden-dim", "--encoder", "--agent", "--seed", "--num-seeds",
                "--run-name", "--resume", "--save-interval-minutes", "--eval-every", "--wandb", "--num-devices")
DESCRIPTION = ("Train PPO with the whole loop (env, rollout, GAE, update) compiled into one XLA program. Prints one "
               "line per chunk and writes <checkpoint-dir>/<run-name>/metrics.jsonl.")


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="train_purejaxrl.py", description=DESCRIPTION, add_help=False)
    g = p.add_argument_group("help")
    g.add_argument("-h", "--help", nargs="?", const="", metavar="SECTION", action=_HelpAction,
                   help="the common flags; with SECTION, every flag of that section (e.g. --help ppo)")
    g.add_argument("--help-all", nargs=0, action=_HelpAction, help="every flag of every section")
    add_train_arguments(p)
    return p


def _sections(parser: argparse.ArgumentParser) -> dict:
    """{section title: its flag actions} of the parser's option sections (not help)."""
    return {group.title: [a for a in group._group_actions] for group in parser._action_groups
            if group.title not in ("help", "positional arguments", "options") and group._group_actions}


def _find_section(sections: dict, wanted: str):
    """The section titled `wanted`, or whose title's last word or words after ': ' are `wanted` (any case)."""
    wanted = wanted.strip().lower()
    for title in sections:
        names = {title.lower(), title.lower().rpartition(": ")[2], title.lower().split(",")[0].split()[0]}
        if wanted in names:
            return title
    return None


def help_text(parser: argparse.ArgumentParser, section: str | None) -> str:
    """--help (section None: the common flags), --help SECTION (one section), --help-all (section "all")."""
    sections = _sections(parser)
    show = OneLineParser(prog=parser.prog, description=parser.description, add_help=False)
    if section == "all":
        chosen = sections
    elif section:
        title = _find_section(sections, section)
        if title is None:
            parser.exit(2, f"{parser.prog}: error: no help section {section!r} (sections: "
                           f"{', '.join(_short_name(t) for t in sections)})\n")
        chosen = {title: sections[title]}
    else:
        chosen = {title: [a for a in actions if set(a.option_strings) & set(COMMON_FLAGS)]
                  for title, actions in sections.items()}
        chosen = {title: actions for title, actions in chosen.items() if actions}
    for title, actions in chosen.items():
        group = show.add_argument_group(title)
        for action in actions:
            group._add_action(action)
    text = show.format_help()
    if section != "all":
        listed = ", ".join(f"{_short_name(t)} ({len(a)})" for t, a in sections.items())
        text += "\n" + textwrap.fill(f"Sections (flags in each): {listed}. --help SECTION shows every flag of one "
                                     "section (e.g. --help dtc), --help-all every flag.", width=79) + "\n"
    return text


def _short_name(title: str) -> str:
    """The name --help SECTION takes for a section title: `stage options: dtc` -> dtc, `PPO` -> ppo."""
    return title.rpartition(": ")[2].split(",")[0].split()[0].lower()


class _HelpAction(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        section = "all" if option_string == "--help-all" else (values or None)
        print(help_text(parser, section), end="")
        parser.exit(0)


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
    stored = None if ckpt is None else config_of(ckpt)
    base = base_config(args, stored)
    flags = given(args)
    config = base.replace(**flags)
    if "env_params" in flags:  # the list under it: the same flags without it
        note_replaced_env_params(base.replace(**{k: v for k, v in flags.items() if k != "env_params"}), config)
    if stored is not None:
        config = check_resume_changes(stored, config, set(flags) | set(config_file_options(args)))
    return config, ckpt


def config_file_options(args: argparse.Namespace) -> dict:
    """{flat name: value} the --config file (and its base chain) sets; {} without one."""
    if not getattr(args, "config", None):
        return {}
    from hephaestus.config.files import find_config_file, read_config_file

    return read_config_file(find_config_file(args.config))


def check_resume_changes(stored: TrainConfig, config: TrainConfig, given_names: set) -> TrainConfig:
    """A resume's config against the checkpoint's: the changes a resume cannot honour are refused with one line
    naming the setting (ConfigError); another --agent is honoured with one line, its stage list and its auto
    options following the new agent, so the stored config says what trains.

    * --num-steps: the update counter and env_steps (update x num_envs x num_steps) count the run's experience
      at one rollout length; another one would misstate every env_steps since the checkpoint and the run's end.
    * --agent across the dreamer (dreamer, dreamer-dtc) and the PPO agents: one learns in place of the PPO update
      (its own actor-critic, gradient clip and teacher), so the checkpoint's learner cannot continue as the other."""
    from hephaestus.config.train_config import AGENTS, ConfigError, agent_config, learns_by_dreaming

    if config.env.num_steps != stored.env.num_steps:
        raise ConfigError(f"--num-steps {config.env.num_steps} differs from the checkpoint's {stored.env.num_steps}: "
                          "a resume keeps the rollout length (its env_steps count updates of that length); resume "
                          f"with --num-steps {stored.env.num_steps}, or start a new run")
    if config.agent == stored.agent:
        return config
    old_stages = AGENTS[stored.agent][0]
    extra = config.extra_stages if "extra_stages" in given_names else \
        tuple(s for s in config.extra_stages if s not in old_stages)
    # the old agent's values of auto options go back to auto, unless given again: the new agent settles them
    agent_set = {name for _, values in AGENTS.values() for name in values}  # the options some --agent decides
    autos = {name: None for name in agent_set if name not in given_names}
    switched = agent_config(config.replace(extra_stages=extra, **autos), config.agent)
    if learns_by_dreaming(switched) != learns_by_dreaming(stored):
        raise ConfigError(f"--agent {config.agent}: the checkpoint trained --agent {stored.agent}, and a resume cannot "
                          "switch between the dreamer and the PPO agents (one learns in place of the other's update); "
                          "start a new run")
    print(f"note: resume: --agent {stored.agent} -> {switched.agent}: extra stages "
          f"{','.join(stored.extra_stages) or 'none'} -> {','.join(switched.extra_stages) or 'none'}", file=sys.stderr)
    return switched


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
