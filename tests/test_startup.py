"""Start-up safety (issue 23): no program initialises with a batched LAPACK call (what deadlocked XLA's CPU thread
pool), and the watchdog turns a start-up with no progress into one line and a non-zero exit."""

import os
import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest

from hephaestus.run.watchdog import StartupWatchdog

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--env", "gymnax:CartPole-v1", "--num-envs", "4", "--num-steps", "16", "--total-timesteps", "128",
        "--hidden-dim", "16", "--num-layers", "1", "--log-interval", "2", "--num-minibatches", "2",
        "--update-epochs", "1", "--no-wandb"]


# --- the root fix: initialisers mapped, not vmapped ------------------------------------------------------------

def lapack_matrix_shapes(compiled_text: str) -> list[tuple[str, list[int]]]:
    """(LAPACK kernel, dims of its first array result) of every LAPACK custom call in a compiled program."""
    found = []
    for line in compiled_text.splitlines():
        target = re.search(r'custom_call_target="(lapack_\w+)"', line)
        if target:
            dims = re.search(r"= \(?\w+\[([\d,]*)\]", line).group(1)
            found.append((target.group(1), [int(d) for d in dims.split(",") if d]))
    return found


def test_fresh_agents_and_ensembles_initialise_with_unbatched_qrs_only():
    """A vmapped orthogonal initialiser is a *batched* QR, which jaxlib 0.10's CPU kernels split over XLA's pool
    while blocking a pool thread: the deadlock of issue 23. Several agents (--num-seeds, sweeps) and DTC's
    ensemble members are initialised one at a time instead; their compiled programs hold QRs of single matrices."""
    from hephaestus.config.train_config import TrainConfig, resolve
    from hephaestus.agents.dtc import rssm
    from hephaestus.agents.dtc.agent import sizes_from
    from hephaestus.envs.registry import make_env
    from hephaestus.core.ppo import make_train
    from hephaestus.core.runner_state import initial_hyper

    config = resolve(TrainConfig.from_flat(env="gymnax:CartPole-v1", num_envs=4, num_steps=8, hidden_dim=32,
                                           num_layers=2, num_seeds=3, total_timesteps=96))[0]
    trainer = make_train(config)
    keys = jnp.stack([jax.random.PRNGKey(i) for i in range(3)])
    hyper = {k: jnp.full((3,), v, jnp.float32) for k, v in initial_hyper(config).items()}
    calls = lapack_matrix_shapes(trainer.fresh_runner_state.lower(keys, hyper).compile().as_text())
    assert {kernel for kernel, _ in calls} >= {"lapack_sgeqrf_ffi", "lapack_sorgqr_ffi"}  # the QRs are there
    assert all(len(dims) == 2 for _, dims in calls), calls  # and none is batched over the seeds
    # the three seeds' parameters are still three different initialisations
    kernels = trainer.runner_state.train_state.params["params"]["actor"]["Dense_0"]["kernel"]
    assert kernels.shape[0] == 3 and not jnp.allclose(kernels[0], kernels[1])

    dtc = resolve(TrainConfig.from_flat(env="gymnax:CartPole-v1", agent="dtc", num_envs=4, num_steps=16))[0]
    model = rssm.RSSM(sizes_from(dtc, make_env(dtc.env.name).spec))
    init = jax.jit(lambda key: rssm.init_ensemble(model, key, 3))
    calls = lapack_matrix_shapes(init.lower(jax.random.PRNGKey(0)).compile().as_text())
    assert calls and all(len(dims) == 2 for _, dims in calls), calls


def fresh_interpreter_output(code: str, timeout: int = 300) -> list[str]:
    """The stdout lines of `code` run by a fresh interpreter in the checkout (python/ first on its path); fails the
    test with its stderr if it exits non-zero. What a module imports is only visible before anything imported it."""
    out = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, 'python')\n" + code],
                         capture_output=True, text=True, cwd=ROOT, timeout=timeout)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()


def test_the_package_and_the_training_entry_do_not_import_jax():
    """`--help` and a one-line error need no jax start."""
    code = ("import hephaestus, hephaestus.tools.entry_points, hephaestus.run.train, hephaestus.run.watchdog\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib')))")
    assert fresh_interpreter_output(code, timeout=120) == ["[]"]


