"""The HackMatrix rulebook lives in the repository (specs/hackmatrix-rules.md) and defines every rule cited."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
RULEBOOK = ROOT / "specs" / "hackmatrix-rules.md"
CITING = [*ROOT.glob("python/**/*.py"), *ROOT.glob("tests/**/*.py"), *ROOT.glob("scripts/**/*.py"),
          *ROOT.glob("specs/*.md"), ROOT / "README.md"]


def test_every_cited_rule_is_defined_in_the_rulebook():
    defined = set(re.findall(r"^\s*- \*\*((?:R|D)\d+) \(", RULEBOOK.read_text(), re.M))
    assert {f"R{i}" for i in range(1, 125)} | {f"D{i}" for i in range(1, 13)} == defined
    hackmatrix = [p for p in CITING if "hackmatrix" in str(p.relative_to(ROOT)) and p != RULEBOOK]
    cited = {m for p in hackmatrix for m in re.findall(r"\b((?:R|D)\d+)\b", p.read_text())}
    assert cited and cited <= defined, sorted(cited - defined)


def test_nothing_cites_the_rules_outside_the_repository():
    outside = re.compile(r"shared/" + "hackmatrix-rules")  # split so this file does not match itself
    for path in CITING:
        assert not outside.search(path.read_text()), path
