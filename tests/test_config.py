"""The one config: config files with `base:` inheritance under the command line, the shipped presets, and resume
from the checkpoint's stored resolved config."""

import dataclasses
import json
import os
from types import SimpleNamespace

import pytest

from hephaestus.agents.dtc.options import DTC_STAGES
from hephaestus.agents.dreamer.options import DREAMER_STAGES
from hephaestus.config import train_config as cfg
from hephaestus.run.checkpoint import config_of
from hephaestus.run.cli import build_parser, config_from_args, parse
from hephaestus.config.train_config import ConfigError, TrainConfig, resolve
from hephaestus.config.files import load_config_file
from train_cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--env", "gymnax:CartPole-v1", "--num-envs", "4", "--num-steps", "16", "--hidden-dim", "16",
        "--num-layers", "1", "--num-minibatches", "2", "--update-epochs", "1", "--log-interval", "2", "--no-wandb",
        "--final-eval-episodes", "0"]


def write(path, text):
    path.write_text(text)
    return str(path)


def test_base_inheritance_and_command_line_precedence(tmp_path):
    write(tmp_path / "base.yaml", "env: {name: gymnax:CartPole-v1, num_envs: 8, num_steps: 32}\n"
                                  "ppo: {lr: 1.0e-3, ent_coef: 0.02}\nstages: {dtc: {seq_len: 8}}\n")
    child = write(tmp_path / "child.yaml", "base: base.yaml\nenv: {num_envs: 16}\nppo: {lr: 3e-4}\n")
    config = load_config_file(child)
    # the child's values win over its base's, the base fills the rest, the defaults everything else
    assert (config.env.name, config.env.num_envs, config.env.num_steps) == ("gymnax:CartPole-v1", 16, 32)
    assert (config.ppo.lr, config.ppo.ent_coef, config.stages.dtc.seq_len) == (3e-4, 0.02, 8)
    assert config.ppo.gamma == TrainConfig().ppo.gamma
    # flags given on the command line win over the file; flags not given change nothing
    config, resume = parse(["--config", child, "--num-envs", "4", "--dtc-seq-len", "4"])
    assert resume is None
    assert (config.env.num_envs, config.env.num_steps, config.ppo.lr, config.stages.dtc.seq_len) == (4, 32, 3e-4, 4)


def test_presets_load_and_validate():
    names = sorted(os.path.splitext(f)[0] for f in os.listdir(os.path.join(ROOT, "configs")))
    assert names == ["cartpole", "deepsea", "deepsea-dreamer", "deepsea-dtc", "hackmatrix-dreamer",
                     "hackmatrix-dreamer-2e7", "hackmatrix-tpu"]
    presets = {name: resolve(load_config_file(os.path.join(ROOT, "configs", f"{name}.yaml")))[0] for name in names}
    cartpole = presets["cartpole"]  # PureJaxRL's settings
    assert (cartpole.env.num_envs, cartpole.env.num_steps, cartpole.env.total_timesteps) == (4, 128, 500_000)
    assert (cartpole.ppo.num_minibatches, cartpole.ppo.update_epochs, cartpole.ppo.lr, cartpole.ppo.ent_coef) == \
        (4, 4, 2.5e-4, 0.01)
    assert (cartpole.network.hidden_dim, cartpole.network.num_layers, cartpole.network.activation) == (64, 2, "tanh")
    tpu = presets["hackmatrix-tpu"]
    assert (tpu.env.name, tpu.env.num_envs, tpu.env.total_timesteps) == ("hackmatrix", 2048, 10**8)
    assert (tpu.ppo.teacher, tpu.ppo.teacher_fraction, tpu.ppo.ent_coef) == ("exit-rush-collector", 0.5, 0.1)
    assert (tpu.network.hidden_dim, tpu.network.cell_dim, tpu.run.save_interval_minutes) == (128, 8, 10)
    assert cfg.env_defaults("hackmatrix")["encoder"] == "ego" and tpu.network.encoder in ("auto", "ego")
    assert tpu.env.env_params == ("program_played_coef=10", "siphon_death_penalty=0", "program_played_at_clear=1",
                                  "undo_across_stages=0", "program_acquired_coef=4", "program_acquired_at_clear=1",
                                  "curriculum_share=0.25", "curriculum_max_stage=8", "curriculum_program_prob=0.02",
                                  "victory_bonus=100", "victory_score_coef=0", "curriculum_reward_scale=1")
    assert (tpu.ppo.num_minibatches, tpu.ppo.update_epochs) == (32, 2)  # auto-scaled
    # The TPU preset is HackMatrix's defaults at the TPU size and budget: the defaults live in ENV_DEFAULTS alone.
    assert resolve(TrainConfig().replace(num_envs=2048, total_timesteps=10**8, save_interval_minutes=10))[0] == tpu
    deepsea = presets["deepsea"]  # the DeepSea experiment's sizes, the base of both DeepSea presets
    for name in ("deepsea-dtc", "deepsea-dreamer"):
        preset = presets[name]
        assert (preset.env.name, preset.env.num_envs, preset.env.num_steps, preset.ppo.lr, preset.ppo.anneal_lr,
                preset.network.hidden_dim, preset.stages.dtc.seq_len, preset.stages.dtc.replay_ratio) == \
            ("deepsea:10", 16, 32, 1e-3, False, 64, 8, 4.0), name
    assert (deepsea.agent, deepsea.extra_stages) == ("ppo", ())
    assert presets["deepsea-dtc"].extra_stages == DTC_STAGES
    assert presets["deepsea-dreamer"].extra_stages == DREAMER_STAGES
    assert presets["hackmatrix-dreamer"].extra_stages == DREAMER_STAGES
    assert presets["hackmatrix-dreamer-2e7"].extra_stages == DREAMER_STAGES