def test_no_module_of_the_package_and_no_hackmatrix_run_imports_gymnax():
    """gymnax's package import loads every gymnax env and seaborn (about 1.5 s of each start, issue 18): only a
    gymnax env asked for by name imports it. HackMatrix uses envs/spaces.py's copy of the interface."""
    code = ("import pkgutil, importlib; import hephaestus\n"
            "for m in pkgutil.walk_packages(hephaestus.__path__, 'hephaestus.'): importlib.import_module(m.name)\n"
            "from hephaestus.envs.registry import make_env\n"
            "env = make_env('hackmatrix'); assert env.spec.discrete and env.spec.action_dim == 28\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('gymnax', 'seaborn')))")
    assert fresh_interpreter_output(code)[-1] == "[]"


def test_a_gymnax_env_starts_without_the_modules_only_gymnax_renderers_use_and_the_renderers_still_get_them():
    """envs/gymnax_import.py: seaborn (with scipy.stats), matplotlib and its pyplot and colors, which gymnax imports
    for Pong's renderer, are not imported by `make_env`; the first read through gymnax's module globals imports the
    real ones, and a later plain import gets the real module, not the stand-in."""
    code = ("from hephaestus.envs.registry import make_env\n"
            "make_env('gymnax:CartPole-v1'); make_env('deepsea:5')\n"
            "print(sorted(m for m in ('seaborn', 'scipy.stats', 'matplotlib', 'matplotlib.pyplot', 'matplotlib.colors')"
            " if m in sys.modules))\n"
            "from gymnax.environments.misc import pong\n"
            "palette = pong.sns.color_palette('cubehelix', 3)\n"
            "cmap = pong.colors.ListedColormap(palette)\n"
            "import seaborn, matplotlib.pyplot, matplotlib.colors\n"
            "print(len(palette), type(seaborn).__name__, type(matplotlib).__name__, type(matplotlib.pyplot).__name__,\n"
            "      pong.plt.subplots is matplotlib.pyplot.subplots, type(cmap) is matplotlib.colors.ListedColormap)")
    assert fresh_interpreter_output(code) == ["[]", "3 module module module True True"]


# --- the watchdog, deterministic (a fake clock and CPU counter) --------------------------------------------------

class Fake:
    def __init__(self):
        self.now, self.cpu_seconds = 0.0, 0.0

    def watchdog(self, timeout=100.0):
        return StartupWatchdog(timeout, clock=lambda: self.now, cpu=lambda: self.cpu_seconds)

    def advance(self, dog, seconds, cpu_per_second, step=5.0):
        """Let time pass in poll-sized steps; the first message the watchdog gives, or None."""
        message, t = None, 0.0
        while t < seconds and message is None:
            self.now += step
            self.cpu_seconds += cpu_per_second * step
            t += step
            message = dog.check()
        return message


def test_watchdog_names_the_phase_with_no_cpu_progress_once_the_timeout_has_passed():
    fake = Fake()
    dog = fake.watchdog()
    dog.phase, dog._samples = "first compile", [(0.0, 0.0)]  # as enter() sets it, without starting the thread
    assert fake.advance(dog, 95, cpu_per_second=0.001) is None
    message = fake.advance(dog, 10, cpu_per_second=0.001)
    assert message is not None and message.startswith("error: stuck in first compile for 100 s")
    assert "--startup-timeout" in message and "\n" not in message


def test_watchdog_leaves_a_slow_phase_that_burns_cpu_alone():
    fake = Fake()
    dog = fake.watchdog()
    dog.phase, dog._samples = "first compile", [(0.0, 0.0)]
    assert fake.advance(dog, 1000, cpu_per_second=0.1) is None  # a compile on a loaded machine: 10% of a core
    # ...and a stall after it is still caught, a timeout after the last progress.
    assert "stuck in first compile" in fake.advance(dog, 200, cpu_per_second=0.0)


def test_watchdog_does_not_judge_paused_stopped_or_suspended_time():
    fake = Fake()
    dog = fake.watchdog()
    assert fake.advance(dog, 500, cpu_per_second=0.0) is None  # never entered a phase
    dog.phase, dog._samples = "setup", [(fake.now, fake.cpu_seconds)]
    fake.now += 3600  # the process was stopped (Ctrl-Z) for an hour: the watchdog's own thread did not run
    assert dog.check() is None
    assert fake.advance(dog, 90, cpu_per_second=0.0) is None
    dog.stop()
    assert fake.advance(dog, 500, cpu_per_second=0.0) is None


