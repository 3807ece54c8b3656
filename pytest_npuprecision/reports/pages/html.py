"""One self-contained HTML page of case records: summary, sortable cases, error plots of each failure.

Everything is inline (styles, script, SVG plots) and a Content-Security-Policy forbids loading
anything, so the page opens from a CI artifact store without network access.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Iterable

from ...precision import METRIC_MEANINGS, failure_sections, meaning
from . import svg_plots
from ..dump_pairs import first_parting, pairing_line
from ..summary import (
    ALL_CHECKS, STATUS_ORDER, check_excess, counts, failing_statuses, first_failing, is_failing, known_outcome,
    number, op_name, times_limit, worst_check, worst_text,
)

MAX_PLOTTED = 100  # failing cases with plots; the rest are listed in the table only
_CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'"


@dataclass(frozen=True)
class Gating:
    """What the known-failures gate found, for the page."""

    path: str = ""
    stale: tuple[str, ...] = ()
    stale_fails: bool = False
    strict_warnings: bool = False
    notes: tuple[str, ...] = ()


def write_html(records: list[dict], path: Path, *, generated: str, gating: Gating | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(records, generated=generated, gating=gating or Gating()), encoding="utf-8")


def render(records: list[dict], *, generated: str, gating: Gating) -> str:
    records = sorted(records, key=lambda r: (r["location"], r["order"], r["case_id"]))
    strict = gating.strict_warnings
    failing = [r for r in records if is_failing(r, strict)]
    devices = ", ".join(sorted({r["device"] for r in records})) or "none"
    goldens = ", ".join(sorted({r["golden"] for r in records})) or "none"
    baselines = ", ".join(sorted({r.get("baseline", "none") for r in records})) or "none"
    parts = [
        _HEAD,
        "<header><h1>npu-precision report</h1>",
        f"<p>{len(records)} cases · device {escape(devices)} against golden {escape(goldens)}, "
        f"baseline {escape(baselines)} · "
        f"generated {escape(generated)}</p></header>",
        '<section id="summary"><h2>Summary</h2>', _tiles(records), _breakdowns(records), "</section>",
        _first_failing(records, strict),
        _dump_pair(records),
        _gating(records, gating),
        _failures(failing),
        _case_table(records, strict, {r["case_id"] for r in failing[:MAX_PLOTTED]}),
        _legend(records),
        f"<script>{_SCRIPT}</script></body></html>",
    ]
    return "\n".join(p for p in parts if p)


def _legend(records: list[dict]) -> str:
    """What each metric of the report means, one line each: the ones that appear in these records."""
    shown = sorted({c["metric"] for r in records for o in r["outputs"] for c in o["checks"]} & set(METRIC_MEANINGS)
                   or METRIC_MEANINGS)
    rows = "".join(f'<tr id="metric-{escape(m)}"><td><code>{escape(m)}</code></td><td>{escape(meaning(m))}</td></tr>'
                   for m in shown)
    return ('<section id="legend"><h2>Legend: what the metrics mean</h2><p>Each check is a metric against its '
            'limit; a ratio above 1 of its limit fails.</p><table><thead><tr><th>metric</th><th>meaning</th></tr>'
            f'</thead><tbody>{rows}</tbody></table></section>')


def _badge(status: str) -> str:
    return f'<span class="badge s-{escape(status)}">{escape(status)}</span>'


def _tiles(records: list[dict]) -> str:
    tally = Counter(r["status"] for r in records)
    known = Counter(known_outcome(r) for r in records if known_outcome(r))
    tiles = [f'<div class="tile s-{escape(s)}"><b>{tally[s]}</b>{escape(s)}</div>'
             for s in STATUS_ORDER + tuple(sorted(set(tally) - set(STATUS_ORDER))) if tally[s]]
    tiles += [f'<div class="tile k-{escape(k)}"><b>{n}</b>known failure: {escape(k)}</div>'
              for k, n in sorted(known.items())]
    return f'<div class="tiles">{"".join(tiles)}</div>'


def _crosstab(title: str, rows: Iterable[tuple[str, str]], unit: str) -> str:
    table: dict[str, Counter] = defaultdict(Counter)
    for key, status in rows:
        table[key][status] += 1
    statuses = [s for s in STATUS_ORDER if any(c[s] for c in table.values())]
    statuses += sorted({s for c in table.values() for s in c} - set(statuses))
    head = "".join(f"<th>{escape(s)}</th>" for s in statuses)
    body = "".join(
        f"<tr><td>{escape(key)}</td>" + "".join(f'<td class="num">{c[s] or ""}</td>' for s in statuses) + "</tr>"
        for key, c in sorted(table.items(), key=lambda kv: (-sum(kv[1][s] for s in STATUS_ORDER[:3]), kv[0])))
    return (f'<div class="crosstab"><h3>{escape(title)}</h3><table><thead><tr><th>{escape(unit)}</th>{head}'
            f"</tr></thead><tbody>{body}</tbody></table></div>")


def _breakdowns(records: list[dict]) -> str:
    outputs = [(o, r) for r in records for o in r["outputs"]]
    return '<div class="breakdowns">' + "".join([
        _crosstab("Outputs by standard", ((o["standard"], o["status"]) for o, _ in outputs), "standard"),
        _crosstab("Outputs by dtype", ((o["dtype"], o["status"]) for o, _ in outputs), "dtype"),
        _crosstab("Cases by op", ((op_name(r), r["status"]) for r in records), "op"),
    ]) + "</div>"


def _case_link(record: dict) -> str:
    return f'<a href="#{_anchor(record)}">{escape(record["case_id"])}</a>'


def _anchor(record: dict) -> str:
    return "case-" + "".join(c if c.isalnum() else "-" for c in record["case_id"])


def _first_failing(records: list[dict], strict: bool) -> str:
    firsts = first_failing(records, strict)
    if not firsts:
        return '<section id="first-failing"><h2>First failing API per step and rank</h2><p>None failed.</p></section>'
    rows = "".join(f"<tr><td>{escape(loc)}</td><td>{_case_link(r)}</td><td>{_badge(r['status'])}</td>"
                   f"<td>{escape(worst_text(r, failing_statuses(strict)))}</td></tr>" for loc, r in firsts.items())
    return ('<section id="first-failing"><h2>First failing API per step and rank</h2>'
            "<p>Cases run in dump order: start debugging at the first failure of each step and rank.</p>"
            "<table><thead><tr><th>step/rank</th><th>case</th><th>status</th><th>worst check</th></tr></thead>"
            f"<tbody>{rows}</tbody></table></section>")


def _dump_pair(records: list[dict]) -> str:
    """With a baseline dump: how the entries paired, and per step and rank the first API whose error is
    worse than its partner's beyond the benchmark's limits."""
    pairing = pairing_line(records)
    if pairing is None:
        return ""
    firsts = first_parting(records)
    rows = "".join(f"<tr><td>{escape(loc)}</td><td>{_case_link(r)}</td><td>{escape(r['baseline_case']['case_id'])}"
                   f"</td><td>{escape('; '.join(r['parted']))}</td></tr>" for loc, r in firsts.items())
    table = ("<table><thead><tr><th>step/rank</th><th>case</th><th>its partner</th><th>worse than the partner by"
             f"</th></tr></thead><tbody>{rows}</tbody></table>" if rows else
             "<p>Nowhere: no API errs worse than its partner beyond the benchmark limits.</p>")
    return ('<section id="dump-pair"><h2>Where the two dumps first part</h2>'
            "<p>Each entry of both dumps is judged against the float64 golden of its own recorded inputs, so what "
            "diverged upstream cancels: the first API per step and rank whose own error is worse than its "
            "partner's is where to look. Entries of statistics dumps are judged by their statistics instead: the "
            "first API whose outputs part from its partner's beyond what its inputs' parting explains, or that "
            f"breaks an invariant its partner keeps.</p><p>{escape(pairing)}</p>{table}</section>")


def _gating(records: list[dict], gating: Gating) -> str:
    if not gating.path:
        return ""
    listed = [r for r in records if known_outcome(r)]
    items = [f"<li>{_case_link(r)}: {escape(known_outcome(r))} (accepted {escape(r['known_failure']['accepted'])}: "
             f"{escape(r['known_failure']['reason'] or 'no reason')})</li>"
             for r in listed if known_outcome(r) != "xfail"]
    verdict = "fail the run" if gating.stale_fails else "are only reported"
    items += [f"<li>{escape(case_id)}: stale, it matches no collected case ({verdict})</li>"
              for case_id in gating.stale]
    items += [f"<li>{escape(note)}</li>" for note in gating.notes]
    summary = counts(known_outcome(r) for r in listed) or "none listed ran"
    return (f'<section id="known-failures"><h2>Known failures</h2><p>{escape(gating.path)}: {escape(summary)}</p>'
            f'<ul>{"".join(items)}</ul></section>')


def _case_table(records: list[dict], strict: bool, plotted: set[str]) -> str:
    head = "".join(f'<th data-type="{kind}">{escape(name)}</th>' for name, kind in (
        ("case", "text"), ("status", "text"), ("known failure", "text"),
        ("standard", "text"), ("dtype", "text"), ("shape", "text"), ("worst check", "text"),
        ("× limit", "number"), ("seconds", "number")))
    rows = []
    # Failures first, the worst status first; each status in dump order. A header click re-sorts.
    for r in sorted(records, key=lambda r: (not is_failing(r, strict), _status_rank(r["status"]))):
        worst = worst_check(r, ALL_CHECKS)
        case = _case_link(r) if r["case_id"] in plotted else escape(r["case_id"])
        standards = ", ".join(sorted({o["standard"] for o in r["outputs"]}))
        dtypes = ", ".join(sorted({o["dtype"] for o in r["outputs"]}))
        shapes = "; ".join("x".join(map(str, o["shape"])) or "scalar" for o in r["outputs"])
        cells = [(case, r["case_id"]),
                 (_badge(r["status"]), str(_status_rank(r["status"]))),
                 (escape(known_outcome(r)), known_outcome(r)), (escape(standards), standards), (escape(dtypes), dtypes),
                 (escape(shapes), shapes), (escape(worst_text(r, ALL_CHECKS)), ""),
                 _ratio_cell(worst[1] if worst else None),
                 (f"{r['seconds']:.3f}" if r["seconds"] else "", f"{r['seconds'] or 0:.6f}")]
        rows.append(f'<tr data-status="{escape(r["status"])}" data-failing="{int(is_failing(r, strict))}">' + "".join(
            f'<td data-sort="{escape(key)}">{shown}</td>' for shown, key in cells) + "</tr>")
    statuses = sorted({r["status"] for r in records}, key=_status_rank)
    options = "".join(f'<option value="{escape(s)}">{escape(s)}</option>' for s in statuses)
    return ('<section id="cases"><h2>Cases</h2><p><input id="filter" type="search" placeholder="filter cases" '
            'aria-label="filter cases"> <select id="status-filter" aria-label="show cases by status">'
            f'<option value="">every status</option><option value="failing">failing</option>{options}</select> '
            'Failing cases come first; click a column header to sort. × limit: how far the worst check '
            'lies past its limit (value / limit for a maximum).</p>'
            f'<table id="case-table" class="sortable"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></section>')


def _status_rank(status: str) -> int:
    return STATUS_ORDER.index(status) if status in STATUS_ORDER else len(STATUS_ORDER)


def _ratio_cell(check: dict | None) -> tuple[str, str]:
    """(shown, sort key) of how many times its limit a check is; a broken limit of 0 sorts first."""
    if check is None:
        return "", "-1"
    if check["limit"] == 0 and check.get("upper", True):
        return ("∞", "1e308") if check["status"] != "pass" else ("0", "0")
    ratio = check_excess(check)
    return (number(ratio), f"{ratio:.6g}") if math.isfinite(ratio) else ("∞", "1e308")


def _failures(failing: list[dict]) -> str:
    if not failing:
        return ""
    shown = failing[:MAX_PLOTTED]  # in dump order, as render sorts them
    articles = [_failure(r) for r in shown]
    more = len(failing) - len(shown)
    if more:
        articles.append(f"<p>{more} more failing cases are in the table above, without plots.</p>")
    return '<section id="failures"><h2>Failing cases</h2>' + "\n".join(articles) + "</section>"


def _failure(record: dict) -> str:
    known = f" · known failure: {escape(known_outcome(record))}" if known_outcome(record) else ""
    plots = "".join(_output_plots(o) for o in record["outputs"] if o.get("profile"))
    worst = worst_check(record, ("error", "warning"))
    ratio = times_limit(worst[1]) if worst else ""
    ratio = f" · worst check at {ratio}" if ratio else ""
    return (f'<article id="{_anchor(record)}"><h3>{escape(record["case_id"])} {_badge(record["status"])}</h3>'
            f'<p>{escape(record["direction"])} · seed {record["seed"]}{ratio}{known}</p>{_docs_links(record)}'
            f'{_error_data(record)}{_partner(record)}<div class="plots">{plots}</div>'
            f'<pre>{escape(record["message"] or worst_text(record))}</pre></article>')


def _partner(record: dict) -> str:
    """The case's partner in a baseline dump, and its own verdict."""
    partner = record.get("baseline_case")
    if not partner:
        return ""
    return (f'<p class="docs">baseline: {escape(partner["case_id"])} of {escape(partner["source"])}, judged on its '
            f'own: {_badge(partner["status"])}</p>')