def test_presets_write_each_value_once():
    """No option (but the env and agent a file is for) is written with the same value in two preset files (a shared
    value goes into a base file), and no preset repeats a value its env's defaults (config.ENV_DEFAULTS,
    DREAMER_ENV_DEFAULTS) already give."""
    import yaml

    from hephaestus.config.files import _flatten
    from hephaestus.agents.dreamer.options import DREAMER_ENV_DEFAULTS

    seen = {}
    for file in sorted(os.listdir(os.path.join(ROOT, "configs"))):
        path = os.path.join(ROOT, "configs", file)
        with open(path) as f:
            data = yaml.safe_load(f)
        data.pop("base", None)
        chain = resolve(load_config_file(path))[0]
        env, env_family = chain.env.name, chain.env.name.partition(":")[0]
        family = {**cfg.ENV_DEFAULTS.get(env_family, {}), **cfg.ENV_DEFAULTS.get(env, {}),
                  **DREAMER_ENV_DEFAULTS.get(env_family, {})}
        for name, value in _flatten(data, path).items():
            if name in ("env", "agent"):
                continue  # what a file is for, not a setting
            assert (name, value) not in seen, f"{file}: {name}={value!r} also in {seen.get((name, value))}"
            seen[(name, value)] = file
            assert family.get(name, object()) != value, f"{file}: {name}={value!r} is the env's default"



def test_hackmatrix_dreamer_config_file_trains_what_the_measured_row_ran():
    """configs/hackmatrix-dreamer.yaml is the 1e6 row it cites (specs/dreamer.md): the run's command line, less its
    seeds, evaluation and logging flags, resolves to the same config: the world model reading the board around the
    player with the mse decoder fit, range advantages, entropy 0.1, HackMatrix's env, network and PPO defaults."""
    shipped = resolve(load_config_file(os.path.join(ROOT, "configs", "hackmatrix-dreamer.yaml")))[0]
    measured = resolve(parse(["--env", "hackmatrix", "--agent", "dreamer", "--total-timesteps", "1e6",
                              "--dreamer-entropy", "0.1", "--dreamer-advantage-norm", "range",
                              "--dtc-recon-loss", "mse", "--dtc-encoder", "ego"])[0])[0]
    assert (shipped.stages.dtc.encoder, shipped.stages.dtc.recon_loss) == ("ego", "mse")
    assert shipped.stages.dtc == measured.stages.dtc and shipped.stages.dreamer == measured.stages.dreamer
    assert shipped.env == measured.env and shipped.network == measured.network and shipped.ppo == measured.ppo
    assert shipped.num_updates == measured.num_updates == 123  # 1e6 rounded up to whole updates of 64 x 128
    # The 2e7 file is the 2e7 row's command line: the same world model and actor-critic, 512 envs, a sixteenth of
    # the replay, and a replay of two rollouts.
    at_2e7 = resolve(load_config_file(os.path.join(ROOT, "configs", "hackmatrix-dreamer-2e7.yaml")))[0]
    measured = resolve(parse(["--config", os.path.join(ROOT, "configs", "hackmatrix-dreamer.yaml"), "--num-envs", "512",
                              "--dtc-replay-ratio", "0.0625", "--dtc-replay-capacity", "8192",
                              "--total-timesteps", "2e7"])[0])[0]
    assert at_2e7 == dataclasses.replace(measured, run=dataclasses.replace(measured.run, run_name=at_2e7.run.run_name))
    assert at_2e7.stages.dreamer == shipped.stages.dreamer and at_2e7.network == shipped.network
    assert (at_2e7.env.num_envs, at_2e7.num_updates, at_2e7.stages.dtc.wm_steps(at_2e7.batch_size)) == (512, 306, 16)


