"""Command line -> TrainConfig. Bad input becomes a one-line error and exit code 2, never a traceback."""

from __future__ import annotations

import argparse
import math
import sys

from hephaestus.config import AGENTS, agent_config, ENCODERS, ENV_DEFAULTS, FALLBACK_DEFAULTS, OBS_DTYPES, TrainConfig

DEFAULTS = TrainConfig()


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


# Exploration-bonus flags: --intrinsic-coef -> dtc_intrinsic_coef, --dtc-deter-dim -> dtc_deter_dim, --rnd-coef ->
# rnd_coef, ... (config.py documents each field)
DTC_FLAGS = (
    ("--intrinsic-coef", "intrinsic reward weight: reward += coef x (novelty + competence term)"),
    ("--dtc-ensemble-size", "world-model ensemble members K"),
    ("--dtc-deter-dim", "RSSM deterministic (GRU) state size"),
    ("--dtc-stoch-groups", "RSSM categorical latents"),
    ("--dtc-stoch-classes", "classes per categorical latent"),
    ("--dtc-hidden-dim", "RSSM MLP width"),
    ("--dtc-wm-lr", "world-model learning rate"),
    ("--dtc-replay-ratio", "replayed transitions per env step (sets the world-model gradient steps per update)"),
    ("--dtc-bootstrap", "1: each member trains on its own replay draws; 0: all on one shared batch"),
    ("--dtc-competence-coef", "gain of competence on novelty (0 = disagreement alone)"),
    ("--dtc-wm-batch", "replayed sequences per world-model gradient step"),
    ("--dtc-seq-len", "replay sequence length; must divide --num-steps"),
    ("--dtc-replay-capacity", "replay ring buffer size, in sequences"),
    ("--dtc-frontier-fraction", "share of replay draws from the most recent window"),
    ("--dtc-frontier-window", "sequences in the recent window"),
    ("--rnd-coef", "RND bonus weight: reward += coef x normalised prediction error"),
    ("--rnd-hidden-dim", "RND network width"),
    ("--rnd-embed-dim", "RND embedding size"),
    ("--rnd-lr", "RND predictor learning rate"),
    ("--rnd-steps", "RND predictor gradient steps per PPO update"),
    ("--count-coef", "count bonus weight: reward += coef / sqrt(visits of the next observation)"),
    ("--count-table-size", "count bonus hash buckets"),
)
BONUS_PREFIXES = ("dtc_", "rnd_", "count_")


def flag_field(flag: str) -> str:
    """--intrinsic-coef -> dtc_intrinsic_coef; --rnd-lr -> rnd_lr; --dtc-seq-len -> dtc_seq_len."""
    name = flag[2:].replace("-", "_")
    return name if name.startswith(BONUS_PREFIXES) else "dtc_" + name


def _bool01(text: str) -> bool:
    if text not in ("0", "1"):
        raise argparse.ArgumentTypeError(f"expected 0 or 1, got {text!r}")
    return text == "1"


def dtc_fields(args: argparse.Namespace) -> dict:
    """The TrainConfig dtc_*, rnd_*, count_* fields the bonus flags set (absent from namespaces built without
    them)."""
    return {name: value for name, value in vars(args).items()
            if name.startswith(BONUS_PREFIXES) and name in TrainConfig.__dataclass_fields__}