# --- the watchdog in the training script, with a real stall -------------------------------------------------

STALLED_RUN = textwrap.dedent("""
    import sys, threading
    sys.path.insert(0, "python")
    from hephaestus.core import ppo
    from hephaestus.run import train

    real_make_train = ppo.make_train

    def stall():  # blocks like a deadlocked thread pool: the main thread waits, no CPU is used
        threading.Event().wait()

    def make_train(*args, **kwargs):
        if sys.argv[1] == "setup":
            stall()
        trainer = real_make_train(*args, **{**kwargs, "compile_ahead": False})
        class Lowered:
            def compile(self):
                stall()
        class Chunk:
            def lower(self, *args):
                return Lowered()
        trainer.compiled_chunk = Chunk()
        trainer.programs = None  # compile through the stub, not a chunk an earlier test stored for this config
        if kwargs.get("compile_ahead"):  # train.py compiles the chunk ahead, in a thread: that compile stalls
            trainer._ahead = trainer._start_compiling(trainer.config.run.log_interval)
        return trainer

    ppo.make_train = make_train
    sys.exit(train.main(sys.argv[2:]))
""")


@pytest.mark.parametrize("phase", ["setup", "first compile"])
def test_a_run_stuck_at_start_up_prints_one_line_and_exits_non_zero(tmp_path, phase):
    out = subprocess.run([sys.executable, "-c", STALLED_RUN, phase.split()[-1], *TINY, "--startup-timeout", "3",
                          "--checkpoint-dir", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=240)
    assert out.returncode == 1, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: stuck in {phase} for "), out.stderr
    assert "run " in out.stdout  # what it printed before the stall reached the terminal


def test_startup_timeout_must_not_be_negative():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "train_purejaxrl.py"), *TINY,
                          "--startup-timeout", "-1"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.strip().endswith("got -1.0")


def test_the_loop_watches_the_first_compile_and_chunk_then_stops_the_watchdog():
    from hephaestus.config.train_config import TrainConfig, resolve
    from hephaestus.envs.adapters import adapt_gymnax
    from hephaestus.run.loop import run
    from hephaestus.core.ppo import make_train
    from toy_envs import RandomWalk

    class Recorder:
        def __init__(self):
            self.calls = []

        def enter(self, phase):
            self.calls.append(phase)

        def stop(self):
            self.calls.append("stop")

    env = RandomWalk()
    config, _ = resolve(TrainConfig.from_flat(env="walk", hidden_dim=16, num_layers=1, num_envs=4, num_steps=16,
                                    num_minibatches=2, update_epochs=1, log_interval=2, total_timesteps=4 * 16 * 6))
    recorder = Recorder()
    result = run(make_train(config, adapt_gymnax(env, env.default_params, "walk")), message=lambda _: None,
                 startup=recorder)
    assert len(result.records) == 3  # three chunks; only the first is watched
    assert recorder.calls == ["first compile", "first chunk", "stop"]  # "first chunk": the tests run on the CPU


def _walk_trainer(**kwargs):
    from hephaestus.config.train_config import TrainConfig, resolve
    from hephaestus.envs.adapters import adapt_gymnax
    from hephaestus.core.ppo import make_train
    from toy_envs import RandomWalk

    env = RandomWalk()
    config, _ = resolve(TrainConfig.from_flat(env="walk", hidden_dim=16, num_layers=1, num_envs=4, num_steps=16,
                                              num_minibatches=2, update_epochs=1, log_interval=2,
                                              total_timesteps=4 * 16 * 6))
    return make_train(config, adapt_gymnax(env, env.default_params, "walk"), **kwargs)