def test_the_dreamers_take_hackmatrix_s_measured_settings_by_default_and_flags_and_old_checkpoints_keep_theirs():
    """Left auto, a dreamer on HackMatrix gets the world model and actor-critic settings of its measured row
    (DREAMER_ENV_DEFAULTS: ego encoder, mse decoder fit, entropy 0.1, range advantages), so the plain command trains
    what configs/hackmatrix-dreamer.yaml names; other envs, and the agents that do not dream, keep the values every
    earlier result used; a flag wins; a checkpoint stored before the options had env defaults resumes as it ran."""
    from hephaestus.run.checkpoint import stored_config
    from hephaestus.agents.dreamer.options import DREAMER_FALLBACK_DEFAULTS, DREAMER_ENV_DEFAULTS

    def settled(*argv):
        config = resolve(parse(list(argv))[0])[0]
        dtc, dreamer = config.stages.dtc, config.stages.dreamer
        return {"dtc_encoder": dtc.encoder, "dtc_recon_loss": dtc.recon_loss, "dreamer_entropy": dreamer.entropy,
                "dreamer_advantage_norm": dreamer.advantage_norm}

    hackmatrix = DREAMER_ENV_DEFAULTS["hackmatrix"]
    assert hackmatrix != DREAMER_FALLBACK_DEFAULTS
    assert settled("--env", "hackmatrix", "--agent", "dreamer") == settled("--env", "hackmatrix", "--agent",
                                                                           "dreamer-dtc") == hackmatrix
    shipped = resolve(load_config_file(os.path.join(ROOT, "configs", "hackmatrix-dreamer.yaml")))[0]
    plain = resolve(parse(["--env", "hackmatrix", "--agent", "dreamer", "--total-timesteps", "1e6"])[0])[0]
    assert plain == dataclasses.replace(shipped, run=plain.run)  # the file names the defaults
    for argv in (("--env", "hackmatrix", "--agent", "dtc"), ("--env", "hackmatrix"),
                 ("--env", "gymnax:CartPole-v1", "--agent", "dreamer"), ("--env", "deepsea:10", "--agent", "dreamer")):
        assert settled(*argv) == DREAMER_FALLBACK_DEFAULTS, argv
    flags = settled("--env", "hackmatrix", "--agent", "dreamer", "--dtc-encoder", "flat", "--dreamer-entropy", "0.01")
    assert flags == {**hackmatrix, "dtc_encoder": "flat", "dreamer_entropy": 0.01}
    old = resolve(TrainConfig().replace(env="hackmatrix", agent="dreamer"))[0].to_dict()
    for name in DREAMER_FALLBACK_DEFAULTS:  # a checkpoint of 5 Dec: none of these fields stored
        old.pop(name)
    restored = stored_config(old, "test")
    assert (restored.stages.dtc.encoder, restored.stages.dtc.recon_loss, restored.stages.dreamer.entropy,
            restored.stages.dreamer.advantage_norm) == ("flat", "nll", 3e-4, "batch")
    assert resolve(restored)[0].stages.dtc.encoder == "flat"  # resolving a stored config does not re-default it


