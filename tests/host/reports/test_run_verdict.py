"""Every run ends with its verdict: the last line of `tt run`, the top of report.md, the predictions table of
`tt runs report`, and report.html (self-contained, well-formed, with readable charts and wrong-way notes)."""

import json
import re
from html.parser import HTMLParser
from pathlib import Path

from conftest import echo_spec, write_spec
from tt_host.reports.charts import nice_ticks, tick_labels, wrong_way
from tt_host.reports.ending import COMPLETED, Ending, Tally
from tt_host.reports.report import build_report, write_report
from tt_host.reports.verdict import verdict_line

VOID = {"meta", "br", "img", "hr", "input", "link", "path", "line", "rect"}  # path/line/rect: SVG, self-closed


class Strict(HTMLParser):
    """Fails on a closing tag that does not close the innermost open one; records tags and text."""

    def __init__(self):
        super().__init__()
        self.stack, self.tags, self.text, self.attrs = [], [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += attrs
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += attrs

    def handle_endtag(self, tag):
        if tag in VOID and (not self.stack or self.stack[-1] != tag):
            return
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def parse(page: str) -> Strict:
    parser = Strict()
    parser.feed(page)
    parser.close()
    assert parser.stack == [], f"unclosed: {parser.stack}"
    return parser


def verdict_spec() -> dict:
    spec = echo_spec(steps=2, baseline=True)
    # Held out (the recorded split of these prompts): rows 0, 1 and 9. Row 0 answers its own prompt, so the
    # echoing base and tuned models both pass it; row 1's reference carries terminal escapes; row 9's is long.
    spec["examples"][0]["output"] = spec["examples"][0]["input"]
    spec["examples"][1]["output"] = "\x1b[31mCity 1\x1b[0m\x07"
    spec["examples"][9]["output"] = "City 9 " + "and more " * 40
    return spec


def test_run_prints_verdict_last_and_report_lists_predictions(tt, tmp_path):
    path = write_spec(tmp_path / "s", verdict_spec())
    proc = tt("run", path, check=True)
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("held-out exact match 1/3 → 1/3 · grader score 0.38 → 0.38 · no gate configured · "
                           "predictions: tt runs report "), last
    run = next((tmp_path / "s" / ".tuned-tensor" / "runs").iterdir())
    report = json.loads((run / "report.json").read_text())
    assert report["verdict"] == last and run.name in last
    assert (run / "report.md").read_text().splitlines()[2] == f"**{last}**"
    assert [row["pass"] for row in report["predictions"]] == [True, False, False]
    with (run / "report.md").open("a") as markdown:  # text as report.md escapes it (a note, a spec name)
        markdown.write("- Q&amp;A &#x27;capitals&#x27;\n")
    shown = tt("runs", "report", run.name, check=True).stdout
    assert "## Held-out predictions" in shown and "| # | prompt | reference | base | tuned | pass |" in shown
    assert "- Q&A 'capitals'" in shown and "&amp;" not in shown, shown  # to a pipe: plain text
    rows = [line for line in shown.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")
            or line.startswith("| 3 |")]
    assert len(rows) == 3 and rows[0].endswith("| pass | 1.00 → 1.00 |"), rows
    assert rows[1].endswith("| FAIL | 0.14 → 0.14 |"), rows  # mean of exact 0 and token F1 2/7 (the shared "1")
    assert "Capital of country 1?" in rows[1] and "[31mCity 1[0m" in rows[1]
    assert "\x1b" not in shown and "\x07" not in shown
    assert "…" in rows[2] and "and more " * 20 not in rows[2]  # a long reference is cut in the table


def test_report_html_is_self_contained_with_charts_and_status_names_the_run(tt, tmp_path):
    path = write_spec(tmp_path / "s", verdict_spec())
    code, out = tt.json("run", path)
    assert code == 0, out
    page = (Path(out["run_dir"]) / "report.html").read_text()
    parsed = parse(page)
    text = " ".join(parsed.text)
    assert out["report"]["verdict"] in text and "Held-out predictions" in text
    assert parsed.tags.count("svg") == 1 and "step" in text and "loss (nats/token)" in text  # axes with units
    assert sum(1 for name, value in parsed.attrs if name == "class" and value == "axis") == 2
    assert "script" not in parsed.tags and not any(name in ("src", "href") for name, _ in parsed.attrs)
    assert "\x1b" not in page
    status = tt("status", check=True).stdout  # no spec in this folder: the newest run anywhere, named as such
    assert f"latest run       {out['report']['run_id']} completed" in status and "not here)" in status, status


def test_falling_reward_gets_its_note_and_a_falling_loss_none(tmp_path):
    falling = [[step, 0.97 - 0.01 * step] for step in range(30)]
    rising = [[step, 0.5 + 0.01 * step] for step in range(30)]
    loss = [[step, 2.0 / (step + 1)] for step in range(30)]
    assert wrong_way("rl.reward", rising) is None and wrong_way("sft.loss", loss) is None
    assert "should fall" in wrong_way("sft.loss", rising)
    series = {"rl.reward": falling, "sft.loss": loss}
    report = build_report(Ending(COMPLETED, {"id": "r1", "engine": "echo", "status": "completed", "stages": {}},
                                 Path("spec.json"), tmp_path, Tally(series=series)))
    write_report(tmp_path, report, series)
    (warning,) = report["curve_warnings"]
    assert warning.startswith("rl.reward fell over the run: 0.945 on average over its first fifth, 0.705 over its "
                              "last (30 points); it should rise"), warning
    markdown = (tmp_path / "report.md").read_text()
    assert f"- **check this curve:** {warning}" in markdown
    assert 'class="wrong-way"' in (tmp_path / "report-rl-reward.svg").read_text()
    assert 'class="wrong-way"' not in (tmp_path / "report-sft-loss.svg").read_text()
    parsed = parse((tmp_path / "report.html").read_text())
    assert parsed.tags.count("svg") == 2 and "check this curve:" in " ".join(parsed.text)


def test_the_verdict_reads_a_side_scored_under_its_stage_name_and_names_the_gates():
    """The foundation engine's tuned model is scored as `chat_eval` (held_out_sides) and it has no held-out
    baseline; a failed general-regression gate is named."""
    report = {"run_id": "r2", "metrics": {"chat_eval.count": 11, "chat_eval.exact_match": 8 / 11},
              "held_out_sides": {"candidate": "chat_eval"}, "general_regression": {"status": "failed"},
              "predictions": [{"id": "1"}]}
    assert verdict_line(report) == ("held-out exact match 8/11 (tuned; the base model was not evaluated) · "
                                    "general-regression gate failed · predictions: tt runs report r2 "
                                    "(report.md, report.html)")
    assert verdict_line({"run_id": "r3", "metrics": {}}).startswith("no held-out score")


def test_the_verdict_and_the_table_keep_base_and_tuned_grader_scores_apart(tmp_path):
    """Base and tuned answers that score differently (a wrong base, a half-right and a right tuned answer): the
    verdict, each prediction's `grader_score` and report.md's graders column say base → tuned in that order."""
    from tt_host.evaluation.scoring import score
    from tt_stagekit.graders import from_spec

    examples = [{"input": f"Capital of country {i}?", "output": f"City {i}"} for i in range(3)]
    graders = from_spec({"examples": examples, "evaluation": {"graders": [{"kind": "exact"}, {"kind": "number"}]}})
    rows = [{"id": f"e{i}", "messages": [{"role": "user", "content": e["input"]},
                                         {"role": "assistant", "content": e["output"]}]} for i, e in enumerate(examples)]
    answers = {"baseline": {"e0": "Town", "e1": "Town", "e2": "City 2"},
               "candidate": {"e0": "City 0", "e1": "Town 1", "e2": "City 2"}}
    references = {row["id"]: row["messages"][-1]["content"] for row in rows}
    metrics = {**score(answers["baseline"], references, "baseline", graders),
               **score(answers["candidate"], references, "candidate", graders)}
    state = {"engine": "echo", "status": "completed", "id": "r4", "stages": {}}
    tally = Tally(metrics=metrics, answers=answers, held_out_sides={"baseline": "baseline", "candidate": "candidate"})
    report = build_report(Ending(COMPLETED, state, Path("spec.json"), tmp_path, tally, eval_rows=rows,
                                 graders=graders))
    # base: 0, 0, 1 (both graders); tuned: 1, 0.5 (the number matches, the text not), 1
    assert report["verdict"].startswith("held-out exact match 1/3 → 2/3 · grader score 0.33 → 0.83 · "), report
    assert [row["grader_score"] for row in report["predictions"]] == [
        {"baseline": 0.0, "candidate": 1.0}, {"baseline": 0.0, "candidate": 0.5},
        {"baseline": 1.0, "candidate": 1.0}]
    write_report(tmp_path, report, {})
    table = [line for line in (tmp_path / "report.md").read_text().splitlines() if line.startswith("| 2 |")]
    assert table and table[0].endswith("| FAIL | 0.00 → 0.50 |"), table


def test_a_report_a_person_reads_first_the_rewards_and_scores_then_the_rest(tmp_path):
    """Rewards, then held-out scores, then losses, then the rest; a series that never moved (GRPO's kl at
    kl_beta 0) is a line, not a flat chart; no trend judged on 4 points; GRPO's loss named as its objective;
    round ticks and whole steps; a noisy series raw beside its running mean; the metrics table after the charts."""
    noisy = [[step, 0.5 + 0.3 * (step % 2) + 0.01 * step] for step in range(1, 15)]
    series = {"reinforce.kl": [[s, 0.0] for s in range(1, 15)], "reinforce.loss": noisy, "reinforce.reward": noisy,
              "sft.loss": [[s, 2.0 / s] for s in range(1, 15)], "reinforce.answer_tokens": noisy,
              "rl.reward": [[1, 0.9688], [2, 0.8], [3, 0.7], [4, 0.5938]]}
    metrics = {f"m.{n}": 0.1 * n for n in range(40)}
    report = build_report(Ending(COMPLETED, {"id": "r1", "engine": "adapter", "status": "completed", "stages": {}},
                                 Path("spec.json"), tmp_path, Tally(series=series, metrics=metrics)))
    write_report(tmp_path, report, series)
    assert report["curve_warnings"] == []  # 4 falling points of rl.reward: too few to call a trend
    markdown = (tmp_path / "report.md").read_text()
    charts = [line[2:].split("]")[0] for line in markdown.splitlines() if line.startswith("![")]
    assert charts == ["reinforce.reward", "rl.reward", "reinforce.loss", "sft.loss", "reinforce.answer_tokens"], charts
    assert "- reinforce.kl: 0 at every one of its 14 steps (not charted)" in markdown
    assert not (tmp_path / "report-reinforce-kl.svg").exists()
    assert markdown.index("## Curves") < markdown.index("## Metrics")
    loss = (tmp_path / "report-reinforce-loss.svg").read_text()
    assert "GRPO&#x27;s surrogate objective" in loss and "nats/token" not in loss
    assert 'class="raw"' in loss and 'class="smoothed"' in loss  # 14 noisy points: raw and running mean
    assert 'class="raw"' not in (tmp_path / "report-rl-reward.svg").read_text()
    steps = re.findall(r'text-anchor="middle" font-family="sans-serif" font-size="11">([^<]+)<', loss)
    assert steps == ["0", "5", "10", "15"], steps  # whole steps, round
    assert tick_labels(nice_ticks(0.4775, 0.7267)) == ["0.4", "0.5", "0.6", "0.7", "0.8"]


def test_stages_the_spec_turns_off_are_one_line_not_rows_of_skipped(tt, tmp_path):
    """The echo spec without `echo.baseline` (as a plain LoRA run has no tuning stages): report.md and the dry run
    list the stage on one "not in this run" line instead of a "skipped" row."""
    path = write_spec(tmp_path / "s", echo_spec(steps=2))
    code, out = tt.json("run", path)
    assert code == 0, out
    markdown = (Path(out["run_dir"]) / "report.md").read_text()
    assert "Not in this run (the spec turns them off): baseline." in markdown, markdown
    assert "| baseline | skipped" not in markdown and "| train | completed |" in markdown, markdown
    planned = tt("run", path, "--dry-run", "--resume", out["run_dir"])
    assert planned.returncode == 0, planned.stderr
    assert "not in this run (the spec turns them off): baseline" in planned.stdout, planned.stdout
    assert not any(line.split()[:1] == ["baseline"] for line in planned.stdout.splitlines() if "│" not in line)