def test_the_chunk_compiled_ahead_is_the_one_the_loop_runs_and_computes_the_same():
    """make_train(compile_ahead=True) (train.py's) compiles the chunk in a thread from the fresh state's shapes
    while the state is built; the loop's `chunk_executable` takes that program, which computes what the plain
    jitted chunk computes."""
    import numpy as np

    ahead = _walk_trainer(compile_ahead=True)
    pending = ahead._ahead
    assert pending is not None and pending["thread"].name == "compile-chunk"
    executable = ahead.chunk_executable(ahead.runner_state, 2)
    assert executable is pending["executable"] and ahead._ahead is None  # taken once
    plain = _walk_trainer()
    assert plain._ahead is None  # only when asked: other callers jit the chunk themselves
    runner_a, metrics_a = executable(ahead.runner_state, np.int32(2))
    runner_p, metrics_p = plain.train_chunk(plain.runner_state, 2)
    for a, p in zip(jax.tree.leaves(runner_a.train_state.params), jax.tree.leaves(runner_p.train_state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(p))
    np.testing.assert_array_equal(np.asarray(metrics_a["pg_loss"]), np.asarray(metrics_p["pg_loss"]))


def test_a_state_of_other_types_or_a_failed_ahead_compile_is_handled_where_the_loop_asks():
    ahead = _walk_trainer(compile_ahead=True)
    pending = ahead._ahead
    weak = ahead.runner_state.replace(update_step=jnp.asarray(0))  # a weakly typed leaf: not the program's input
    assert ahead.chunk_executable(weak, 2) is not pending["executable"]

    failing = _walk_trainer()

    class Lowering:
        def lower(self, *args):
            raise RuntimeError("RESOURCE_EXHAUSTED: out of memory while compiling")

    failing.compiled_chunk = Lowering()
    failing._ahead = failing._start_compiling(2)
    with pytest.raises(RuntimeError, match="RESOURCE_EXHAUSTED"):  # the thread's error, in the caller's thread
        failing.chunk_executable(failing.runner_state, 2)


def test_a_run_that_fails_in_setup_in_process_leaves_no_watchdog_running(tmp_path, capsys):
    """main() called in-process (a notebook, the tests) that stops with a one-line error during setup must not
    leave its watchdog watching: it would end the caller's process once that process idles for the timeout."""
    from hephaestus.run.train import main

    with pytest.raises(SystemExit) as exit_:
        main(["--env", "gymnax:NoSuchEnv-v0", "--checkpoint-dir", str(tmp_path), "--no-wandb"])
    assert exit_.value.code == 2
    assert "NoSuchEnv" in capsys.readouterr().err
    import threading
    assert not [t for t in threading.enumerate() if t.name == "startup-watchdog" and t.is_alive()]


def test_the_cold_start_benchmark_runs_its_many_seeds_start():
    """benchmarks/cold_starts.py (the stress benchmark of issue 23) still builds what a --num-seeds run builds
    first; one cold start of it, counted as ok (not an error, a hang or slow)."""
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "cold_starts.py"), "--starts", "1",
                          "--configs", "seeds"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "seeds start 1/1: ok" in out.stdout and "hangs: 0 of 1 (ok 1)" in out.stdout, out.stdout + out.stderr[-2000:]


def test_the_startup_timeline_benchmark_times_the_run_setup_and_compile_lines_in_order(tmp_path):
    """benchmarks/startup_timeline.py (issue 18's start-up figures): the three marks of a real start, in order."""
    script = os.path.join(ROOT, "benchmarks", "startup_timeline.py")
    out = subprocess.run([sys.executable, script, "--rounds", "1", "--checkpoint-dir", str(tmp_path), ROOT, "--",
                          *TINY[:6], "--hidden-dim", "16"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    row = out.stdout.strip().splitlines()[-1].split()
    run_line, setup_done, compile_done = (float(x) for x in row[2:5])
    assert 0 < run_line <= setup_done <= compile_done and "compile:" in out.stdout
    bad = subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "has no scripts/train_purejaxrl.py" in bad.stderr


def test_hackmatrix_declares_the_observation_that_a_traced_reset_shows():
    """HackMatrix declares its observation's width and action mask, so adapting it traces no reset (a warm start's
    ~0.4 s); the declaration must match what that trace would have found."""
    from hephaestus.envs import adapters
    from hephaestus.envs.registry import make_env

    env = make_env("hackmatrix")
    raw, params = env.raw_env, env.raw_params
    probed = adapters._probe_spec("hackmatrix", lambda key: raw.reset_env(key, params)[::-1], True, raw.num_actions)
    assert (env.spec.obs_dim, env.spec.has_action_mask) == (probed.obs_dim, probed.has_action_mask) == (1545, True)

    def no_reset(key):
        raise AssertionError("a reset was traced for an env that declares its observation")

    declared = adapters._probe_spec("hackmatrix", no_reset, True, raw.num_actions, env=raw)
    assert (declared.obs_dim, declared.has_action_mask) == (1545, True)