def test_hackmatrix_defaults_are_the_shipped_config_s_learning_settings():
    """Issue 22: a HackMatrix run without --config trains what configs/hackmatrix-tpu.yaml ships (less its TPU size
    and budget): the same teacher, teacher schedule, network and training reward. A --env-params list replaces the
    family's ('' for the rules' reward), other envs get none, and a stored run keeps its own values on resume."""
    from hephaestus.envs.registry import make_training_env

    tpu = resolve(load_config_file(os.path.join(ROOT, "configs", "hackmatrix-tpu.yaml")))[0]
    default = resolve(TrainConfig())[0]
    learning = lambda c: (c.ppo.teacher, c.ppo.teacher_fraction, c.ppo.teacher_coef, c.ppo.ent_coef,
                          c.network.encoder if c.network.encoder != "auto" else cfg.env_defaults(c.env.name)["encoder"],
                          c.network.hidden_dim, c.network.cell_dim, c.env.env_params)
    assert default.env.name == "hackmatrix" and learning(default) == learning(tpu)
    assert default.env.env_params == ("program_played_coef=10", "siphon_death_penalty=0", "program_played_at_clear=1",
                                      "undo_across_stages=0", "program_acquired_coef=4", "program_acquired_at_clear=1",
                                      "curriculum_share=0.25", "curriculum_max_stage=8", "curriculum_program_prob=0.02",
                                      "victory_bonus=100", "victory_score_coef=0", "curriculum_reward_scale=1")
    parsed = lambda *argv: resolve(config_from_args(build_parser().parse_args(list(argv))))[0]
    assert parsed("--env-params", "distance_coef=0").env.env_params == ("distance_coef=0",)   # replaces
    assert parsed("--env-params", "").env.env_params == ()                                     # the rules' reward
    cartpole = parsed("--env", "gymnax:CartPole-v1")
    assert (cartpole.env.env_params, cartpole.ppo.teacher_fraction, cartpole.network.cell_dim) == ((), 1.0, 16)
    # The training env is built with them, before or after resolving (a sweep builds its base unresolved).
    for config in (TrainConfig(), default):
        params = make_training_env(config.env).raw_params
        assert (params.program_played_coef, params.siphon_death_penalty, params.program_played_at_clear,
                params.program_acquired_coef, params.program_acquired_at_clear, params.curriculum_share,
                params.curriculum_max_stage, params.victory_bonus, params.curriculum_reward_scale) == \
            (10.0, 0.0, True, 4.0, True, 0.25, 8, 100.0, True)
    assert make_training_env(parsed("--env-params", "").env).raw_params.siphon_death_penalty == 10.0
    # A run stored with the defaults before 29 Nov resumes with them, not with today's.
    old = parsed("--teacher", "exit-rush-safe", "--teacher-fraction", "1", "--hidden-dim", "256", "--cell-dim", "16",
                 "--env-params", "")
    stored = SimpleNamespace(config=old.to_dict(), run_dir="/tmp/checkpoints/old_run", path="/tmp/checkpoints/old_run/8",
                             step=8)
    resumed = resolve(config_of(stored))[0]
    assert learning(resumed) == learning(old) == ("exit-rush-safe", 1.0, 5.0, 0.1, "ego", 256, 16, ())


def test_an_env_params_list_that_drops_the_list_under_it_says_so(monkeypatch, capsys):
    """--env-params replaces the list under it (the family's default, a --config file's, a resumed run's), so one
    value added to a HackMatrix run without its list drops the run's training reward: the parse says which names
    it dropped, on stderr, and says nothing when the list keeps them (or no list is given)."""
    from hephaestus.run import checkpoint

    default = cfg.ENV_DEFAULTS["hackmatrix"]["env_params"]
    config, _ = parse(["--env-params", "distance_coef=0"])
    assert config.env.env_params == ("distance_coef=0",)
    err = capsys.readouterr().err
    assert "no longer set: " + ",".join(default) in err and err.count("\n") == 1
    for argv in (["--env-params", ",".join(default + ("distance_coef=0",))], ["--lr", "1e-3"],
                 ["--env", "gymnax:CartPole-v1", "--env-params", "max_steps_in_episode=100"]):
        parse(argv)
        assert capsys.readouterr().err == "", argv
    # on --resume the list under it is the stored run's
    stored = resolve(config_from_args(build_parser().parse_args(["--env-params", "distance_coef=0,kill_coef=1"])))[0]
    ckpt = SimpleNamespace(config=stored.to_dict(), run_dir="/tmp/checkpoints/r", path="/tmp/checkpoints/r/8", step=8)
    monkeypatch.setattr(checkpoint, "locate", lambda path: ckpt)
    config, found = parse(["--resume", "/tmp/checkpoints/r", "--env-params", "kill_coef=2"])
    assert found is ckpt and config.env.env_params == ("kill_coef=2",)
    assert "no longer set: distance_coef=0 (" in capsys.readouterr().err
    parse(["--resume", "/tmp/checkpoints/r", "--env-params", "distance_coef=0,kill_coef=2"])
    parse(["--resume", "/tmp/checkpoints/r", "--lr", "1e-4"])
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("text,needle", [
    ("ppo: {lrr: 0.1}\n", "unknown key ppo.lrr"),
    ("env: {num_envs: many}\n", "num_envs is 'many', expected int"),
    ("base: nowhere.yaml\n", "base 'nowhere.yaml' not found"),
    ("env: [1, 2\n", "not valid YAML"),
    ("- 1\n- 2\n", "expected a mapping"),
    ("network: {encoder: conv}\n", "expected one of auto, mlp, cells"),
])
def test_a_bad_config_file_is_one_line_and_exit_2(tmp_path, capsys, text, needle):
    path = write(tmp_path / "bad.yaml", text)
    assert main("--config", path, "--checkpoint-dir", str(tmp_path)) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines
    assert path in lines[0]
    assert not os.path.exists(tmp_path / "checkpoints")