def _error_data(record: dict) -> str:
    """Where --npu-precision-save-error-data put the case's tensors, or why it did not."""
    saved = record.get("error_data")
    if not saved:
        return ""
    if not saved.get("saved"):
        return f'<p class="docs">error data not saved: {escape(saved["why"])}</p>'
    files = ", ".join(f'<a href="{escape(Path(saved["folder"], name).as_uri())}">{escape(name)}</a>'
                      for name in saved["files"])
    return f'<p class="docs">error data (torch.load(path, weights_only=True)): {files}</p>'


def _docs_links(record: dict) -> str:
    """Links to the docs section of each standard that failed an output, where a reader learns what it checks."""
    sections = dict.fromkeys(section for o in record["outputs"] if o["status"] in ("error", "warning")
                             for section in failure_sections(o["standard"], (c["metric"] for c in o["checks"]
                                                                             if c["status"] != "pass")))
    # No links: relative paths break from the report's folder, and a pip-installed plugin has no docs folder.
    paths = ", ".join(f"<code>{escape(s)}</code>" for s in sections)
    return f'<p class="docs">docs: {paths} {_DOCS_WHERE}</p>' if paths else ""


_DOCS_WHERE = "(pages of the pytest-npuprecision repository's docs folder, also built by <code>mkdocs build</code>)"


