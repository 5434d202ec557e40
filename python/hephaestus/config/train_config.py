"""The one place for configuration: every option, its default, its help text, and the checks on it.

`TrainConfig` is a tree of frozen dataclasses, one per concern:

    config.env       EnvConfig       which env, how many, how long
    config.ppo       PPOConfig       the PPO update's hyperparameters
    config.network   NetworkConfig   the actor-critic and how the rollout stores observations
    config.run       RunConfig       seeds, run folder, checkpoints, resume, devices
    config.logging   LoggingConfig   evaluation episodes, wandb, TensorBoard
    config.stages    one dataclass per stage family (DTC, RND, count, ...), registered by the family itself
                     (config/registry.py): adding a stage option touches neither this file nor the PPO code
    config.agent, config.extra_stages   which extra pipeline stages run

Every option also has a flat name, unique across the tree (`num_envs`, `lr`, `dtc_seq_len`): the command line's
flag (`--num-envs`, cli.py), the key of a checkpoint's stored config, and what `config.replace(**flat)` and
`TrainConfig.from_flat(**flat)` take. The help text of a flag is its field's docstring.

Some options are `auto` (None, "auto"): their value follows from others or from the env. `resolve(config,
env_spec)` settles every one of them, once, and validates; the result is what trains, what the checkpoint stores
and what `--resume` reads back (so a changed default never changes a resumed run).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import os
import textwrap
import types
import typing
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

from hephaestus.config.registry import (AGENT_CHECKS, AGENTS, AUTO_VALUES, ENV_DEFAULTS, ENV_SETTLERS,  # noqa: F401
                                       FALLBACK_DEFAULTS, NO_TEACHER, RESOLVE_NOTES, ConfigError, agents_replacing_update, auto_names, env_defaults,
                                       env_defaults_text, env_params_of, families, learns_by_dreaming,
                                       obs_reading_stages, update_rule)
from hephaestus.config.values import number_text

__all__ = ["ConfigError", "TrainConfig", "resolve", "validate"]

# PureJaxRL/CleanRL reference batch: 256 envs x 128 steps split into 4 minibatches for 4 epochs.
# Users found that growing the batch without rebalancing these hurts (bigger, less noisy minibatches
# and many more gradient steps per update), so larger batches are rescaled to keep ~8k minibatches.
REFERENCE_BATCH = 32_768
REFERENCE_MINIBATCHES = 4
REFERENCE_EPOCHS = 4
MAX_MINIBATCHES = 64
MIN_EPOCHS = 2
ENCODERS = ("auto", "mlp", "cells", "salience", "ego")
OBS_DTYPES = ("auto", "float32", "bfloat16", "uint8")
RECURRENT_CELLS = ("none", "gru", "lstm")  # --recurrent
# --log-interval auto: updates per chunk so that a chunk holds about this many env steps (all seeds together).
# A chunk is one call of the compiled program; what the host does between chunks (metrics, sinks, hooks) is paid
# per chunk, so small updates want many per chunk: CartPole at 4 x 128 gets 128 updates (~0.4 s on a 2-core
# CPU), where 10 lost ~10% of its throughput to the host; HackMatrix at 2048 x 128 gets 1 (its first console
# line after one update instead of ten, ~13 s instead of ~2 min on that CPU).
AUTO_CHUNK_ENV_STEPS = 65_536

# PPO's gradient clip (PureJaxRL's 0.5); an agent that replaces the PPO update declares its own (UpdateRule).
PPO_GRAD_CLIP = 0.5

# PPO hyperparameters that are data, not compile-time constants: they live in `RunnerState.hyper` (float32, per
# agent with --num-seeds), so runs and sweep points that differ only in them share one compiled program.
DATA_HYPERPARAMETERS = ("lr", "gamma", "gae_lambda", "clip_eps", "vf_coef", "ent_coef", "ent_coef_final",
                        "max_grad_norm", "teacher_coef", "teacher_fraction")

def env_param_name(item: str) -> str:
    """The NAME of an --env-params item "NAME=VALUE"."""
    return item.partition("=")[0].strip()


def overlay_env_params(items, extra) -> tuple[str, ...]:
    """The --env-params list `items` with `extra` laid over it by name: an item of `extra` replaces the item of
    that name, and one with a new name joins at the end (a sweep's env.NAME point, an experiment's variant)."""
    names = {env_param_name(item) for item in extra}
    return tuple(item for item in items if env_param_name(item) not in names) + tuple(extra)


def _grad_clip_text() -> str:
    special = sorted({(update_rule(TrainConfig(extra_stages=AGENTS[agent][0])).max_grad_norm, agent)
                      for agent in agents_replacing_update()})
    by_clip: dict = {}
    for clip, agent in special:
        by_clip.setdefault(clip, []).append(agent)
    return "auto: " + "".join(f"{clip:g} for --agent {', '.join(agents)}, " for clip, agents in by_clip.items()) + \
        f"{'else ' if by_clip else ''}{PPO_GRAD_CLIP}"


def _env_default_text(name: str):
    """--help's default of an env-dependent option, read when --help is built (the env families declare theirs on
    import, after this module's classes are made)."""
    return lambda: f"auto: {env_defaults_text(name, ENV_DEFAULTS, FALLBACK_DEFAULTS)}"