def test_options_have_unique_flat_names_flags_and_help():
    options = cfg.options()
    flags = [option.flag for option in options.values()]
    assert len(set(flags)) == len(flags)
    assert all(option.help for option in options.values())  # help text from each field's docstring
    help_text = build_parser().format_help()
    for flag in flags:
        assert flag in help_text, flag
    with pytest.raises(ConfigError, match="unknown option 'lrr'"):
        TrainConfig().replace(lrr=0.1)


def test_a_resumed_run_keeps_its_stored_resolved_config(tmp_path, capsys, monkeypatch):
    """The checkpoint stores the resolved config; --resume reads it back without re-parsing, so a default changed
    since (here the entropy bonus of every env family) does not change the run, and flags given again do."""
    run = ["--checkpoint-dir", str(tmp_path), "--run-name", "r", "--save-interval", "2"]
    assert main(*TINY, *run, "--total-timesteps", str(2 * 64)) == 0
    saved = json.loads((tmp_path / "r" / "2" / "meta" / "metadata").read_text())["config"]
    assert saved["ent_coef"] == 0.01 and saved["num_minibatches"] == 2 and saved["encoder"] == "mlp"
    monkeypatch.setitem(cfg.FALLBACK_DEFAULTS, "ent_coef", 0.2)  # a default changes after the run was saved
    assert resolve(TrainConfig.from_flat(env="gymnax:CartPole-v1"))[0].ppo.ent_coef == 0.2
    config, ckpt = parse(["--resume", str(tmp_path / "r"), "--total-timesteps", str(4 * 64)])
    assert ckpt.step == 2 and config.ppo.ent_coef == 0.01 and config.env.total_timesteps == 4 * 64
    assert (config.run.run_name, config.run.checkpoint_dir) == ("r", str(tmp_path))
    assert main("--resume", str(tmp_path / "r"), "--total-timesteps", str(4 * 64)) == 0
    resumed = json.loads((tmp_path / "r" / "4" / "meta" / "metadata").read_text())["config"]
    assert resumed["ent_coef"] == 0.01 and resumed["total_timesteps"] == 4 * 64
    assert {k: v for k, v in resumed.items() if k not in ("total_timesteps", "resume")} == \
        {k: v for k, v in saved.items() if k not in ("total_timesteps", "resume")}


def test_an_old_flat_checkpoint_config_still_reads_and_a_foreign_key_is_one_line():
    old = {k: v for k, v in resolve(TrainConfig.from_flat(env="gymnax:CartPole-v1"))[0].to_dict().items()
           if k not in ("encoder", "obs_dtype", "agent")}
    old.update(user_set_minibatches=False, user_set_epochs=False, stage_options=[])  # written by older versions
    ckpt = SimpleNamespace(config=old, run_dir="/tmp/ck/run", path="/tmp/ck/run/10", step=10)
    config = config_of(ckpt)
    assert (config.network.encoder, config.network.obs_dtype) == ("mlp", "float32")  # what old runs were
    assert config.run.run_name == "run" and config.run.resume == "/tmp/ck/run/10"
    with pytest.raises(ConfigError, match="checkpoint 10 metadata: config field warp_drive is not an option"):
        config_of(SimpleNamespace(config={**old, "warp_drive": 1}, run_dir="/tmp/ck/run", path="/tmp/ck/run/10",
                                  step=10))