def env_default_text(field: str) -> str:
    """"0.03 for hackmatrix, else 0.01": a default that depends on --env (config.ENV_DEFAULTS)."""
    special = [f"{values[field]} for {family}" for family, values in ENV_DEFAULTS.items() if field in values]
    return ", ".join(special + [f"else {FALLBACK_DEFAULTS[field]}"]) if special else str(FALLBACK_DEFAULTS[field])


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    d = DEFAULTS
    g = p.add_argument_group("environment")
    g.add_argument("--env", default=d.env, help="hackmatrix, gymnax:<id> (e.g. gymnax:CartPole-v1), jumanji:<id> "
                   "(e.g. jumanji:Snake-v1) or craftax:<id> (default: %(default)s)")
    g.add_argument("--num-envs", type=int, default=d.num_envs,
                   help="parallel environments, global across devices (default: %(default)s)")
    g.add_argument("--num-steps", type=int, default=d.num_steps,
                   help="steps per env per rollout; batch = num-envs x num-steps (default: %(default)s)")
    g.add_argument("--total-timesteps", type=number, default=d.total_timesteps,
                   help="env steps to train for; accepts 1e8 (default: %(default)s)")

    g = p.add_argument_group("PPO")
    g.add_argument("--lr", type=float, default=d.lr, help="Adam learning rate (default: %(default)s)")
    g.add_argument("--anneal-lr", action=argparse.BooleanOptionalAction, default=d.anneal_lr,
                   help="decay the learning rate linearly to 0 over the run (default: on)")
    g.add_argument("--gamma", type=float, default=d.gamma, help="discount factor (default: %(default)s)")
    g.add_argument("--gae-lambda", type=float, default=d.gae_lambda, help="GAE lambda (default: %(default)s)")
    g.add_argument("--num-minibatches", type=int, default=None,
                   help=f"minibatches per epoch (default {d.num_minibatches}; auto-scaled for batches over "
                        "32,768 unless this or --update-epochs is set)")
    g.add_argument("--update-epochs", type=int, default=None,
                   help=f"passes over each batch (default {d.update_epochs}; auto-scaled, see above)")
    g.add_argument("--clip-eps", type=float, default=d.clip_eps, help="PPO ratio clip (default: %(default)s)")
    g.add_argument("--vf-coef", type=float, default=d.vf_coef, help="value loss weight (default: %(default)s)")
    g.add_argument("--ent-coef", type=float, default=None,
                   help=f"entropy bonus weight (default: {env_default_text('ent_coef')})")
    g.add_argument("--max-grad-norm", type=float, default=d.max_grad_norm,
                   help="global gradient-norm clip (default: %(default)s)")

    g = p.add_argument_group("network")
    g.add_argument("--hidden-dim", type=int, default=None,
                   help=f"MLP width (default: {env_default_text('hidden_dim')})")
    g.add_argument("--num-layers", type=int, default=d.num_layers, help="MLP hidden layers (default: %(default)s)")
    g.add_argument("--activation", choices=("tanh", "relu"), default=d.activation,
                   help="hidden activation (default: %(default)s)")
    g.add_argument("--dtype", choices=("float32", "bfloat16"), default=d.dtype,
                   help="matmul dtype; parameters and reductions stay float32 (default: %(default)s)")
    g.add_argument("--encoder", choices=ENCODERS, default=d.encoder,
                   help="observation encoder: cells embeds each board cell with shared weights (envs declaring "
                        "obs_cells, e.g. hackmatrix), mlp feeds the flat observation; auto = mlp for now "
                        "(default: %(default)s)")
    g.add_argument("--cell-dim", type=int, default=d.cell_dim,
                   help="per-cell embedding width of the cells encoder (default: %(default)s)")
    g.add_argument("--obs-dtype", choices=OBS_DTYPES, default=d.obs_dtype,
                   help="how the rollout buffer stores observations: uint8 is exact for envs declaring obs_quanta "
                        "(hackmatrix) at a quarter of float32's memory; bfloat16 halves it, rounding what the "
                        "policy sees; auto = uint8 where exact, else float32 (default: %(default)s)")
    g.add_argument("--extra-stages", default="",
                   help="comma-separated extra pipeline stages, e.g. reward_bonus (default: none)")

    g = p.add_argument_group("exploration agents (specs/dtc.md)")
    g.add_argument("--agent", choices=tuple(AGENTS), default="ppo",
                   help="ppo: plain PPO; dtc: world-model ensemble + dual-timescale intrinsic reward; disagreement: "
                        "dtc with competence off (ensemble disagreement alone); rnd: Random Network Distillation; "
                        "count: tabular count bonus on the next observation (small discrete envs) (default: ppo)")
    for flag, help_text in DTC_FLAGS:
        field = flag_field(flag)
        default = getattr(d, field)
        kind = _bool01 if isinstance(default, bool) else type(default)
        g.add_argument(flag, dest=field, type=kind, default=default, metavar=flag[2:].upper().replace("-", "_"),
                       help=f"{help_text} (default: {int(default) if isinstance(default, bool) else default})")

    g = p.add_argument_group("run")
    g.add_argument("--seed", type=int, default=d.seed, help="PRNG seed (default: %(default)s)")
    g.add_argument("--num-seeds", type=int, default=d.num_seeds,
                   help="independent agents trained together by one vmapped program, seeded --seed, --seed+1, ...; "
                        "metrics hold their mean, std, IQM and per-seed values (default: %(default)s)")
    g.add_argument("--log-interval", type=int, default=d.log_interval,
                   help="PPO updates per compiled chunk, i.e. per console line (default: %(default)s)")
    g.add_argument("--run-name", default="", help="name of the run and of checkpoints/<run-name>/ "
                   "(default: <env>_s<seed>, or <env>_s<first>-<last> with --num-seeds)")
    g.add_argument("--checkpoint-dir", default=d.checkpoint_dir,
                   help="where run folders go (default: %(default)s)")

    g = p.add_argument_group("evaluation (specs/pipeline.md)")
    g.add_argument("--eval-every", type=int, default=d.eval_every, metavar="UPDATES",
                   help="evaluate after the chunk in which the update count crosses a multiple of this: eval/ "
                        "metrics in every sink (default: 0 = off)")
    g.add_argument("--eval-episodes", type=int, default=d.eval_episodes,
                   help="complete episodes per evaluation, run in parallel, greedy (default: %(default)s)")
    g.add_argument("--eval-max-steps", type=int, default=d.eval_max_steps,
                   help="evaluation episodes are cut after this many steps (default: %(default)s)")
    g.add_argument("--eval-sampled", action=argparse.BooleanOptionalAction, default=d.eval_sampled,
                   help="also evaluate the sampled policy, under eval_sampled/ (default: off)")
    g.add_argument("--final-eval-episodes", type=int, default=d.final_eval_episodes,
                   help="episodes of the evaluation at the end of the run, written to <run>/eval.json "
                        "(default: %(default)s; 0 = off)")

    g = p.add_argument_group("checkpoints and resume")
    g.add_argument("--resume", default="", metavar="PATH",
                   help="continue from checkpoints/<run>/ (its latest checkpoint) or one step directory in it; "
                        "flags not given again come from the checkpoint's config")
    g.add_argument("--keep-checkpoints", type=int, default=d.keep_checkpoints,
                   help="newest checkpoints to keep (default: %(default)s)")
    g.add_argument("--save-interval-minutes", type=float, default=d.save_interval_minutes,
                   help="minutes between checkpoints (default: %(default)s)")
    g.add_argument("--save-interval", type=int, default=d.save_interval, metavar="UPDATES",
                   help="save every this many PPO updates instead (checked after each chunk; default: off)")
    g.add_argument("--startup-timeout", type=float, default=d.startup_timeout, metavar="SECONDS",
                   help="stop with a one-line error when setup, the first compile or the first chunk makes no CPU "
                        "progress for this long (a deadlock, not a slow compile; 0 = off; default: %(default)s)")
    g.add_argument("--keep-optimizer", action="store_true", default=d.keep_optimizer,
                   help="on a resume with a different --num-envs, keep the optimizer state (default: reset)")

    g = p.add_argument_group("logging")
    g.add_argument("--wandb", action=argparse.BooleanOptionalAction, default=d.wandb,
                   help="log to Weights & Biases (default: on when WANDB_API_KEY or a ~/.netrc entry for "
                        "api.wandb.ai exists; offline mode without a key or network)")
    g.add_argument("--project", dest="wandb_project", default=d.wandb_project,
                   help="wandb project (default: %(default)s)")
    g.add_argument("--entity", dest="wandb_entity", default=d.wandb_entity, help="wandb entity (default: yours)")
    g.add_argument("--no-artifact", dest="wandb_artifacts", action="store_false", default=d.wandb_artifacts,
                   help="do not upload checkpoints to wandb as artifacts")
    g.add_argument("--tensorboard", dest="tensorboard_dir", default=d.tensorboard_dir, metavar="DIR",
                   help="also write TensorBoard event files to DIR")

    g = p.add_argument_group("devices")
    g.add_argument("--num-devices", type=int, default=d.num_devices,
                   help="devices to split the envs over; --num-envs must divide by it (default: 0 = all)")
    g.add_argument("--distributed", action=argparse.BooleanOptionalAction, default=d.distributed,
                   help="multi-host: call jax.distributed.initialize() first; run the same command on every host "
                        "(automatic on TPU pod slices; default: off)")


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    d = DEFAULTS
    extra = tuple(s.strip() for s in args.extra_stages.split(",") if s.strip())
    config = TrainConfig(
        env=args.env, num_envs=args.num_envs, num_steps=args.num_steps, total_timesteps=args.total_timesteps,
        lr=args.lr, anneal_lr=args.anneal_lr, gamma=args.gamma, gae_lambda=args.gae_lambda,
        num_minibatches=args.num_minibatches if args.num_minibatches is not None else d.num_minibatches,
        update_epochs=args.update_epochs if args.update_epochs is not None else d.update_epochs,
        user_set_minibatches=args.num_minibatches is not None, user_set_epochs=args.update_epochs is not None,
        clip_eps=args.clip_eps, vf_coef=args.vf_coef, ent_coef=args.ent_coef, max_grad_norm=args.max_grad_norm,
        hidden_dim=args.hidden_dim, num_layers=args.num_layers, activation=args.activation, dtype=args.dtype,
        encoder=args.encoder, cell_dim=args.cell_dim, obs_dtype=args.obs_dtype,
        extra_stages=extra, **dtc_fields(args), seed=args.seed, num_seeds=args.num_seeds, log_interval=args.log_interval, run_name=args.run_name,
        eval_every=args.eval_every, eval_episodes=args.eval_episodes, eval_max_steps=args.eval_max_steps,
        eval_sampled=args.eval_sampled, final_eval_episodes=args.final_eval_episodes,
        checkpoint_dir=args.checkpoint_dir, num_devices=args.num_devices, distributed=args.distributed,
        keep_checkpoints=args.keep_checkpoints, save_interval_minutes=args.save_interval_minutes,
        save_interval=args.save_interval, resume=args.resume, keep_optimizer=args.keep_optimizer,
        startup_timeout=args.startup_timeout,
        wandb=args.wandb, wandb_project=args.wandb_project, wandb_entity=args.wandb_entity,
        wandb_artifacts=args.wandb_artifacts, tensorboard_dir=args.tensorboard_dir)
    return agent_config(config, getattr(args, "agent", "ppo"))


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="train_purejaxrl.py",
                      description="Train PPO with the whole loop (env, rollout, GAE, update) compiled into one "
                                  "XLA program. Prints one line per chunk and writes "
                                  "<checkpoint-dir>/<run-name>/metrics.jsonl.")
    add_train_arguments(p)
    return p


def fail(message: str, code: int = 2):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)