# ----------------------------------------------------------------------------------------------------------
# The sections. Field metadata: "flat" (flat name, when not the field name), "flag" (command-line flag, when not
# --<flat name>), "metavar" (its value's name in --help), "parse" ("number": 1e8 accepted for an int; "csv": a comma-separated tuple), "values" ("01": a
# bool written 0/1), "default_text" (the default as --help shows it).


@dataclass(frozen=True)
class EnvConfig:
    """environment"""

    name: str = field(default="hackmatrix", metadata={"flat": "env"})
    """hackmatrix, gymnax:<id> (e.g. gymnax:CartPole-v1), jumanji:<id> (e.g. jumanji:Snake-v1) or craftax:<id>"""
    num_envs: int = 64
    """parallel environments, global across devices"""
    num_steps: int = 128
    """steps per env per rollout; batch = num-envs x num-steps"""
    total_timesteps: int = field(default=1_000_000, metadata={"parse": "number"})
    """env steps to train for; accepts 1e8"""
    env_params: tuple[str, ...] | None = field(default=None, metadata={
        "parse": "csv", "metavar": "NAME=VALUE,...", "default_text": _env_default_text('env_params')})
    """the training env's parameters, e.g. distance_coef=0,curriculum_share=0.5 (HackMatrix's or gymnax's
    EnvParams fields, jumanji's make() arguments); a list given replaces the env family's default list ('' for
    none: HackMatrix's rules' reward). Evaluations play the env's defaults, so runs with different values are
    scored on the same game"""


@dataclass(frozen=True)
class PPOConfig:
    """PPO"""

    lr: float = 2.5e-4
    """Adam learning rate"""
    anneal_lr: bool = True
    """decay the learning rate linearly to 0 over the run"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """GAE lambda"""
    num_minibatches: int | None = field(default=None, metadata={
        "default_text": f"auto: {REFERENCE_MINIBATCHES}, auto-scaled for batches over {REFERENCE_BATCH:,} unless this "
                        "or --update-epochs is set"})
    """minibatches per epoch"""
    update_epochs: int | None = field(default=None, metadata={
        "default_text": f"auto: {REFERENCE_EPOCHS}, auto-scaled, see above"})
    """passes over each batch"""
    clip_eps: float = 0.2
    """PPO ratio clip"""
    vf_coef: float = 0.5
    """value loss weight"""
    ent_coef: float | None = field(default=None, metadata={"default_text": _env_default_text('ent_coef')})
    """entropy bonus weight (at the first update, with --ent-coef-final)"""
    ent_coef_final: float | None = field(default=None, metadata={"default_text": "none: --ent-coef throughout"})
    """entropy bonus weight at the end of the run: the weight moves linearly from --ent-coef to this over the
    updates, as --anneal-lr moves the learning rate (data, like --ent-coef: sweep points share one program)"""
    max_grad_norm: float | None = field(default=None, metadata={"default_text": lambda: _grad_clip_text()})
    """global gradient-norm clip"""
    normalize_advantages: bool = True
    """normalise advantages per minibatch"""
    clip_value_loss: bool = True
    """clip the value loss like the policy ratio"""
    teacher: str | None = field(default=None, metadata={
        "default_text": lambda: f"{_env_default_text('teacher')()}; none with --agent "
                                f"{', '.join(agents_replacing_update())}"})
    """a scripted policy of the env to learn from (kickstarting; HackMatrix: exit-rush, exit-rush-siphon,
    exit-rush-safe, exit-rush-deep, exit-rush-programs, exit-rush-collector; none: no teacher): the loss adds
    --teacher-coef x the cross-entropy from the teacher's action, on the rollout's own states, to PPO's; its
    weight falls linearly to 0 over the first --teacher-fraction of the updates"""
    teacher_coef: float = 5.0
    """weight of the teacher's cross-entropy at the first update (data: sweep points share one program)"""
    teacher_fraction: float | None = field(default=None, metadata={
        "default_text": _env_default_text('teacher_fraction')})
    """share of the run over which the teacher's weight falls to 0 (1: it reaches 0 at the last update)"""
    scale_rewards: bool = False
    """divide rewards by a running std of each env's discounted return before GAE (for envs with large or
    drifting reward scales, e.g. gymnax Pendulum; the value function then learns scaled returns; normalization.py)"""