def test_flags_and_config_from_args_agree():
    args = build_parser().parse_args(["--total-timesteps", "1e8", "--no-anneal-lr", "--extra-stages", "a, b",
                                      "--dtc-bootstrap", "0", "--no-artifact", "--agent", "rnd"])
    config = config_from_args(args)
    assert config.env.total_timesteps == 10**8 and config.ppo.anneal_lr is False
    assert config.extra_stages == ("a", "b") and config.stages.dtc.bootstrap is False
    assert config.logging.wandb_artifacts is False and config.agent == "rnd"
    assert resolve(config.replace(extra_stages=()))[0].extra_stages == ("rnd",)


def test_an_agents_values_fill_auto_options_and_a_given_flag_wins():
    def resolved(*argv):
        return resolve(config_from_args(build_parser().parse_args(["--env", "gymnax:CartPole-v1", *argv])))[0]

    dreamer = resolved("--agent", "dreamer")
    assert (dreamer.stages.dtc.ensemble_size, dreamer.stages.dreamer.novelty_coef) == (1, 0.0)
    assert resolved("--agent", "dreamer", "--dtc-ensemble-size", "3").stages.dtc.ensemble_size == 3
    assert resolved("--agent", "dtc").stages.dtc.ensemble_size == 5
    assert resolved("--agent", "dreamer-dtc").stages.dreamer.novelty_coef == 1.0
    assert resolved("--agent", "dreamer-dtc", "--dreamer-novelty-coef", "0.3").stages.dreamer.novelty_coef == 0.3
    assert resolved("--agent", "dtc").stages.dtc.competence_coef == 1.0
    assert resolved("--agent", "dtc", "--dtc-competence-coef", "0.5").stages.dtc.competence_coef == 0.5
    assert resolved("--agent", "disagreement").stages.dtc.competence_coef == 0.0
    with pytest.raises(ConfigError, match="--agent disagreement is dtc with competence off"):
        resolved("--agent", "disagreement", "--dtc-competence-coef", "0.5")
    assert None not in (resolved().stages.dtc.ensemble_size, resolved().stages.dreamer.novelty_coef)
    # A tuple of whole numbers (--dreamer-horizons) parses from the command line and from a file's list.
    assert resolved("--agent", "dreamer-dtc", "--dreamer-horizons", "8,16").stages.dreamer.horizons == (8, 16)
    assert cfg.options()["dreamer_horizons"].check([8, 16], "file") == (8, 16)
    with pytest.raises(ConfigError, match="expected a list of whole numbers"):
        cfg.options()["dreamer_horizons"].check(["8"], "file")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--dreamer-horizons", "8,x"])


def test_resolve_settles_every_auto_once_and_is_idempotent():
    from hephaestus.envs.adapters import EnvSpec

    hm = EnvSpec(name="hackmatrix", obs_dim=1545, discrete=True, action_dim=28, obs_cells=(33, 36, 42),
                 obs_quanta=(1.0,) * 1545)
    raw = TrainConfig.from_flat(env="hackmatrix", num_envs=2048, agent="disagreement", dtc_replay_capacity=1 << 15)
    assert None in (raw.ppo.ent_coef, raw.network.hidden_dim, raw.ppo.num_minibatches) and raw.run.run_name == ""
    config, note = resolve(raw, hm)
    assert (config.ppo.ent_coef, config.network.hidden_dim, config.network.cell_dim) == (0.1, 128, 8)
    assert (config.ppo.teacher_fraction, config.env.env_params) == (0.5, cfg.ENV_DEFAULTS["hackmatrix"]["env_params"])
    assert len(config.env.env_params) == 12
    assert (config.ppo.num_minibatches, config.ppo.update_epochs) == (32, 2) and note.startswith("auto-scale: batch")
    assert (config.network.encoder, config.network.obs_dtype) == ("mlp", "float32")  # DTC reads float observations
    assert config.extra_stages == DTC_STAGES and config.stages.dtc.competence_coef == 0.0
    assert config.run.run_name == "hackmatrix_s0"
    again, note_again = resolve(config, hm)
    assert again == config and note_again == ""  # stored values are what auto-scale chose: nothing to say
    with pytest.raises(ConfigError, match="resolve\\(config\\) first"):
        cfg.resolve_for_env(raw, hm)