def _bin_label(exponent: int) -> str:
    if exponent < 0:
        return f"1/{2 ** -exponent}"
    return str(2 ** exponent) if exponent <= 10 else f"2^{exponent}"


def _output_plots(output: dict) -> str:
    p = output["profile"]
    unit = "ULP" if p["unit"] == "ulp" else "absolute error"
    first = p["first_exponent"]
    counts_ = [p["zero"]] + list(p["counts"])
    labels = ["0"] + [("≤" if i == 0 else "") + _bin_label(first + i) for i in range(len(p["counts"]))]
    limit = next((c["limit"] for c in output["checks"] if c["metric"] == "max_ulp_err"), None)
    highlight = None
    if limit is not None and p["counts"]:
        highlight = 1 + next((i for i in range(len(p["counts"])) if 2.0 ** (first + i) > limit), len(p["counts"]))
    hidden = f"; {p['nonfinite']} inf/nan not shown" if p["nonfinite"] else ""
    name = f"{output['name']} ({output['dtype']}, {p['numel']} elements{hidden})"
    sample = p["sample"]
    worst = p.get("worst", 0)
    return (f'<figure><figcaption>{escape(name)}</figcaption>'
            + svg_plots.histogram(counts_, labels, title=f"|error| in {unit}", x_label="upper edge of each bin",
                                  highlight_from=highlight)
            + svg_plots.scatter([(g, a) for g, a, _ in sample], title=f"device vs golden ({len(sample)} sampled)",
                                x_label="golden", y_label="device", highlight=worst, diagonal=True)
            + svg_plots.scatter([(g, e) for g, _, e in sample], title=f"signed error in {unit} (red: worst)",
                                x_label="golden", y_label=f"device − golden ({unit})", highlight=worst)
            + "</figure>")