@dataclass(frozen=True)
class NetworkConfig:
    """network"""

    hidden_dim: int | None = field(default=None, metadata={"default_text": _env_default_text('hidden_dim')})
    """MLP width"""
    num_layers: int = 2
    """MLP hidden layers"""
    activation: Literal["tanh", "relu"] = "tanh"
    """hidden activation"""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """matmul dtype; parameters and reductions stay float32"""
    encoder: Literal["auto", "mlp", "cells", "salience", "ego"] = "auto"
    """observation encoder: cells embeds each board cell with shared weights (envs declaring obs_cells, e.g.
    hackmatrix: half the multiply-adds of an MLP reading all 1545 inputs, and a translation-invariant prior);
    ego embeds them likewise and lays them out on a window centred on the player (envs declaring obs_board), so
    each input says what is at one offset from the player; salience embeds the cells (plus their positions) and
    pools them by --salience-heads learned attention heads into a few vectors (the DTC design's salience
    pooling); mlp feeds the flat observation; auto = the env family's encoder in ENV_DEFAULTS where the env
    declares what it needs (ego for hackmatrix; mlp with the dreamer agents), else mlp"""
    cell_dim: int | None = field(default=None, metadata={"default_text": _env_default_text('cell_dim')})
    """per-cell embedding width of the cells, ego and salience encoders"""
    salience_heads: int = 4
    """pooling heads of the salience encoder (its output: flat features + heads x cell-dim)"""
    obs_dtype: Literal["auto", "float32", "bfloat16", "uint8"] = "auto"
    """how the rollout buffer stores observations (the largest array of a rollout): uint8 is exact for envs
    declaring obs_quanta (hackmatrix) at a quarter of float32's memory; bfloat16 halves it, rounding what the
    policy sees; auto = uint8 where exact and no extra stage reads observations, else float32"""
    unimix: float = 0.0
    """share of a uniform distribution mixed into a discrete actor's policy, (1 - u) softmax + u / actions, so no
    action's probability falls to 0 (DreamerV3 mixes 0.01 into its actor); the mixed distribution is what acts,
    what the losses score and what checkpoints replay; greedy actions are unchanged (the mix keeps the argmax);
    0 = off"""
    recurrent: Literal["none", "gru", "lstm"] = "none"
    """a recurrent cell between the encoder and the actor and critic MLPs (flax GRUCell or OptimizedLSTMCell,
    --hidden-dim wide), for envs whose observation does not tell the whole state (e.g. gymnax MemoryChain-bsuite,
    where the cue shown at the first step decides the last step's reward): the policy then acts on what it remembers.
    Its state is carried through the rollout per env, reset at episode starts, and the PPO update replays whole
    env sequences (minibatches of envs, not of steps; --num-envs must divide by --num-minibatches). none: the
    feed-forward network (every existing run, unchanged); not with the dreamer agents, whose actor learns in
    imagination with the feed-forward network"""
    recurrent_embed: int = 0
    """with --recurrent: width of a Dense layer (with --activation) between the encoder and the cell, computed for
    all steps of a sequence at once outside the cell's scan; PureJaxRL's ppo_rnn and Craftax_Baselines' PPO-RNN put
    one (their LAYER_SIZE wide) in front of the GRU, so a wide observation meets the cell's three gates at
    --recurrent-embed inputs instead of obs-dim; 0 = the encoder's features go into the cell"""
    normalize_obs: bool = False
    """standardise observations by their running mean and variance (kept with the network's parameters, so
    checkpoints, exports, evaluate and watch use them; updated after each PPO update; normalization.py); for envs
    with unbounded observations such as gymnax continuous control, off for hackmatrix (bounded already)"""


@dataclass(frozen=True)
class RunConfig:
    """run, checkpoints and devices"""

    seed: int = 0
    """PRNG seed"""
    num_seeds: int = 1
    """independent agents trained together by one vmapped program, seeded --seed, --seed+1, ...; metrics hold
    their mean, std, IQM and per-seed values (specs/pipeline.md, "Many seeds")"""
    log_interval: int | None = field(default=None, metadata={
        "default_text": f"auto: about {AUTO_CHUNK_ENV_STEPS:,} env steps per chunk, at most the whole run"})
    """PPO updates per compiled chunk, i.e. per console line and metrics record"""
    run_name: str = field(default="", metadata={
        "default_text": "auto: <env>_s<seed>, or <env>_s<first>-<last> with --num-seeds"})
    """name of the run and of checkpoints/<run-name>/"""
    checkpoint_dir: str = "checkpoints"
    """where run folders go"""
    resume: str = field(default="", metadata={"default_text": "none", "metavar": "PATH"})
    """continue from checkpoints/<run>/ (its latest checkpoint) or one step directory in it; the checkpoint's
    stored config is the base, flags and --config given again change it"""
    keep_checkpoints: int = 3
    """newest checkpoints to keep"""
    save_interval_minutes: float = 10.0
    """minutes between checkpoints"""
    save_interval: int = field(default=0, metadata={"default_text": "0 = use --save-interval-minutes", "metavar": "UPDATES"})
    """save every this many PPO updates instead (checked after each chunk)"""
    keep_optimizer: bool = False
    """on a resume with a different --num-envs, keep the optimizer state (default: reset)"""
    startup_timeout: float = field(default=300.0, metadata={"metavar": "SECONDS"})
    """seconds a start-up phase (setup, first compile, first chunk) may make no CPU progress before the run stops
    with a one-line error (a deadlock, not a slow compile; watchdog.py; 0 = off)"""
    num_devices: int = field(default=0, metadata={"default_text": "0 = all"})
    """devices to split the envs over; --num-envs must divide by it"""
    distributed: bool = False
    """multi-host: call jax.distributed.initialize() first; run the same command on every host (automatic on TPU
    pod slices)"""


