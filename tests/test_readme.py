"""README's two commands stay true: CI runs the test command the README shows."""

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_ci_runs_the_readme_test_command():
    readme = open(os.path.join(ROOT, "README.md")).read()
    blocks = [b.split("```", 1)[0].strip() for b in readme.split("```bash\n")[1:3]]
    train_cmd, test_cmd = blocks
    assert "pip install -r requirements.txt" in train_cmd and "scripts/train_purejaxrl.py" in train_cmd
    assert "pip install -r requirements.txt" in test_cmd and "pytest" in test_cmd
    extracted = subprocess.run(["sed", "-n", "/<!-- test-command -->/{n;n;p;q}", "README.md"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
    assert extracted == test_cmd
    assert "README.md" in open(os.path.join(ROOT, ".ci", "run")).read()
