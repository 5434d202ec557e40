"""The docs stay a reference a user reads in ten minutes: a short README, short design specs, current presets only,
no dates or issue numbers, no dangling figure or link, and results on their own pages."""

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "specs"
RULEBOOK = SPECS / "hackmatrix-rules.md"
DESIGN_SPECS = sorted(p for p in SPECS.glob("*.md") if p != RULEBOOK)
RESULT_PAGES = sorted((SPECS / "results").glob("*.md"))
DOCS = [ROOT / "README.md", *sorted(SPECS.rglob("*.md"))]

MONTHS = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
HISTORY = re.compile(rf"\b\d{{1,2}}(?:[–-]\d{{1,2}})? (?:{MONTHS})\b|\b(?:{MONTHS}) \d{{1,2}}\b|\b(?:{MONTHS}) \d{{4}}\b"
                     r"|\bissues? #?\d+|(?<![\w&])#\d+\b", re.IGNORECASE)


def test_readme_is_short_and_puts_train_watch_wandb_and_results_first():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250, len(lines)
    first = "\n".join(lines[:120])
    for needle in ("configs/hackmatrix-tpu.yaml", "tmux", "watch_agent.py", "wandb", "## Results"):
        assert needle in first, needle


def test_no_dates_or_issue_numbers_in_readme_configs_design_specs_and_result_pages():
    files = [ROOT / "README.md", *sorted((ROOT / "configs").iterdir()), *DESIGN_SPECS, *RESULT_PAGES]
    found = [f"{path.relative_to(ROOT)}:{i}: {m.group(0)!r}" for path in files
             for i, line in enumerate(path.read_text().splitlines(), 1) for m in HISTORY.finditer(line)]
    assert not found, "\n".join(found)
    assert HISTORY.search("the file from 2 Dec to 5 Dec") and HISTORY.search("issue 22's goal")  # the pattern bites
    assert not HISTORY.search("Decisions D1-D12, R94's quirk, 2048 envs x 128 steps")


def test_design_specs_are_short_the_rulebook_excepted():
    too_long = {p.name: n for p in DESIGN_SPECS if (n := len(p.read_text().splitlines())) > 400}
    assert not too_long, too_long
    assert RULEBOOK.exists() and len(DESIGN_SPECS) >= 8


def test_configs_hold_the_current_presets_only():
    files = sorted(os.listdir(ROOT / "configs"))
    assert 1 <= len(files) <= 8, files
    assert "hackmatrix-tpu.yaml" in files and all(f.endswith(".yaml") for f in files)


def test_result_pages_open_with_the_five_line_summary():
    assert RESULT_PAGES
    for page in RESULT_PAGES:
        lines = page.read_text().splitlines()
        assert lines[0].startswith("# "), page.name
        labels = [re.match(r"- \*\*(\w+):\*\* \S", line) for line in lines[2:7]]
        assert [m.group(1) if m else None for m in labels] == ["Question", "Answer", "Seeds", "Budget", "Baseline"], \
            page.name


def test_every_figure_and_link_a_doc_cites_exists():
    missing = []
    for doc in DOCS:
        text = doc.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):  # markdown links and images, relative to the doc
            if not target.startswith(("http://", "https://", "#")):
                if not (doc.parent / target.split("#")[0]).exists():
                    missing.append(f"{doc.relative_to(ROOT)}: {target}")
        # named in prose; `<commit>:configs/...` names a file of an earlier commit, and the rulebook's references are
        # to the original game's files
        for target in re.findall(r"(?<![0-9a-f]{7}:)\b((?:specs|configs)/[\w./-]+\.(?:md|png|gif|yaml))\b", text):
            if doc != RULEBOOK and not (ROOT / target).exists():
                missing.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not missing, "\n".join(missing)
    figures = {p.name for p in (SPECS / "figures").iterdir()}
    cited = {name for doc in DOCS for name in re.findall(r"figures/([\w.-]+\.(?:png|gif))", doc.read_text())}
    assert figures <= cited, f"figures no page cites: {sorted(figures - cited)}"


def test_no_run_output_is_tracked():
    tracked = subprocess.run(["git", "ls-files", "sweeps", "checkpoints"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert all(path == "checkpoints/.gitkeep" or path.startswith("checkpoints/pretrained/") for path in tracked), \
        tracked