@dataclass(frozen=True)
class LoggingConfig:
    """evaluation and logging"""

    eval_every: int = field(default=0, metadata={"default_text": "0 = off", "metavar": "UPDATES"})
    """evaluate after the chunk in which the update count crosses a multiple of this: eval/ metrics in every
    sink (evaluation.py: its own compiled program, never in the training timing)"""
    eval_episodes: int = 32
    """complete episodes per evaluation, run in parallel, greedy (argmax over valid actions)"""
    eval_max_steps: int = 1000
    """evaluation episodes are cut after this many steps (eval/capped_rate)"""
    eval_sampled: bool = False
    """also evaluate the sampled policy, under eval_sampled/"""
    final_eval_episodes: int = 100
    """episodes of the evaluation at the end of the run, written to <run>/eval.json (0 = off)"""
    wandb: bool | None = field(default=None, metadata={
        "default_text": "auto: on when WANDB_API_KEY or a ~/.netrc entry for api.wandb.ai exists; offline without "
                        "a key or network"})
    """log to Weights & Biases"""
    wandb_project: str = field(default="hephaestus", metadata={"flag": "--project"})
    """wandb project"""
    wandb_entity: str = field(default="", metadata={"flag": "--entity", "default_text": "yours"})
    """wandb entity"""
    wandb_group: str = field(default="", metadata={"flag": "--group", "default_text": "none"})
    """wandb group: runs started separately (seeds, variants) that the dashboard shows together"""
    eval_video: int = field(default=1, metadata={"metavar": "0|1"})
    """with wandb on, log one greedy episode as a video at each --eval-every evaluation and at the final one (the
    frames watch_agent.py renders; not in the training timing); 0 = off"""
    wandb_artifacts: bool = field(default=True, metadata={"flag": "--artifact"})
    """upload each checkpoint to wandb as an artifact (--no-artifact: do not)"""
    tensorboard_dir: str = field(default="", metadata={"flag": "--tensorboard", "default_text": "off", "metavar": "DIR"})
    """also write TensorBoard event files to this directory"""
    profile_dir: str = field(default="", metadata={"flag": "--profile", "default_text": "off", "metavar": "DIR"})
    """write a JAX profiler trace of the first chunk after compile to DIR (plugins/profile/<time>/*.xplane.pb for
    TensorBoard's profile plugin, *.trace.json.gz for Perfetto)"""
    debug_nans: bool = False
    """JAX's NaN checking (jax_debug_nans) for a short diagnostic run: the first chunk whose program makes a NaN
    stops the run with jax's one-line finding (jax re-runs it op by op; inside a chunk it can name the outermost
    operation only, the scan over updates; slower)"""


SECTIONS = {"env": EnvConfig, "ppo": PPOConfig, "network": NetworkConfig, "run": RunConfig, "logging": LoggingConfig}


def _stage_options_class():
    """One dataclass with a field per registered stage family (config/registry.py), each defaulting to its options."""
    fields = [(name, cls, field(default_factory=cls)) for name, cls in sorted(families().items())]
    cls = dataclasses.make_dataclass("StageOptions", fields, frozen=True)
    cls.__doc__ = "options of the extra stage families (config/registry.py)"
    return cls


StageOptions = _stage_options_class()