_HEAD = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>npu-precision report</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }}
h1 {{ margin-bottom: 0.2em; }} h2 {{ border-bottom: 1px solid #ddd; margin-top: 1.6em; }}
table {{ border-collapse: collapse; margin: 0.5em 0; }}
th, td {{ border: 1px solid #ddd; padding: 3px 7px; text-align: left; vertical-align: top; }}
th {{ background: #f3f3f3; }} td.num {{ text-align: right; }}
table.sortable th {{ cursor: pointer; }} table.sortable th.asc::after {{ content: " ▲"; }}
table.sortable th.desc::after {{ content: " ▼"; }}
.tiles {{ display: flex; gap: 0.6em; flex-wrap: wrap; }}
.tile {{ padding: 0.5em 1em; border-radius: 6px; background: #eee; min-width: 6em; }}
.tile b {{ display: block; font-size: 1.6em; }}
.breakdowns {{ display: flex; gap: 2em; flex-wrap: wrap; align-items: flex-start; }}
.badge {{ padding: 0 6px; border-radius: 4px; background: #eee; font-size: 0.9em; }}
.s-pass {{ background: #d8f0dc; }} .s-warning {{ background: #fbe9b7; }} .s-error {{ background: #f6c9c4; }}
.s-input-error, .s-harness-error, .k-regression, .k-changed, .k-fixed {{ background: #f3b8e0; }}
.s-skip {{ background: #e4e4e4; }} .k-xfail {{ background: #d6e4f5; }}
.plots figure {{ margin: 0.4em 0; }} .plots figcaption {{ font-weight: 600; }}
svg.plot {{ font-size: 10px; margin-right: 8px; background: #fff; }} .plot-title {{ font-weight: 600; }}
article {{ border: 1px solid #ddd; border-radius: 6px; padding: 0 1em 0.5em; margin: 1em 0; }}
pre {{ background: #f7f7f7; padding: 0.6em; white-space: pre-wrap; overflow-wrap: anywhere; font-size: 12px; }}
#filter {{ width: 20em; }}
</style></head><body>"""

_SCRIPT = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, column) {
    th.addEventListener("click", function () {
      var ascending = !th.classList.contains("asc");
      table.querySelectorAll("th").forEach(function (h) { h.classList.remove("asc", "desc"); });
      th.classList.add(ascending ? "asc" : "desc");
      var numeric = th.dataset.type === "number";
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[column].dataset.sort, y = b.cells[column].dataset.sort;
        var order = numeric ? parseFloat(x) - parseFloat(y) : x.localeCompare(y);
        return ascending ? order : -order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
function filterCases() {
  var needle = document.getElementById("filter").value.toLowerCase();
  var status = document.getElementById("status-filter").value;
  document.querySelectorAll("#case-table tbody tr").forEach(function (row) {
    var shown = status === "" || (status === "failing" ? row.dataset.failing === "1" : row.dataset.status === status);
    row.hidden = !shown || (needle !== "" && row.textContent.toLowerCase().indexOf(needle) < 0);
  });
}
document.getElementById("filter").addEventListener("input", filterCases);
document.getElementById("status-filter").addEventListener("change", filterCases);
"""
