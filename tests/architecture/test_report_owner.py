"""report.json has one owner: the reports wing (`tt_host/reports/`, docs/host.md "The map").

Read from the source with `ast`: outside `tt_host/reports/`, no module of the host sets, deletes or updates a key
of a dict it holds under a name saying `report` (`report["x"] = ...`, `outcome.report.update(...)`,
`del report["x"]`, `report.setdefault(...)`), and none writes a file whose path or contents name a report (the
fsutil writers, `write_text`, `json.dump`, `open(..., "w")`). A run's driver hands the wing the facts of its ending
(tt_host.reports.ending.Ending) and reads the report it gets back.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OWNER = Path("tt_host") / "reports"
MUTATORS = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"}
WRITERS = {"write_json_atomic", "write_text_atomic", "write_bytes_atomic", "write_text", "write_bytes", "dump"}


def _says_report(node: ast.AST) -> bool:
    return "report" in ast.unparse(node).lower()


def _opens_for_writing(call: ast.Call) -> bool:
    modes = [a for a in call.args[1:2]] + [k.value for k in call.keywords if k.arg == "mode"]
    return any(isinstance(m, ast.Constant) and isinstance(m.value, str) and set(m.value) & set("wax+")
               for m in modes)


def report_writes(path: Path, root: Path) -> list[str]:
    """Each place in `path` that writes a key of a report or a report file, as `file:line: code`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        targets: list[ast.AST] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        hit = any(isinstance(t, ast.Subscript) and _says_report(t.value) for t in targets)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in MUTATORS and _says_report(node.func.value):
                hit = True
            if node.func.attr in WRITERS and any(_says_report(part) for part in (node.func.value, *node.args)):
                hit = True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in WRITERS and any(_says_report(arg) for arg in node.args):
                hit = True
            if node.func.id == "open" and node.args and _says_report(node.args[0]) and _opens_for_writing(node):
                hit = True
        if hit:
            found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node).splitlines()[0]}")
    return found


def writers_outside_the_wing(root: Path) -> list[str]:
    return [line for path in sorted((root / "tt_host").rglob("*.py"))
            if not path.relative_to(root).is_relative_to(OWNER) for line in report_writes(path, root)]


def test_only_the_reports_wing_writes_report_json():
    assert writers_outside_the_wing(REPO) == [], "report.json's keys are decided by tt_host/reports only"


def test_the_reports_wing_is_where_report_json_is_written():
    """The scan sees the real writer (so it would see one elsewhere): the wing's own writes are found."""
    found = [line for path in sorted((REPO / OWNER).rglob("*.py")) for line in report_writes(path, REPO)]
    assert any("report.py" in line and "REPORT_JSON" in line for line in found), found


def test_a_planted_report_key_in_the_driver_is_found(tmp_path):
    drive = (REPO / "tt_host" / "runs" / "drive.py").read_text(encoding="utf-8")
    planted = {
        'report["x"] = 1': '    report["x"] = 1\n',
        "outcome.report.update": "    outcome.report.update(resume='x')\n",
        'del report["verdict"]': '    del report["verdict"]\n',
        "write_json_atomic": "    write_json_atomic(run.path / 'report.json', {})\n",
    }
    for name, line in planted.items():
        (tmp_path / "tt_host" / "runs").mkdir(parents=True, exist_ok=True)
        (tmp_path / "tt_host" / "runs" / "drive.py").write_text(drive + "\n\ndef _planted(report, outcome, run):\n"
                                                                 + line)
        found = writers_outside_the_wing(tmp_path)
        assert len(found) == 1 and found[0].startswith("tt_host/runs/drive.py:"), (name, found)


def resume_spellings(root: Path) -> list[str]:
    """Each f-string of the host that spells the command resuming a run (`tt run ... --resume ...`)."""
    found = []
    for path in sorted((root / "tt_host").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.JoinedStr):
                text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
                if "tt run {}" in text and "--resume {}" in text:
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_the_resume_command_is_spelled_once():
    """drive.py, diskfull.py and `tt run` all say it through tt_host.reports.ending.resume_command."""
    assert [line.split(":")[0] for line in resume_spellings(REPO)] == ["tt_host/reports/ending.py"]