@dataclass(frozen=True)
class TrainConfig:
    env: EnvConfig = field(default_factory=EnvConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    agent: str = field(default="ppo", metadata={"choices": lambda: tuple(AGENTS)})
    """ppo: plain PPO; dtc: world-model ensemble + dual-timescale intrinsic reward; disagreement: dtc with
    competence off (ensemble disagreement alone); rnd: Random Network Distillation; count: tabular count bonus on
    the next observation (small discrete envs); episodic: Never Give Up's episodic bonus (k nearest neighbours in
    this episode's memory); dreamer, dreamer-dtc: actor-critic learning in a world model's imagination. Its stages
    go first in --extra-stages"""
    extra_stages: tuple[str, ...] = field(default=(), metadata={"parse": "csv", "default_text": "none"})
    """comma-separated extra pipeline stages (registered by the agent families, core/stages.py), e.g. reward_bonus"""
    stages: StageOptions = field(default_factory=StageOptions)
    run: RunConfig = field(default_factory=RunConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    @property
    def batch_size(self) -> int:
        return self.env.num_envs * self.env.num_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.ppo.num_minibatches

    @property
    def num_updates(self) -> int:
        # Round up: a user asking for 1e6 steps gets at least 1e6.
        return max(1, -(-self.env.total_timesteps // self.batch_size))

    @classmethod
    def from_flat(cls, **flat) -> "TrainConfig":
        """The defaults with the options `flat` names changed: TrainConfig.from_flat(env="gymnax:CartPole-v1")."""
        return cls().replace(**flat)

    def replace(self, **flat) -> "TrainConfig":
        """A copy with options changed, by flat name (`num_envs=8`, `dtc_seq_len=4`). ConfigError on an unknown
        name."""
        changes: dict = {}
        for name, value in flat.items():
            option = options().get(name)
            if option is None:
                raise ConfigError(f"unknown option {name!r}{_did_you_mean(name)}")
            node = changes
            for part in option.path[:-1]:
                node = node.setdefault(part, {})
            node[option.path[-1]] = value
        return _replace_tree(self, changes)

    def to_dict(self) -> dict:
        """{flat name: value} of every option (what a checkpoint stores; tuples as lists after JSON)."""
        return {name: option.get(self) for name, option in options().items()}


def _replace_tree(node, changes: dict):
    updates = {k: _replace_tree(getattr(node, k), v) if isinstance(v, dict) else v for k, v in changes.items()}
    return dataclasses.replace(node, **updates)


# ----------------------------------------------------------------------------------------------------------
# Options by flat name: the command line, checkpoints, config files and sweeps all speak this vocabulary.


@dataclass(frozen=True)
class Option:
    flat: str  # unique name: "num_envs", "dtc_seq_len"
    path: tuple[str, ...]  # ("env", "num_envs"), ("stages", "dtc", "seq_len")
    type: typing.Any  # the field's annotation, resolved
    default: typing.Any
    help: str  # the field's docstring
    group: str  # --help group: the section's docstring
    metadata: typing.Mapping

    @property
    def flag(self) -> str:
        return self.metadata.get("flag", "--" + self.flat.replace("_", "-"))

    def get(self, config):
        node = config
        for part in self.path:
            node = getattr(node, part)
        return node

    @property
    def bare_type(self):
        """The annotation with Optional stripped (`int | None` -> int)."""
        t = self.type
        if typing.get_origin(t) in (typing.Union, types.UnionType):
            t = next(a for a in typing.get_args(t) if a is not type(None))
        return t

    def kind(self) -> tuple[str, tuple]:
        """("int" | "float" | "bool" | "str" | "tuple", choices) with Optional stripped."""
        t = self.bare_type
        if "choices" in self.metadata:  # choices declared elsewhere (--agent: the registered agents)
            return "str", tuple(self.metadata["choices"]())
        if typing.get_origin(t) is Literal:
            return "str", typing.get_args(t)
        if typing.get_origin(t) is tuple:
            return "tuple", ()
        return t.__name__, ()

    @property
    def element(self) -> type:
        """A tuple option's element type (str or int)."""
        args = typing.get_args(self.bare_type)
        return args[0] if args and args[0] in (str, int) else str

    @property
    def optional(self) -> bool:
        return type(None) in typing.get_args(self.type)

    def default_text(self) -> str:
        if "default_text" in self.metadata:
            text = self.metadata["default_text"]
            return text() if callable(text) else text
        if isinstance(self.default, bool):
            if self.metadata.get("values") == "01":
                return str(int(self.default))
            return "on" if self.default else "off"
        return str(self.default)

    def check(self, value, where: str):
        """`value` (from JSON or YAML) as this option's type, else ConfigError "<where> <flat> is X, expected T"."""
        kind, choices = self.kind()
        if value is None and self.optional:
            return None
        if kind in ("int", "float") and isinstance(value, str):
            value = number_text(value, whole=kind == "int")  # YAML reads 1e8 and 3e-4 as strings
        ok = {"bool": isinstance(value, bool),
              "int": isinstance(value, int) and not isinstance(value, bool),
              "float": isinstance(value, (int, float)) and not isinstance(value, bool),
              "str": isinstance(value, str),
              "tuple": isinstance(value, (list, tuple)) and all(isinstance(v, self.element)
                                                                and not isinstance(v, bool) for v in value)}[kind]
        if ok and choices and value not in choices:
            raise ConfigError(f"{where} {self.flat} is {value!r}, expected one of {', '.join(choices)}")
        if not ok:
            expected = {"tuple": "a list of names" if self.element is str else "a list of whole numbers"}.get(kind, kind)
            raise ConfigError(f"{where} {self.flat} is {value!r}, expected {expected}")
        if kind == "float":
            return float(value)
        return tuple(value) if kind == "tuple" else value


def _field_docs(cls) -> dict[str, str]:
    """{field: docstring}: the string literal right after each field of a dataclass (what --help shows)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body
    docs = {}
    for node, following in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant) \
                and isinstance(following.value.value, str):
            docs[node.target.id] = " ".join(following.value.value.split())
    return docs


def _walk(cls, path: tuple, prefix: str, group: str):
    hints = typing.get_type_hints(cls)
    docs = _field_docs(cls)
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        if dataclasses.is_dataclass(t):
            if path == () and f.name == "stages":
                for family in (x.name for x in dataclasses.fields(t)):
                    sub = typing.get_type_hints(t)[family]
                    yield from _walk(sub, ("stages", family), family + "_", f"stage options: {family}")
            else:
                yield from _walk(t, path + (f.name,), "", (t.__doc__ or f.name).strip())
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        flat = f.metadata.get("flat", prefix + f.name)
        yield Option(flat=flat, path=path + (f.name,), type=t, default=default, help=docs.get(f.name, ""),
                     group=group, metadata=f.metadata)


@lru_cache(maxsize=None)
def options() -> dict[str, Option]:
    """Every option of TrainConfig by flat name, in declaration order."""
    table: dict[str, Option] = {}
    for option in _walk(TrainConfig, (), "", "pipeline"):
        if option.flat in table:
            raise RuntimeError(f"two options are named {option.flat!r}: {table[option.flat].path} and {option.path}")
        table[option.flat] = option
    return table


def _did_you_mean(name: str) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(options()), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def from_flat_dict(values: dict, where: str, base: TrainConfig | None = None,
                   ignore: tuple[str, ...] = ()) -> TrainConfig:
    """`base` (default: the defaults) with the options of a stored {flat name: value} dict (a checkpoint's config),
    each type-checked; `where` starts the error line: ConfigError "<where> lr is 'fast', expected float". Keys in
    `ignore` (options of older versions) are skipped; any other unknown key is an error."""
    table = options()
    changes = {}
    for name, value in values.items():
        if name in ignore:
            continue
        if name not in table:
            raise ConfigError(f"{where} {name} is not an option of this version{_did_you_mean(name)}")
        changes[name] = table[name].check(value, where)
    return (base or TrainConfig()).replace(**changes)


# ----------------------------------------------------------------------------------------------------------
# resolve: every auto settled once, then validate


def auto_scale_for_batch_size(num_envs: int, num_steps: int) -> tuple[int, int]:
    """(num_minibatches, update_epochs) for a batch, keeping minibatches near the reference size.

    Up to the reference batch nothing changes. Above it, minibatches grow with the batch (capped at 64)
    and epochs shrink (floored at 2, so rare strategic events still get two passes).
    """
    batch = num_envs * num_steps
    if batch <= REFERENCE_BATCH:
        return REFERENCE_MINIBATCHES, REFERENCE_EPOCHS
    scale = batch // REFERENCE_BATCH
    return min(REFERENCE_MINIBATCHES * scale, MAX_MINIBATCHES), max(MIN_EPOCHS, REFERENCE_EPOCHS // scale)


def resolve(config: TrainConfig, env_spec=None) -> tuple[TrainConfig, str]:
    """Settle every auto option and validate. Returns the resolved config and a one-line note for the console.

    Settled here, in this order: the agent's stages and its values of auto options (config.registry's AGENTS),
    the values the agent families settle themselves (register_auto: DTC's ensemble, the dreamer's env-dependent
    settings), the env family's defaults (ENV_DEFAULTS, declared by the env families), the gradient clip (PPO's,
    or the UpdateRule of a stage that replaces the PPO update), minibatches and epochs
    (auto_scale_for_batch_size), the run name. The encoder and the observation storage dtype need the env: given
    `env_spec` (envs.adapters.EnvSpec), `resolve_env` (core/ppo.py's resolve_for_env) settles them. Idempotent: a
    resolved config resolves to itself."""
    config = agent_config(config, config.agent)
    for _, values, _ in AUTO_VALUES:
        config = fill_auto(config, values(config))
    defaults = env_defaults(config.env.name)
    config = fill_auto(config, {name: defaults[name]
                                for name in ("ent_coef", "hidden_dim", "teacher_fraction", "cell_dim", "env_params")})
    rule = update_rule(config)
    if config.ppo.teacher is None:  # a stage that replaces the PPO update leaves no loss for the teacher to join
        config = config.replace(teacher=NO_TEACHER if rule else defaults["teacher"])
    if config.ppo.max_grad_norm is None:
        config = config.replace(max_grad_norm=rule.max_grad_norm if rule else PPO_GRAD_CLIP)
    if config.run.log_interval is None:
        work = config.batch_size * config.run.num_seeds  # not positive: validate below names the bad flag
        config = config.replace(log_interval=max(1, min(config.num_updates, AUTO_CHUNK_ENV_STEPS // work))
                                if work > 0 else 1)
    note = ""
    minibatches, epochs = config.ppo.num_minibatches, config.ppo.update_epochs
    if minibatches is None and epochs is None:
        minibatches, epochs = auto_scale_for_batch_size(config.env.num_envs, config.env.num_steps)
        if config.batch_size > REFERENCE_BATCH:
            note = (f"auto-scale: batch {config.batch_size:,} -> {minibatches} minibatches of "
                    f"{config.batch_size // minibatches:,} x {epochs} epochs = {minibatches * epochs} gradient steps")
    elif config.batch_size > REFERENCE_BATCH and \
            (minibatches, epochs) != auto_scale_for_batch_size(config.env.num_envs, config.env.num_steps):
        # (a resumed run's stored values are the ones auto-scale chose: nothing to say then)
        which = " and ".join(n for n, v in (("--num-minibatches", minibatches), ("--update-epochs", epochs)) if v)
        note = f"auto-scale: off ({which} set explicitly)"
    config = config.replace(num_minibatches=REFERENCE_MINIBATCHES if minibatches is None else minibatches,
                            update_epochs=REFERENCE_EPOCHS if epochs is None else epochs)
    try:
        validate(config)
    except ConfigError as err:
        if note.startswith("auto-scale: batch") and "minibatches" in str(err):
            raise ConfigError(f"{err} ({note}; set --num-minibatches to choose)") from None
        raise
    if not config.run.run_name:
        env_tag = config.env.name.replace(":", "-").replace("/", "-")
        seed, n = config.run.seed, config.run.num_seeds
        config = config.replace(run_name=f"{env_tag}_s{seed}" if n == 1 else f"{env_tag}_s{seed}-{seed + n - 1}")
    note = "; ".join(filter(None, [note, *(family_note(config) for family_note in RESOLVE_NOTES)]))
    if env_spec is not None:
        config = resolve_for_env(config, env_spec)
    return config, note


def check_settled(config: TrainConfig) -> None:
    """ConfigError naming the auto options `resolve` has not settled yet (what needs the env comes after it)."""
    unsettled = [name for name, value in (("ent_coef", config.ppo.ent_coef), ("hidden_dim", config.network.hidden_dim),
                                          ("teacher_fraction", config.ppo.teacher_fraction),
                                          ("cell_dim", config.network.cell_dim), ("env_params", config.env.env_params),
                                          ("max_grad_norm", config.ppo.max_grad_norm),
                                          ("num_minibatches", config.ppo.num_minibatches),
                                          ("update_epochs", config.ppo.update_epochs),
                                          ("log_interval", config.run.log_interval),
                                          *((name, options()[name].get(config)) for name in auto_names()))
                  if value is None]
    if unsettled:
        raise ConfigError(f"{', '.join(unsettled)} not settled: resolve(config) first (config/train_config.py)")


def resolve_for_env(config: TrainConfig, env_spec) -> TrainConfig:
    """The part of `resolve` that needs the env (`env_spec`: envs.adapters.EnvSpec): the encoder and the observation
    storage dtype, settled by what the core declared (core/networks.py, which owns the encoders). make_train calls
    it with the env it builds (entry points resolve before any env exists)."""
    check_settled(config)
    if not ENV_SETTLERS:
        raise RuntimeError("nothing settles the options that need the env: import hephaestus.core.networks")
    for settle in ENV_SETTLERS:
        config = settle(config, env_spec)
    return config


def has_teacher(config: TrainConfig) -> bool:
    """Whether the run learns from a scripted teacher (--teacher NAME, not none; settled by resolve)."""
    return config.ppo.teacher not in (None, "", NO_TEACHER)


def update_summary(config: TrainConfig) -> str:
    """What learns in one update, for the run's header and the benchmarks: PPO's minibatches x epochs, or, where the
    dreamer replaces the PPO update, its world-model and imagination gradient steps."""
    rule = update_rule(config)
    if rule is not None:
        return rule.summary(config)
    return f"{config.ppo.num_minibatches} minibatches x {config.ppo.update_epochs} epochs"


def agent_config(config: TrainConfig, agent: str) -> TrainConfig:
    """`config` with the agent's extra stages first (then any others already set) and its values of the options left
    auto (AGENTS). Stages already all there keep their order, so settling an agent twice changes nothing."""
    if agent not in AGENTS:
        raise ConfigError(f"unknown agent {agent!r}; choose from {', '.join(AGENTS)}")
    stages, values = AGENTS[agent]
    if agent in AGENT_CHECKS:
        AGENT_CHECKS[agent](config)
    extra = config.extra_stages
    if not set(stages) <= set(extra):
        extra = tuple(stages) + tuple(s for s in extra if s not in stages)
    return fill_auto(config.replace(agent=agent, extra_stages=extra), values)


def fill_auto(config: TrainConfig, values: dict) -> TrainConfig:
    """`config` with the options `values` names set to its values where they are still auto (None)."""
    table = options()
    return config.replace(**{name: value for name, value in values.items() if table[name].get(config) is None})


def validate(config: TrainConfig) -> None:
    """ConfigError (one line naming the flag) for a config no run can start with."""
    env, ppo, net, run, log = config.env, config.ppo, config.network, config.run, config.logging
    check_run_name(run.run_name)
    for name in DATA_HYPERPARAMETERS:  # None: an option left to its default (--ent-coef-final)
        if getattr(ppo, name) is not None and not math.isfinite(getattr(ppo, name)):
            raise ConfigError(f"--{name.replace('_', '-')} must be a finite number, got {getattr(ppo, name)}")
    if not -2**63 <= run.seed < 2**63:
        raise ConfigError(f"--seed must fit in 64 bits (-2^63 to 2^63-1), got {run.seed}")
    positive = (("num_envs", env), ("num_steps", env), ("total_timesteps", env), ("num_minibatches", ppo),
                ("update_epochs", ppo), ("hidden_dim", net), ("salience_heads", net), ("log_interval", run),
                ("num_seeds", run))
    for name, section in positive:
        if getattr(section, name) <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {getattr(section, name)}")
    for name in ("eval_every", "final_eval_episodes"):
        if getattr(log, name) < 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 0 (0 = off), got {getattr(log, name)}")
    for name in ("eval_episodes", "eval_max_steps"):
        if getattr(log, name) <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {getattr(log, name)}")
    if run.num_devices < 0:
        raise ConfigError(f"--num-devices must be >= 0 (0 = all), got {run.num_devices}")
    if net.num_layers < 1:  # 0 would train a linear policy and value without a word
        raise ConfigError(f"--num-layers must be at least 1 (hidden layers of the MLP), got {net.num_layers}")
    if not 0.0 <= net.unimix < 1.0:
        raise ConfigError(f"--unimix must be in [0, 1), got {net.unimix}")
    if run.keep_checkpoints <= 0:
        raise ConfigError(f"--keep-checkpoints must be positive, got {run.keep_checkpoints}")
    if run.save_interval < 0:
        raise ConfigError(f"--save-interval must be >= 0 (0 = use --save-interval-minutes), got {run.save_interval}")
    if not run.startup_timeout >= 0:
        raise ConfigError(f"--startup-timeout must be 0 (off) or a number of seconds, got {run.startup_timeout}")
    if not run.save_interval_minutes > 0:
        raise ConfigError(f"--save-interval-minutes must be positive, got {run.save_interval_minutes}")
    if config.batch_size > INT32_MAX:  # indices into the batch are int32 (shuffles, gathers)
        raise ConfigError(f"batch {env.num_envs:,} envs x {env.num_steps:,} steps = {config.batch_size:,} env steps "
                          f"per update does not fit in 32 bits (at most {INT32_MAX:,}); lower --num-envs or "
                          "--num-steps")
    if config.num_updates > INT32_MAX:  # the update counter is int32
        raise ConfigError(f"--total-timesteps {env.total_timesteps:,} is {config.num_updates:,} updates of "
                          f"{config.batch_size:,} env steps, more than the update counter holds ({INT32_MAX:,})")
    if config.batch_size % ppo.num_minibatches:
        raise ConfigError(
            f"batch {env.num_envs} envs x {env.num_steps} steps = {config.batch_size:,} does not divide "
            f"into {ppo.num_minibatches} minibatches")
    if env.num_steps < 2:
        raise ConfigError(f"--num-steps must be at least 2, got {env.num_steps} (a one-step rollout learns "
                          "from one sample per env per update)")
    if config.minibatch_size < 2:
        raise ConfigError(f"minibatches of {config.minibatch_size} sample ({config.batch_size:,} / "
                          f"{ppo.num_minibatches}): advantage normalisation sets every advantage to 0 and nothing "
                          "is learned; lower --num-minibatches or raise --num-envs")
    if ppo.max_grad_norm <= 0:
        raise ConfigError(f"--max-grad-norm must be positive, got {ppo.max_grad_norm}")
    if ppo.vf_coef < 0:
        raise ConfigError(f"--vf-coef must be >= 0, got {ppo.vf_coef}")
    if not 0.0 <= ppo.gamma <= 1.0:
        raise ConfigError(f"--gamma must be in [0, 1], got {ppo.gamma}")
    if not 0.0 <= ppo.gae_lambda <= 1.0:
        raise ConfigError(f"--gae-lambda must be in [0, 1], got {ppo.gae_lambda}")
    if ppo.lr <= 0:
        raise ConfigError(f"--lr must be positive, got {ppo.lr}")
    if ppo.clip_eps <= 0:
        raise ConfigError(f"--clip-eps must be positive, got {ppo.clip_eps}")
    if ppo.teacher_coef < 0:
        raise ConfigError(f"--teacher-coef must be >= 0, got {ppo.teacher_coef}")
    if not 0.0 < ppo.teacher_fraction <= 1.0:
        raise ConfigError(f"--teacher-fraction must be in (0, 1], got {ppo.teacher_fraction}")
    if has_teacher(config) and learns_by_dreaming(config):
        raise ConfigError(f"--teacher {ppo.teacher} needs the PPO update; --agent {config.agent} replaces it")
    if net.dtype not in ("float32", "bfloat16"):
        raise ConfigError(f"--dtype must be float32 or bfloat16, got {net.dtype!r}")
    if net.activation not in ("tanh", "relu"):
        raise ConfigError(f"--activation must be tanh or relu, got {net.activation!r}")
    if net.encoder not in ENCODERS:
        raise ConfigError(f"--encoder must be one of {', '.join(ENCODERS)}, got {net.encoder!r}")
    if net.obs_dtype not in OBS_DTYPES:
        raise ConfigError(f"--obs-dtype must be one of {', '.join(OBS_DTYPES)}, got {net.obs_dtype!r}")
    if net.cell_dim <= 0:
        raise ConfigError(f"--cell-dim must be positive, got {net.cell_dim}")
    if net.recurrent not in RECURRENT_CELLS:
        raise ConfigError(f"--recurrent must be one of {', '.join(RECURRENT_CELLS)}, got {net.recurrent!r}")
    if net.recurrent == "none" and net.recurrent_embed:
        raise ConfigError(f"--recurrent-embed {net.recurrent_embed} is the input layer of a recurrent cell: pass "
                          "--recurrent gru or lstm with it")
    if net.recurrent != "none":
        if learns_by_dreaming(config):
            raise ConfigError(f"--recurrent {net.recurrent} needs the PPO update; --agent {config.agent} replaces it "
                              "(its actor learns in imagination, feed-forward)")
        if net.recurrent_embed < 0:
            raise ConfigError(f"--recurrent-embed must be 0 (none) or a positive width, got {net.recurrent_embed}")
        if env.num_envs % ppo.num_minibatches:  # a recurrent minibatch is whole env sequences
            raise ConfigError(f"--recurrent {net.recurrent}: --num-envs {env.num_envs} must divide by "
                              f"--num-minibatches {ppo.num_minibatches} (minibatches are whole env sequences)")
    for family in dataclasses.fields(config.stages):  # each stage family checks its own options
        check = getattr(getattr(config.stages, family.name), "validate", None)
        if check is not None:
            check(config)


INT32_MAX = 2**31 - 1


def check_run_name(name: str) -> None:
    """A run name is one folder inside --checkpoint-dir: `.`, `..`, separators or an absolute path would put the
    run's checkpoints in (or beside) the checkpoint directory itself, where orbax's pruning of old steps deletes
    every sibling run whose folder name is a number."""
    if not name:
        return
    bad = (name in (".", "..") or "/" in name or (os.sep != "/" and os.sep in name) or "\0" in name
           or os.path.isabs(name) or name != name.strip())
    if bad:
        raise ConfigError(f"--run-name {name!r} must be one folder name (no '/', '.', '..' or surrounding spaces)")
