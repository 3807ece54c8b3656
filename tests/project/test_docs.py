"""The docs: generated pages current, the site builds strictly, and failures point at sections that exist."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import unicodedata
from collections import Counter
from pathlib import Path

import pytest
import torch

from pytest_npuprecision import Accumulation, judge, render_message
from pytest_npuprecision.precision.meanings import (
    GATE_SECTION, ROUNDING_SECTION, STANDARDS_PAGE, failure_sections,
)
from pytest_npuprecision.precision.standards import STANDARDS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def load_generator():
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def slug(heading: str) -> str:
    """A heading's anchor as MkDocs (Python-Markdown's toc) and GitHub write it for plain-text headings."""
    text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode()
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)  # no comments in code
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.+?)\s*$", text, flags=re.MULTILINE)}


# ---------------------------------------------------------------- generated pages


def test_the_generated_pages_are_current():
    stale = load_generator().stale_pages()
    assert stale == [], f"{stale} are stale: run python docs/generate.py and commit docs/generated/"


def test_check_names_a_stale_page_and_fails(tmp_path, monkeypatch, capsys):
    generator = load_generator()
    for name, render in generator.PAGES.items():
        (tmp_path / name).write_text(render(), encoding="utf-8")
    (tmp_path / "ops.md").write_text("an old table\n", encoding="utf-8")
    monkeypatch.setattr(generator, "OUT", tmp_path)
    assert generator.main(["--check"]) == 1
    assert capsys.readouterr().err == "docs/generated/ops.md is stale: run python docs/generate.py and commit it\n"
    generator.main([])
    assert generator.main(["--check"]) == 0


def test_the_thresholds_page_prints_every_limit_of_the_table():
    import yaml

    page = (DOCS / "generated" / "thresholds.md").read_text(encoding="utf-8")
    table = yaml.safe_load((ROOT / "pytest_npuprecision" / "data" / "thresholds.yaml").read_text(encoding="utf-8"))
    for standard, limits in table["standards"].items():
        section = page.split(f"\n### {standard}\n", 1)[1].split("\n### ", 1)[0]
        rows = limits.values() if all(isinstance(v, dict) for v in limits.values()) else [limits]
        for metric in {m for row in rows for m in row}:
            assert f"`{metric}`" in section, (standard, metric)


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                    reason="mkdocs is not installed: pip install -e '.[docs]'")
def test_the_site_builds_strictly(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "generated" / "fused-ops" / "index.html").is_file()


# ---------------------------------------------------------------- failures point at the docs


def test_every_section_a_failure_can_link_to_exists():
    page = ROOT / STANDARDS_PAGE
    sections = {s.section for s in STANDARDS.listed} | {GATE_SECTION, ROUNDING_SECTION}
    missing = sorted(s for s in sections if s.partition("#")[2] not in anchors(page))
    assert missing == [], f"docs/standards.md has no heading for {missing}"


def test_a_failure_message_ends_with_the_section_of_its_standard():
    off = judge(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float16),
                torch.tensor([1.0, 2.0, 3.01], dtype=torch.float64), op="Tensor.__mul__")
    assert render_message(off).splitlines()[-1] == "  docs: docs/standards.md#absolute"
    nan = judge(torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 2.0], dtype=torch.float64), op="Torch.matmul",
                accumulation=Accumulation(1))
    assert render_message(nan).splitlines()[-1] == "  docs: docs/standards.md#the-infnan-gate"
    exact = judge(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0], dtype=torch.float64), op="Torch.matmul",
                  accumulation=Accumulation(1))
    assert "docs:" not in render_message(exact)


def test_a_verdict_beside_a_baseline_links_both_standards():
    assert failure_sections("benchmark+error_bound", ["rmse_ratio"]) == (
        "docs/standards.md#benchmark", "docs/standards.md#error-bound")
    assert failure_sections("ulp", ["nonfinite_mismatch", "max_ulp_err"]) == (GATE_SECTION, "docs/standards.md#ulp")


def test_a_leaning_rounding_alone_links_its_gate_only():
    assert failure_sections("ulp", ["rounding_bias"]) == (ROUNDING_SECTION,)
    assert failure_sections("ulp", ["rounding_bias", "max_ulp_err"]) == (ROUNDING_SECTION, "docs/standards.md#ulp")


def test_the_html_report_links_a_failing_case_to_its_standard():
    from pytest_npuprecision.reports.pages.html import Gating, render

    check = {"metric": "max_bound_ratio", "value": 41.0, "limit": 8.0, "status": "error", "upper": True,
             "warning": None, "baseline": None}
    output = {"name": "output.0", "status": "error", "standard": "error_bound", "dtype": "bfloat16", "shape": [2],
              "checks": [check], "metrics": {}, "worst": None, "profile": None}
    record = {"kind": "dump", "case_id": "step0/rank0::Functional.linear.0.forward", "key": "Functional.linear.0.forward",
              "api": "Functional.linear.0", "direction": "forward", "order": 0, "location": "step0/rank0",
              "source": "", "seed": 1, "device": "cpu", "golden": "cpu float64", "baseline": "none",
              "status": "error", "reason": "", "message": "output.0: ...", "seconds": 0.1, "outputs": [output]}
    html = render([record], generated="now", gating=Gating())
    # A path, said to be the repository's: a relative link would break from the report folder (issue 42).
    assert ("<p class=\"docs\">docs: <code>docs/standards.md#error-bound</code> (pages of the pytest-npuprecision "
            "repository's docs folder" in html)
    assert 'href="docs/' not in html


# ---------------------------------------------------------------- the README is a front door


def test_the_readme_is_a_front_door_that_links_to_pages_that_exist():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    commands = _first_commands(readme)
    # The fresh-venv install pins torch; the one for an existing torch or torch_npu never names torch.
    assert commands[0].endswith('pip install torch==2.13.0 -e ".[test]"')
    assert commands[1] == 'python -c "import torch" && pip install -e ".[test]"'
    assert commands[2:] == ["pytest --npu-precision examples/dumps", "python -m pytest -n 2"]
    for target in re.findall(r"\]\((docs/[^)\s]+)\)", readme):
        path, _, anchor = target.partition("#")
        assert (ROOT / path).is_file(), target
        assert not anchor or anchor in anchors(ROOT / path), target


def _first_commands(readme: str) -> list[str]:
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_ci_runs_the_readmes_install_and_commands():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    commands = _first_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    assert 'pip install --quiet torch==2.13.0 -e ".[test]"' in ci
    assert "\n" + commands[2] + " " in ci  # the main job, with a report folder added
    assert ci.rstrip().endswith(commands[3])


def test_the_readmes_first_run_is_what_the_example_dumps_give(pytester):
    """The counts the README promises a new user, from the command it gives (CPU or GPU, no torch_npu)."""
    if importlib.util.find_spec("torch_npu") is not None:
        pytest.skip("torch_npu is installed: the README counts a first run without it")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    items, passed, skipped = map(int, re.search(
        r"collects (\d+) items and ends `(\d+) passed, (\d+) skipped`", readme).groups())
    shutil.copytree(ROOT / "examples" / "dumps", pytester.path / "examples" / "dumps")
    result = pytester.runpytest("--npu-precision", "examples/dumps", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=passed, skipped=skipped)
    assert passed + skipped == items
    assert f"cases: {passed} pass, {skipped} skip" in result.stdout.str()
    # Each skip line names its dump.json and its entry, so no two fold together.
    reasons = re.findall(r"SKIPPED \[(\d+)\] \S+/dump\.json: \[unsupported-op\] NPU\.\w+\.\d+\.(?:forward|backward): unsupported: "
                         r"(NPU\.\w+): torch_npu is not installed", result.stdout.str())
    by_op = Counter()
    for count, op in reasons:
        by_op[op] += int(count)
    assert sum(by_op.values()) == skipped
    for op, count in by_op.items():
        assert f"`{op}` {count}" in readme.replace("\n", " ")


def test_the_terminal_summary_links_the_sections_of_the_failed_standards(pytester):
    defects = Path(__file__).resolve().parents[2] / "examples" / "dumps" / "npu_llm_defects_tensor"
    result = pytester.runpytest("--npu-precision", str(defects), "--npu-precision-device", "dumped",
                                "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    # Planted NaNs fail at the inf/nan gate, the flipped rotary and bfloat16 attention by the error bound.
    result.stdout.fnmatch_lines(["docs: docs/standards.md#error-bound, docs/standards.md#the-infnan-gate"])
    clean = pytester.runpytest("--npu-precision", str(defects.parent / "npu_llm_tensor"), "--npu-precision-device",
                               "dumped", "-p", "no:cacheprovider")
    assert clean.ret == 0 and "docs: " not in clean.stdout.str()
