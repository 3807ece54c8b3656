"""The HTML report: error profiles of failing outputs, a self-contained page, and that page in a browser."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch
from fixtures import FIXTURES, fixture_dump

from pytest_npuprecision.precision.error_profiles import FIRST_EXPONENT, error_profile
from pytest_npuprecision.reports.pages import svg_plots

DUMP = FIXTURES / "transformer_bf16_tensor" / "step0"
# Planted failures: limits the bfloat16 linear layers cannot meet; warnings on gelu (judged in ULP) and softmax.
RULES = """\
ops:
  linear: {limits: {error_bound: {max_bound_ratio: 0.05}}}
  gelu: {standard: ulp, limits: {ulp: {max_ulp_err: {error: 4, warning: 0.1}}}}
  softmax: {limits: {error_bound: {mean_bound_ratio: {error: 1, warning: 0.001}}}}
"""


# ---------------------------------------------------------------- the error profile of one output


def test_an_exact_output_has_only_zero_errors():
    golden = torch.linspace(-3, 3, 100, dtype=torch.float64)
    profile = error_profile(golden.to(torch.bfloat16).to(torch.float64).to(torch.bfloat16),
                            golden.to(torch.bfloat16).double())
    assert profile.zero == 100 and profile.counts == () and profile.nonfinite == 0 and profile.worst == 0


def test_a_planted_error_lands_in_its_power_of_two_bin_and_leads_the_sample():
    golden = torch.linspace(1, 2, 1000, dtype=torch.float64)[:-1]  # in [1, 2): float32 ULP is 2^-23
    actual = golden.float()
    actual[123] += 1000 * 2.0 ** -23
    profile = error_profile(actual, golden)
    assert profile.unit == "ulp" and profile.numel == 999
    assert sum(profile.counts) + profile.zero == 999
    assert profile.counts[-1] == 1 and len(profile.counts) - 1 + FIRST_EXPONENT == 10  # (512, 1024] ULP
    golden_value, actual_value, error = profile.sample[0]
    assert golden_value == pytest.approx(golden[123].item()) and error == pytest.approx(1000, abs=1)
    assert profile.worst >= 1 and len(profile.sample) <= 48
    assert json.loads(json.dumps(profile.as_dict())) == profile.as_dict()  # plain JSON for the record


def test_infs_and_nans_are_counted_not_plotted_and_integers_use_absolute_error():
    golden = torch.ones(10, dtype=torch.float64)
    actual = torch.ones(10)
    actual[2], actual[5] = math.inf, math.nan
    profile = error_profile(actual, golden)
    assert profile.nonfinite == 2 and profile.zero == 8
    assert all(math.isfinite(v) for point in profile.sample for v in point)
    counts = error_profile(torch.tensor([1, 2, 7]), torch.tensor([1, 2, 3]))
    assert counts.unit == "abs" and counts.counts == (0, 0, 1)  # |7 - 3| = 4 lies in (2, 4]


def test_plots_are_well_formed_svg():
    for svg in (svg_plots.histogram([3, 0, 1000], ["0", "1", "2"], title="t", x_label="x", highlight_from=2),
                svg_plots.scatter([(1.0, 1.1), (2.0, 1.9)], title="s", x_label="x", y_label="y", highlight=1,
                                  diagonal=True),
                svg_plots.scatter([], title="empty", x_label="x", y_label="y")):
        root = ET.fromstring(svg)
        assert root.tag == "svg" and root.find("title") is not None


# ---------------------------------------------------------------- the page


class Page(HTMLParser):
    """Every start tag with its attributes, and the text of <style> elements."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.styles: list[str] = []
        self._in_style = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, {k: v or "" for k, v in attrs}))
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.styles.append(data)

    def find(self, tag: str, **attrs) -> list[dict[str, str]]:
        return [a for t, a in self.tags if t == tag and all(a.get(k) == v for k, v in attrs.items())]


def make_report(pytester) -> tuple[str, dict[str, dict]]:
    pytester.makefile(".yaml", rules=RULES)
    result = pytester.runpytest("--npu-precision", str(fixture_dump(DUMP)), "--npu-precision-device", "cpu",
                                "--npu-precision-rules", "rules.yaml", "--npu-precision-report", "r",
                                "--npu-precision-html", "r/report.html", "-p", "no:cacheprovider")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["report written: r/report.html"])
    records = {r["case_id"]: r for r in map(json.loads, (pytester.path / "r" / "cases.jsonl").read_text().splitlines())}
    return (pytester.path / "r" / "report.html").read_text(encoding="utf-8"), records


REMOTE = re.compile(r"^\s*([a-z][a-z0-9+.-]*:|//)", re.IGNORECASE)  # a scheme or a protocol-relative URL


