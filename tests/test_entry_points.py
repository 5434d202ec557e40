"""The `hephaestus-*` commands (pyproject [project.scripts] -> hephaestus/tools/entry_points.py) and scripts/*.py."""
import inspect
import os
import re
import shutil
import subprocess
import sys
import tomllib

from hephaestus.tools import entry_points

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMANDS = {"hephaestus-train": "train", "hephaestus-watch": "watch", "hephaestus-evaluate": "evaluate",
            "hephaestus-inspect": "inspect", "hephaestus-sweep": "sweep", "hephaestus-plot": "plot"}


def _python(code, env_extra=None, cwd=ROOT):
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    env.update({"JAX_PLATFORMS": "cpu", **(env_extra or {})})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=120)


def test_pyproject_declares_every_command():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    assert scripts == {name: f"hephaestus.tools.entry_points:{fn}" for name, fn in COMMANDS.items()}
    for fn in COMMANDS.values():
        assert callable(getattr(entry_points, fn))


def test_each_command_checks_its_checkout_before_it_imports_what_starts_jax():
    for fn in COMMANDS.values():
        source = inspect.getsource(getattr(entry_points, fn))
        start, first_import = source.find("_start(script)"), re.search(r"^\s+from hephaestus\.", source, re.M)
        assert 0 <= start < first_import.start(), fn
    # importing the module imports no jax, and a command's bad input is one line and a non-zero exit
    out = _python("import sys\nfrom hephaestus.tools import entry_points\n"
                  "assert not [m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib')]\n"
                  "sys.argv = ['hephaestus-inspect', 'no/such/run']\n"
                  "try:\n    entry_points.inspect()\nexcept SystemExit as e:\n    code = e.code\n"
                  "print(code)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2"]  # bad input: exit 2, as every script
    assert out.stderr.strip().startswith("error: ") and len(out.stderr.strip().splitlines()) == 1


def test_a_script_refuses_to_run_another_checkouts_package(tmp_path):
    # a second checkout whose package is not the one `import hephaestus` finds (PYTHONPATH: this checkout's)
    (tmp_path / "python" / "hephaestus").mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "scripts").mkdir()
    shutil.copy(os.path.join(ROOT, "scripts", "inspect_checkpoint.py"), tmp_path / "scripts")
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "python")}
    out = subprocess.run([sys.executable, str(tmp_path / "scripts" / "inspect_checkpoint.py"), "--help"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    (line,) = out.stderr.strip().splitlines()
    assert str(tmp_path) in line and os.path.join(ROOT, "python", "hephaestus") in line
    assert "pip install -e ." in line
    # the same script in this checkout runs
    ok = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "inspect_checkpoint.py"), "--help"],
                        capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0 and "usage: inspect_checkpoint.py" in ok.stdout


def test_scripts_edit_no_sys_path():
    for folder in ("scripts", os.path.join("scripts", "experiments")):
        for name in os.listdir(os.path.join(ROOT, folder)):
            if name.endswith(".py"):
                assert "sys.path" not in open(os.path.join(ROOT, folder, name)).read(), name
