"""report.md and report.html are text, never markup: every text a spec, a dataset, a model or an engine put in a
report (the spec's name, prompts, references, answers, metric, stage and series names, notes) is HTML-escaped in
report.md and in report.html, so a `<script>` in any of them is shown as text by a Markdown viewer and a browser."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

from tt_host.reports.ending import COMPLETED, Ending, Tally
from tt_host.reports.report import build_report, write_report

SCRIPT = "<script>alert(1)</script>"
IMAGE = '<img src=x onerror="alert(2)">'


class Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.text = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def _hostile_run(folder: Path) -> str:
    """Write the reports of a run whose every text is markup; report.md's text."""
    rows = [{"id": "e1", "messages": [{"role": "user", "content": f"Capital of {SCRIPT}?"},
                                      {"role": "assistant", "content": f"{IMAGE} | </td>"}]}]
    answers = {"baseline": {"e1": "</table><script>x()</script>"}, "candidate": {"e1": "<b>bold</b>"}}
    metrics = {"baseline.count": 1, "baseline.exact_match": 0.0, "candidate.count": 1, "candidate.exact_match": 0.0,
               f"train.{IMAGE}": 1.0, "train.note": SCRIPT}
    state = {"engine": "echo", "status": "completed", "id": "r1", "spec_name": f"capitals {SCRIPT}",
             "stages": {"train": {"state": "completed", "seconds": 1.0}}}
    tally = Tally(metrics=metrics, answers=answers, notes=[f"a note {SCRIPT}"],
                  series={f"train.loss{SCRIPT}": [[0, 2.0], [1, 1.0]], "sft.corpus_loss": [[0, 2.0], [1, 1.0]]},
                  held_out_sides={"baseline": "baseline", "candidate": "candidate"})
    ending = Ending(COMPLETED, state, Path("spec.json"), folder, tally, eval_rows=rows)
    write_report(folder, build_report(ending), tally.series)
    return (folder / "report.md").read_text()


def test_every_text_in_report_md_and_report_html_is_escaped(tmp_path):
    markdown = _hostile_run(tmp_path)
    for raw in ("<script", "<img", "</td>", "</table>", "<b>"):
        assert raw not in markdown, (raw, markdown)
    assert "- spec: **capitals &lt;script&gt;alert(1)&lt;/script&gt;**" in markdown, markdown
    assert "Capital of &lt;script&gt;alert(1)&lt;/script&gt;?" in markdown
    assert '&lt;img src=x onerror="alert(2)"&gt; \\| &lt;/td&gt;' in markdown  # `|` stays inside its cell
    page = (tmp_path / "report.html").read_text()
    parsed = Tags()
    parsed.feed(page)
    assert not {"script", "img", "b"} & set(parsed.tags), parsed.tags
    shown = " ".join(parsed.text)
    # shown as text, once escaped (never `&amp;lt;`): what the spec said is what a reader sees
    assert f"capitals {SCRIPT}" in shown and f"Capital of {SCRIPT}?" in shown and "&lt;" not in shown
    assert f'{IMAGE} | </td>' in shown and f"a note {SCRIPT}" in shown
    # each chart a file of the run folder, named from the series with every other character made `-`
    assert sorted(p.name for p in tmp_path.glob("*.svg")) == ["report-sft-corpus_loss.svg",
                                                              "report-train-loss-script-alert-1---script-.svg"]
