"""Tests for the Cloud TPU operations scripts in scripts/tpu/.

Each script runs in a subprocess with a fake `gcloud` first on PATH; the fake appends its argv as a JSON
line to a log, prints $FAKE_GCLOUD_STDOUT and exits with $FAKE_GCLOUD_EXIT. Tests assert the exact gcloud
argv. The remote shell programs (train, status, stop, setup) are also run here with bash against fake
tools and, where tmux is installed, a real tmux server in a private socket directory.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TPU = ROOT / "scripts" / "tpu"
ZONE = "us-central2-b"
BASE = ["gcloud", "compute", "tpus", "tpu-vm"]

# bash rather than Python: it starts in milliseconds, which keeps this file fast. Escapes what JSON needs
# (backslash, quote, tab, CR, newline) for the arguments these scripts pass.
FAKE_GCLOUD = r"""#!{bash}
bs='\' q='"' tab=$'\t' cr=$'\r' nl=$'\n'
line='['; sep=''
for a in "$@"; do
  a=${{a//"$bs"/"$bs$bs"}}; a=${{a//"$q"/"$bs$q"}}
  a=${{a//"$tab"/"${{bs}}t"}}; a=${{a//"$cr"/"${{bs}}r"}}; a=${{a//"$nl"/"${{bs}}n"}}
  line+="$sep\"$a\""; sep=', '
done
printf '%s]\n' "$line" >> "$FAKE_GCLOUD_LOG"
printf '%s' "${{FAKE_GCLOUD_STDOUT:-}}"
exit "${{FAKE_GCLOUD_EXIT:-0}}"
"""


def write_exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


class Gcloud:
    """Runs a script against the fake gcloud and reads back the recorded calls."""

    def __init__(self, tmp_path: Path):
        self.bin = tmp_path / "bin"
        self.log = tmp_path / "gcloud.jsonl"
        write_exe(self.bin / "gcloud", FAKE_GCLOUD.format(bash=shutil.which("bash") or "/bin/bash"))
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith(("FAKE_GCLOUD", "CLOUDSDK"))
        }
        self.env.update(PATH=f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}", FAKE_GCLOUD_LOG=str(self.log))
        self.cwd = tmp_path / "work"
        self.cwd.mkdir()

    def run(self, script: str, *args: str, stdout: str = "", exit_code: int = 0, env=None, stdin=None):
        env = {**self.env, "FAKE_GCLOUD_STDOUT": stdout, "FAKE_GCLOUD_EXIT": str(exit_code), **(env or {})}
        # -S: no site-packages, which both speeds this up and proves the scripts need only the stdlib
        return subprocess.run(
            [sys.executable, "-S", str(TPU / f"{script}.py"), *args],
            env=env,
            cwd=self.cwd,
            stdin=subprocess.DEVNULL if stdin is None else stdin,
            capture_output=True,
            text=True,
            timeout=30,
        )

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [["gcloud", *json.loads(line)] for line in self.log.read_text().splitlines()]


@pytest.fixture
def gcloud(tmp_path):
    return Gcloud(tmp_path)


def ok(proc) -> None:
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr


def printed(proc) -> list[list[str]]:
    """The `+ ...` lines a script printed, parsed back into argv lists."""
    return [shlex.split(line[2:]) for line in proc.stdout.splitlines() if line.startswith("+ ")]


def one_line_error(proc, *fragments: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def ssh_command(call: list[str]) -> str:
    [command] = [a[len("--command="):] for a in call if a.startswith("--command=")]
    return command


def test_fake_gcloud_records_argv_exactly(gcloud):
    args = ["a b", "q\"u'o", "back\\slash\\", "tab\there", "$HOME *", "--command=x; echo \"$(id)\" & y", ""]
    env = {**gcloud.env, "FAKE_GCLOUD_STDOUT": "out", "FAKE_GCLOUD_EXIT": "4"}
    proc = subprocess.run([str(gcloud.bin / "gcloud"), *args], env=env, capture_output=True, text=True)
    assert (proc.returncode, proc.stdout) == (4, "out")
    assert gcloud.calls() == [["gcloud", *args]]


# --------------------------------------------------------------------------------------------------
# create


def test_create_spot(gcloud):
    proc = gcloud.run("create", "heph-v4", "--zone", ZONE, "--type", "v4-8", "--spot")
    ok(proc)
    expected = BASE + ["create", "heph-v4", f"--zone={ZONE}", "--accelerator-type=v4-8",
                       "--version=tpu-ubuntu2204-base", "--spot"]
    assert gcloud.calls() == [expected]
    assert printed(proc) == [expected]


def test_create_on_demand_pod_with_project_and_version(gcloud):
    proc = gcloud.run("create", "heph-pod", "--zone", ZONE, "--type", "v4-32", "--on-demand",
                      "--version", "tpu-vm-v4-base", "--project", "my-project")
    ok(proc)
    assert gcloud.calls() == [BASE + ["create", "heph-pod", f"--zone={ZONE}", "--accelerator-type=v4-32",
                                      "--version=tpu-vm-v4-base", "--project=my-project"]]


def test_create_defaults_to_spot_and_picks_runtime_for_newer_types(gcloud):
    ok(gcloud.run("create", "heph-v6", "--zone", "europe-west4-a", "--type", "v6e-8"))
    [call] = gcloud.calls()
    assert "--spot" in call and "--version=v2-alpha-tpuv6e" in call


@pytest.mark.parametrize("args, fragment", [
    (["--zone", ZONE, "--type", "v4-8"], "NAME"),
    (["heph", "--zone", ZONE, "--type", "v4_8"], "accelerator type"),
    (["heph", "--type", "v4-8"], "--zone"),
    (["heph", "--zone", "central", "--type", "v4-8"], "zone"),
    (["Bad_Name", "--zone", ZONE, "--type", "v4-8"], "TPU name"),
    (["heph", "--zone", ZONE, "--type", "v4-8", "--spot", "--on-demand"], "not allowed"),
])
def test_create_bad_input(gcloud, args, fragment):
    proc = gcloud.run("create", *args)
    assert proc.returncode == 2
    one_line_error(proc, "create.py: error:", fragment)
    assert gcloud.calls() == []


# --------------------------------------------------------------------------------------------------
# dry run, failures, missing gcloud (shared behaviour, checked on several scripts)

DRY_RUNS = [
    ("create", ["--type", "v4-8"]),
    ("setup", ["--repo", "https://example.com/h.git"]),
    ("train", ["--multi-host", "--", "--env", "hackmatrix"]),
    ("status", []),
    ("status", ["--attach"]),
    ("fetch", ["--run", "r1"]),
    ("fetch", []),
    ("delete", []),
    ("stop", []),
    ("push", ["--run", "r1"]),
]


@pytest.mark.parametrize("script, extra", DRY_RUNS)
def test_dry_run_prints_and_runs_nothing(gcloud, script, extra):
    # --dry-run before `--` (train passes what follows `--` to training)
    args = ["heph", "--zone", ZONE, "--dry-run"]
    if "--" in extra:
        cut = extra.index("--")
        args += extra[:cut] + ["--"] + extra[cut + 1:]
    else:
        args += extra
    proc = gcloud.run(script, *args, env={"PATH": str(gcloud.bin.parent / "empty")})  # no gcloud needed
    ok(proc)
    assert gcloud.calls() == []
    commands = printed(proc)
    assert commands and all(cmd[:4] == BASE for cmd in commands)
    assert all(f"--zone={ZONE}" in cmd for cmd in commands)
    assert not (gcloud.cwd / "checkpoints").exists()


def test_dry_run_train_command_matches_real_run(gcloud):
    dry = gcloud.run("train", "heph", "--zone", ZONE, "--dry-run", "--", "--seed", "3")
    real = gcloud.run("train", "heph", "--zone", ZONE, "--", "--seed", "3")
    ok(dry), ok(real)
    assert printed(dry) == printed(real) == gcloud.calls()


@pytest.mark.parametrize("script, extra", [
    ("create", ["--type", "v4-8"]),
    ("train", []),
    ("fetch", ["--run", "r1"]),
    ("delete", ["--yes"]),
])
def test_failing_gcloud_is_one_line_with_its_exit_code(gcloud, script, extra):
    proc = gcloud.run(script, "heph", "--zone", ZONE, *extra, exit_code=3)
    assert proc.returncode == 3
    line = one_line_error(proc, f"{script}.py: error:", "exit code 3", "gcloud compute tpus tpu-vm")
    assert len(line) < 400  # a long --command=... is elided
    assert len(gcloud.calls()) == 1


@pytest.mark.parametrize("script, extra", [
    ("create", ["--type", "v4-8"]),
    ("setup", ["--repo", "https://example.com/h.git"]),
    ("status", []),
    ("delete", []),  # checked before asking for confirmation
])
def test_missing_gcloud_is_one_line(gcloud, script, extra):
    empty = gcloud.bin.parent / "empty"
    empty.mkdir(exist_ok=True)
    proc = gcloud.run(script, "heph", "--zone", ZONE, *extra, env={"PATH": str(empty)})
    assert proc.returncode == 127
    one_line_error(proc, "gcloud not found on PATH", "cloud.google.com/sdk")
    assert proc.stdout == ""


def test_project_passes_through_to_every_command(gcloud):
    ok(gcloud.run("status", "heph", "--zone", ZONE, "--project", "my-project", stdout="READY\tv4-8\t\n"))
    ok(gcloud.run("fetch", "heph", "--zone", ZONE, "--project", "my-project", "--run", "r1"))
    calls = gcloud.calls()
    assert len(calls) == 3
    assert all("--project=my-project" in call for call in calls)


# --------------------------------------------------------------------------------------------------
# setup


def test_setup_runs_on_all_workers(gcloud):
    proc = gcloud.run("setup", "heph", "--zone", ZONE, "--repo", "https://github.com/me/heph.git",
                      "--branch", "dev")
    ok(proc)
    [call] = gcloud.calls()
    assert call[:8] == BASE + ["ssh", "heph", f"--zone={ZONE}", "--worker=all"]
    script = ssh_command(call)
    assert "\n" not in script
    assert "git clone -q --branch dev -- https://github.com/me/heph.git" in script
    assert "install -r requirements.txt" in script
    assert 'install -U "jax[tpu]' in script and "-f " not in script and "--find-links" not in script
    assert "install -e ." in script
    assert 'export JAX_COMPILATION_CACHE_DIR="$HOME/.jax_cache"' in script
    assert "python3.11 -m venv .venv" in script
    syntax = subprocess.run(["bash", "-n", "-c", script], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr


SETUP_FAKES = {
    # git clone ... --branch B URL DIR: make a checkout with the project's pinned requirements
    "git": """#!/usr/bin/env bash
echo "git $*" >> "$HOME/tools.log"
if [ "$1" = clone ]; then
  dest="${@: -1}"; mkdir -p "$dest/.git"
  printf 'jax[cpu]==0.10.2\\njaxlib==0.10.2\\nflax==0.12.8\\n' > "$dest/requirements.txt"
fi
if [ "$1" = rev-parse ]; then echo abc1234; fi
exit 0
""",
    # python3.11 -m venv DIR: make DIR/bin/python, a fake that logs pip calls
    "python3.11": """#!/usr/bin/env bash
echo "python3.11 $*" >> "$HOME/tools.log"
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin"
  printf '#!/usr/bin/env bash\\necho "venv-python $*" >> "$HOME/tools.log"\\n' > "$3/bin/python"
  chmod +x "$3/bin/python"
fi
""",
    "tmux": "#!/bin/sh\nexit 0\n",
    "sudo": '#!/bin/sh\necho "sudo $*" >> "$HOME/tools.log"\n',
}


def test_setup_program_runs_clone_venv_pip_and_is_idempotent(gcloud, tmp_path):
    ok(gcloud.run("setup", "heph", "--zone", ZONE, "--repo", "https://github.com/me/heph.git"))
    script = ssh_command(gcloud.calls()[0])
    home = tmp_path / "home"
    home.mkdir()
    fakes = tmp_path / "fakes"
    for name, text in SETUP_FAKES.items():
        write_exe(fakes / name, text)
    env = {"HOME": str(home), "PATH": f"{fakes}{os.pathsep}/usr/bin{os.pathsep}/bin"}
    for _attempt in range(2):
        proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=20)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    tools = (home / "tools.log").read_text().splitlines()
    pip = [line for line in tools if " -m pip " in line]
    assert any("install -r requirements.txt" in line for line in pip)
    assert any('install -U jax[tpu]==0.10.2' in line for line in pip)  # matches the pinned jax
    assert any(line.endswith("install -e .") for line in pip)
    assert tools.count("python3.11 -m venv .venv") == 1  # the second run reuses the venv
    assert sum(line.startswith("git clone") for line in tools) == 1  # ... and updates the clone
    assert any(line.startswith("git -C") and "merge -q --ff-only FETCH_HEAD" in line for line in tools)
    assert not any(line.startswith("sudo") for line in tools)  # tmux and python3.11 were there
    bashrc = (home / ".bashrc").read_text().splitlines()
    assert bashrc.count('export JAX_COMPILATION_CACHE_DIR="$HOME/.jax_cache"') == 1
    assert (home / ".jax_cache").is_dir()


def test_setup_without_repo_or_origin_is_one_line_error(gcloud, tmp_path):
    # Only meaningful when this checkout has no origin remote; otherwise setup uses it.
    proc = gcloud.run("setup", "heph", "--zone", ZONE, "--dry-run")
    if proc.returncode == 0:
        assert "git clone" in printed(proc)[0][-1]
    else:
        assert proc.returncode == 2
        one_line_error(proc, "--repo")


# --------------------------------------------------------------------------------------------------
# train


def test_train_single_host_runs_tmux_on_worker_0(gcloud):
    proc = gcloud.run("train", "heph", "--zone", ZONE, "--", "--env", "hackmatrix", "--total-timesteps", "1e6")
    ok(proc)
    [call] = gcloud.calls()
    assert call[:8] == BASE + ["ssh", "heph", f"--zone={ZONE}", "--worker=0"]
    command = ssh_command(call)
    assert "tmux new-session -d -s train " in command
    assert "python3 scripts/train_purejaxrl.py --env hackmatrix --total-timesteps 1e6 2>&1" in command
    assert "--distributed" not in command
    assert 'export JAX_COMPILATION_CACHE_DIR="$HOME/.jax_cache"' in command
    assert "tee -a" in command and "/hephaestus/logs/train.log" in command


def test_train_multi_host_runs_everywhere_with_distributed(gcloud):
    proc = gcloud.run("train", "heph", "--zone", ZONE, "--multi-host", "--session", "pod",
                      "--", "--env", "hackmatrix", "--resume", "checkpoints/run1/")
    ok(proc)
    [call] = gcloud.calls()
    assert "--worker=all" in call
    command = ssh_command(call)
    assert "tmux new-session -d -s pod " in command
    assert ("python3 scripts/train_purejaxrl.py --env hackmatrix --resume checkpoints/run1/ --distributed"
            in command)
    assert "/hephaestus/logs/pod.log" in command


def test_train_does_not_add_distributed_twice(gcloud):
    ok(gcloud.run("train", "heph", "--zone", ZONE, "--multi-host", "--", "--distributed"))
    assert ssh_command(gcloud.calls()[0]).count("--distributed") == 1


def test_train_options_after_dashdash_are_not_parsed(gcloud):
    ok(gcloud.run("train", "heph", "--zone", ZONE, "--", "--zone", "x", "--dry-run"))
    command = ssh_command(gcloud.calls()[0])
    assert "train_purejaxrl.py --zone x --dry-run 2>&1" in command


def test_train_args_without_dashdash_are_a_one_line_error(gcloud):
    proc = gcloud.run("train", "heph", "--zone", ZONE, "--env", "hackmatrix")
    assert proc.returncode == 2
    one_line_error(proc, "--env", "after `--`")
    assert gcloud.calls() == []


@pytest.mark.parametrize("script, bad", [
    ("train", ["--session", "a:b"]),
    ("train", ["--remote-dir", "hephaestus"]),
    ("setup", ["--repo", "https://example.com/h.git", "--branch", "-x"]),
    ("status", ["--lines", "0"]),
])
def test_bad_options_are_one_line_errors(gcloud, script, bad):
    proc = gcloud.run(script, "heph", "--zone", ZONE, *bad)
    assert proc.returncode == 2
    one_line_error(proc, f"{script}.py: error:")
    assert gcloud.calls() == []


# --------------------------------------------------------------------------------------------------
# the remote programs under a real tmux (skipped without tmux)

FAKE_TRAINER = """\
#!{python} -S
# Stands in for `python3 scripts/train_purejaxrl.py ...` (the venv's python3).
import json, os, signal, sys, time
args = sys.argv[2:]
with open(os.path.join(os.environ["HOME"], "trainer.json"), "w") as f:
    json.dump({{"script": sys.argv[1], "args": args, "cwd": os.getcwd(),
               "cache": os.environ.get("JAX_COMPILATION_CACHE_DIR"),
               "hup_ignored": signal.getsignal(signal.SIGHUP) == signal.SIG_IGN}}, f)
print("training started", flush=True)
if "--wait" in args:
    def save(signum, frame):
        print("saved checkpoint on signal", signum, flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, save)
    signal.signal(signal.SIGINT, save)
    pid_path = os.path.join(os.environ["HOME"], "trainer.pid")
    with open(pid_path + ".tmp", "w") as f:  # published whole (a test that sees the file reads the pid)
        f.write(str(os.getpid()))
    os.replace(pid_path + ".tmp", pid_path)
    while True:
        time.sleep(0.05)
sys.exit(int(args[args.index("--exit") + 1]) if "--exit" in args else 0)
"""


@pytest.fixture
def remote(tmp_path):
    """A fake TPU VM host: HOME with ~/hephaestus/.venv, and a private tmux server."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux not installed")
    home = tmp_path / "home"
    venv_bin = home / "hephaestus" / ".venv" / "bin"
    write_exe(venv_bin / "python3", FAKE_TRAINER.format(python=sys.executable))
    (venv_bin / "activate").write_text(f'export PATH="{venv_bin}:$PATH"\n')
    # a short private directory for the tmux socket (socket paths are limited to ~100 characters)
    tmux_dir = tempfile.mkdtemp(prefix="heph-tmux-", dir="/tmp" if os.path.isdir("/tmp") else None)
    env = {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "TMUX_TMPDIR": tmux_dir,
        "SHELL": "/bin/sh",  # no TERM: like `gcloud ... ssh --command`, which has no terminal
    }

    def sh(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=20)

    sh.home = home
    sh.log = lambda session="train": home / "hephaestus" / "logs" / f"{session}.log"
    yield sh
    subprocess.run(["tmux", "kill-server"], env=env, capture_output=True, timeout=10)
    pid_file = home / "trainer.pid"
    if pid_file.exists():  # a --wait trainer that a failed test left running (tmux death alone won't stop it)
        try:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        except (OSError, ValueError):
            pass
    shutil.rmtree(tmux_dir, ignore_errors=True)


def wait_for(predicate, timeout=8.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def log_has(path: Path, text: str):
    return lambda: path.exists() and text in path.read_text()


def test_remote_train_program_runs_in_tmux_and_logs(gcloud, remote):
    args = ["--env", "hackmatrix", "--name", "it's a \"test\" $HOME", "--exit", "7"]
    ok(gcloud.run("train", "heph", "--zone", ZONE, "--multi-host", "--", *args))
    started = remote(ssh_command(gcloud.calls()[0]))
    assert started.returncode == 0, started.stderr
    assert "started tmux session train" in started.stdout
    assert wait_for(log_has(remote.log(), "exited with code 7")), remote.log().read_text()
    seen = json.loads((remote.home / "trainer.json").read_text())
    assert seen["script"] == "scripts/train_purejaxrl.py"
    assert seen["args"] == [*args, "--distributed"]  # exact, despite quotes, spaces and $
    assert seen["cwd"] == str(remote.home / "hephaestus")
    assert seen["cache"] == str(remote.home / ".jax_cache")
    assert seen["hup_ignored"]
    assert "training started" in remote.log().read_text()

    # status over the same host
    ok(gcloud.run("status", "heph", "--zone", ZONE, "--lines", "5", stdout="READY\tv4-8\tHEALTHY\n"))
    shown = remote(ssh_command(gcloud.calls()[-1]))
    assert shown.returncode == 0, shown.stderr
    assert "tmux session train: not running" in shown.stdout
    assert "exited with code 7" in shown.stdout


def test_remote_train_without_setup_says_so(gcloud, remote):
    (remote.home / "hephaestus" / ".venv" / "bin" / "activate").unlink()
    ok(gcloud.run("train", "heph", "--zone", ZONE))
    proc = remote(ssh_command(gcloud.calls()[0]))
    assert proc.returncode == 1 and "run setup.py first" in proc.stderr


def test_remote_train_refuses_a_running_session_and_stop_saves(gcloud, remote):
    ok(gcloud.run("train", "heph", "--zone", ZONE, "--", "--wait"))
    start = ssh_command(gcloud.calls()[0])
    assert remote(start).returncode == 0
    assert wait_for(lambda: (remote.home / "trainer.pid").exists())

    again = remote(start)
    assert again.returncode == 3 and "already exists" in again.stderr

    ok(gcloud.run("status", "heph", "--zone", ZONE, stdout="READY\tv4-8\t\n"))
    assert "tmux session train: running" in remote(ssh_command(gcloud.calls()[-1])).stdout

    ok(gcloud.run("stop", "heph", "--zone", ZONE))
    stopped = remote(ssh_command(gcloud.calls()[-1]))
    assert "sent Ctrl-C" in stopped.stdout, stopped.stdout + stopped.stderr
    assert wait_for(log_has(remote.log(), "exited with code 0")), remote.log().read_text()
    assert f"saved checkpoint on signal {int(signal.SIGINT)}" in remote.log().read_text()


def test_remote_training_survives_tmux_death_and_saves_on_sigterm(gcloud, remote):
    """Spot preemption: tmux goes away (SIGHUP) and training gets SIGTERM; the save still reaches the log."""
    ok(gcloud.run("train", "heph", "--zone", ZONE, "--", "--wait"))
    assert remote(ssh_command(gcloud.calls()[0])).returncode == 0
    assert wait_for(lambda: (remote.home / "trainer.pid").exists())
    pid = int((remote.home / "trainer.pid").read_text())
    remote("tmux kill-server")
    time.sleep(0.2)
    os.kill(pid, 0)  # still alive after the SIGHUP
    os.kill(pid, signal.SIGTERM)
    assert wait_for(log_has(remote.log(), "exited with code 0")), remote.log().read_text()
    assert f"saved checkpoint on signal {int(signal.SIGTERM)}" in remote.log().read_text()


# --------------------------------------------------------------------------------------------------
# status


def test_status_describes_then_tails_log(gcloud):
    proc = gcloud.run("status", "heph", "--zone", ZONE, "--session", "pod", "--lines", "50",
                      stdout="READY\tV4_8\tHEALTHY\n")
    ok(proc)
    describe, show = gcloud.calls()
    assert describe == BASE + ["describe", "heph", f"--zone={ZONE}",
                               "--format=value(state,acceleratorType,health)"]
    assert show[:8] == BASE + ["ssh", "heph", f"--zone={ZONE}", "--worker=0"]
    command = ssh_command(show)
    assert "tmux has-session -t =pod" in command
    assert "tail -n 50" in command and "/hephaestus/logs/pod.log" in command
    assert "state=READY" in proc.stdout


def test_status_attach_is_interactive_ssh(gcloud):
    ok(gcloud.run("status", "heph", "--zone", ZONE, "--attach", stdout="READY\tv4-8\t\n"))
    assert gcloud.calls()[1] == BASE + ["ssh", "heph", f"--zone={ZONE}", "--worker=0",
                                        "--", "-t", "tmux", "attach", "-t", "train"]


def test_status_of_preempted_vm_says_how_to_resume(gcloud):
    proc = gcloud.run("status", "heph", "--zone", ZONE, stdout="PREEMPTED\tv4-8\t\n")
    assert proc.returncode == 1
    one_line_error(proc, "PREEMPTED", "--resume")
    assert len(gcloud.calls()) == 1  # no ssh to a dead VM


def test_status_attach_all_workers_is_rejected(gcloud):
    proc = gcloud.run("status", "heph", "--zone", ZONE, "--attach", "--worker", "all")
    assert proc.returncode == 2
    one_line_error(proc, "--attach")


# --------------------------------------------------------------------------------------------------
# fetch


def test_fetch_run_directory(gcloud):
    proc = gcloud.run("fetch", "heph", "--zone", ZONE, "--run", "ppo-1")
    ok(proc)
    assert gcloud.calls() == [BASE + ["scp", "--recurse", "heph:~/hephaestus/checkpoints/ppo-1", "checkpoints/",
                                      f"--zone={ZONE}", "--worker=0"]]
    assert (gcloud.cwd / "checkpoints").is_dir()
    assert "scripts/watch_agent.py checkpoints/ppo-1/final_params.npz" in proc.stdout


def test_fetch_params_only(gcloud):
    ok(gcloud.run("fetch", "heph", "--zone", ZONE, "--run", "ppo-1", "--params-only", "--dest", "out"))
    assert gcloud.calls() == [BASE + ["scp", "heph:~/hephaestus/checkpoints/ppo-1/final_params.npz", "out/ppo-1/",
                                      f"--zone={ZONE}", "--worker=0"]]
    assert (gcloud.cwd / "out" / "ppo-1").is_dir()


def test_fetch_newest_run_when_none_named(gcloud):
    ok(gcloud.run("fetch", "heph", "--zone", ZONE, stdout="ppo-7/\n"))
    listing, copy = gcloud.calls()
    assert listing[:8] == BASE + ["ssh", "heph", f"--zone={ZONE}", "--worker=0"]
    assert "ls -1td" in ssh_command(listing)
    assert copy[5:8] == ["--recurse", "heph:~/hephaestus/checkpoints/ppo-7", "checkpoints/"]


def test_fetch_with_no_runs_is_one_line_error(gcloud):
    proc = gcloud.run("fetch", "heph", "--zone", ZONE, stdout="")
    assert proc.returncode == 1
    one_line_error(proc, "no runs")


def test_fetch_rejects_path_like_run_names(gcloud):
    proc = gcloud.run("fetch", "heph", "--zone", ZONE, "--run", "../etc")
    assert proc.returncode == 2
    one_line_error(proc, "run name")


# --------------------------------------------------------------------------------------------------
# push (a fetched run back onto a re-created VM)


def test_push_run_to_every_worker(gcloud):
    (gcloud.cwd / "checkpoints" / "ppo-1").mkdir(parents=True)
    ok(gcloud.run("push", "heph", "--zone", ZONE, "--run", "ppo-1"))
    assert gcloud.calls() == [BASE + ["scp", "--recurse", "checkpoints/ppo-1", "heph:~/hephaestus/checkpoints/",
                                      f"--zone={ZONE}", "--worker=all"]]


def test_push_missing_run_is_one_line_error(gcloud):
    proc = gcloud.run("push", "heph", "--zone", ZONE, "--run", "nope")
    assert proc.returncode == 2
    one_line_error(proc, "checkpoints/nope")
    assert gcloud.calls() == []


# --------------------------------------------------------------------------------------------------
# delete


def test_delete_with_yes(gcloud):
    ok(gcloud.run("delete", "heph", "--zone", ZONE, "--yes"))
    assert gcloud.calls() == [BASE + ["delete", "heph", f"--zone={ZONE}", "--quiet"]]


def test_delete_without_yes_and_no_tty_refuses(gcloud):
    proc = gcloud.run("delete", "heph", "--zone", ZONE)
    assert proc.returncode != 0
    one_line_error(proc, "refusing", "--yes")
    assert gcloud.calls() == []


@pytest.mark.parametrize("answer, deleted", [(b"y\n", True), (b"n\n", False), (b"", False)])
def test_delete_asks_on_a_terminal(gcloud, answer, deleted):
    pty = pytest.importorskip("pty")
    leader, follower = pty.openpty()
    try:
        os.write(leader, answer if answer else b"\x04")  # \x04: end of input on a terminal
        proc = gcloud.run("delete", "heph", "--zone", ZONE, stdin=follower)
    finally:
        os.close(follower)
        os.close(leader)
    assert (proc.returncode == 0) == deleted, proc.stderr
    assert (gcloud.calls() != []) == deleted


# --------------------------------------------------------------------------------------------------
# stop


def test_stop_multi_host(gcloud):
    ok(gcloud.run("stop", "heph", "--zone", ZONE, "--multi-host"))
    [call] = gcloud.calls()
    assert "--worker=all" in call
    assert "tmux send-keys -t =train: C-c" in ssh_command(call)


# --------------------------------------------------------------------------------------------------
# hygiene


def test_scripts_are_stdlib_only_and_share_common():
    scripts = sorted(TPU.glob("*.py"))
    assert {p.stem for p in scripts} >= {"_common", "create", "setup", "train", "status", "fetch", "delete"}
    stdlib = set(sys.stdlib_module_names) | {"_common", "__future__"}
    for path in scripts:
        text = path.read_text()
        for line in text.splitlines():
            words = line.split()
            if words[:1] in (["import"], ["from"]) and not line.startswith(" "):
                assert words[1].split(".")[0] in stdlib, f"{path.name}: {line}"
        if path.stem != "_common":  # gcloud command lines are built and run only through _common
            assert "import _common as c" in text and '"gcloud"' not in text, path.name


def test_help_works_everywhere(gcloud):
    for script in ("create", "setup", "train", "status", "fetch", "delete", "stop", "push"):
        proc = gcloud.run(script, "--help")
        assert proc.returncode == 0 and "--zone" in proc.stdout and "--dry-run" in proc.stdout, script