def test_the_page_has_its_summary_table_and_plots_and_loads_nothing(pytester):
    text, records = make_report(pytester)
    page = Page(text)
    failing = [r for r in records.values() if r["status"] == "error"]
    assert len(failing) == 18 and sum(r["status"] == "warning" for r in records.values()) == 4

    for section in ("summary", "first-failing", "cases", "failures"):
        assert page.find("section", id=section), section
    assert '<div class="tile s-error"><b>18</b>error</div>' in text
    assert '<div class="tile s-warning"><b>4</b>warning</div>' in text
    for title in ("Outputs by standard", "Outputs by dtype", "Cases by op"):
        assert f"<h3>{title}</h3>" in text
    assert page.find("table", id="case-table", **{"class": "sortable"})
    assert len(page.find("tr", **{"data-status": "error"})) == 18
    assert len([a for t, a in page.tags if t == "tr" and "data-status" in a]) == len(records)
    first = "step0/rank0::Functional.linear.0.forward"
    assert page.find("a", href="#case-step0-rank0--Functional-linear-0-forward")  # the first failing API
    assert page.find("article", id="case-step0-rank0--Functional-linear-0-forward")
    plotted = sum(1 for r in failing for o in r["outputs"] if o["profile"])
    assert len(page.find("svg", **{"class": "plot"})) == 3 * plotted > 0
    assert records[first]["outputs"][0]["profile"]["unit"] == "ulp"

    # Self-contained: nothing to fetch, and a policy that forbids fetching anyway.
    assert not page.find("link") and not page.find("img") and not page.find("iframe")
    for tag, attrs in page.tags:
        for name in ("src", "href", "srcset", "data", "action", "poster"):
            assert not REMOTE.match(attrs.get(name, "")), (tag, attrs)
    assert not any("url(" in style or "@import" in style for style in page.styles)
    assert "http://" not in text and "https://" not in text
    [policy] = page.find("meta", **{"http-equiv": "Content-Security-Policy"})
    assert policy["content"].startswith("default-src 'none'")


def test_failures_come_first_with_a_status_filter_and_messages_wrap(pytester):
    """Issue 42: the failing cases first (their section, then the table's first rows), a status filter,
    long message lines wrapped rather than scrolled."""
    text, records = make_report(pytester)
    page = Page(text)
    assert text.index('<section id="failures">') < text.index('<section id="cases">')
    statuses = [attrs["data-status"] for tag, attrs in page.tags if tag == "tr" and "data-status" in attrs]
    failing = sum(r["status"] == "error" for r in records.values())
    assert statuses[:failing] == ["error"] * failing and "error" not in statuses[failing:]
    assert page.find("select", id="status-filter")
    assert page.find("option", value="failing") and page.find("option", value="warning")
    assert "white-space: pre-wrap" in text and "overflow-x: auto" not in text


CHROMIUM = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(name)), None)
SORT_BY_LIMIT = """<script>
var th = document.querySelectorAll("#case-table th")[7];  // "× limit"
th.click(); th.click();  // descending
document.body.dataset.firstCase = document.querySelector("#case-table tbody tr td").dataset.sort;
</script></body>"""


def chromium(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile{len(list(tmp_path.glob('profile*')))}"
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
         "--enable-logging=stderr", "--v=0", *args],
        capture_output=True, text=True, timeout=120, check=True)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run does)")
def test_the_page_opens_in_a_headless_browser_without_errors(pytester, tmp_path):
    text, records = make_report(pytester)
    page = tmp_path / "report.html"
    page.write_text(text.replace("</body>", SORT_BY_LIMIT), encoding="utf-8")
    dom = chromium("--dump-dom", page.as_uri(), tmp_path=tmp_path)
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line or "Refused" in line]
    assert not console, console  # no script error, nothing blocked by the policy
    assert "npu-precision report" in dom.stdout and "<svg" in dom.stdout
    worst = max((r for r in records.values() if r["status"] == "error"),
                key=lambda r: max(c["value"] / c["limit"] for o in r["outputs"] for c in o["checks"] if c["limit"]))
    assert f'data-first-case="{worst["case_id"]}"' in dom.stdout  # the table sorted in the browser

    shot = tmp_path / "report.png"
    chromium("--window-size=1280,2000", f"--screenshot={shot}", (pytester.path / "r" / "report.html").as_uri(),
             tmp_path=tmp_path)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_the_report_has_a_legend_of_the_metrics_it_shows():
    from pytest_npuprecision.reports.pages.html import Gating, render
    from pytest_npuprecision.reports.report_files import new_record

    record = new_record(kind="dump", case_id="step0/rank0::Functional.gelu.0.forward", key="Functional.gelu.0.forward",
                        api="Functional.gelu.0", direction="forward", order=0, location="step0/rank0", source="",
                        seed=1, device="cpu", golden="cpu float64", status="pass")
    record |= {"case_id": "step0/rank0::Functional.gelu.0.forward", "location": "step0/rank0", "order": 0,
              "status": "pass", "device": "cpu", "golden": "cpu float64", "baseline": "none", "direction": "forward",
              "seed": 1, "message": "", "key": "Functional.gelu.0.forward", "reason": "",
              "outputs": [{"name": "output.0", "status": "pass", "standard": "error_bound", "dtype": "float32",
                           "shape": [2], "checks": [{"metric": "max_bound_ratio", "value": 1.0, "limit": 8.0,
                                                     "status": "pass", "upper": True, "warning": None,
                                                     "baseline": None}],
                           "metrics": {}, "worst": None, "profile": None}]}
    html = render([record], generated="now", gating=Gating())
    assert '<section id="legend"><h2>Legend: what the metrics mean</h2>' in html
    assert ('<tr id="metric-max_bound_ratio"><td><code>max_bound_ratio</code></td><td>largest error over the '
            "element&#x27;s error bound, what a fair kernel may err there</td></tr>") in html
    assert "metric-rmse_ratio" not in html  # only the metrics these records use
