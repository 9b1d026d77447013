"""A pytest plugin for `pytest --collect-only -p promise_collector` (tests/architecture/test_promises.py): writes,
to the JSON file `$TT_PROMISE_COLLECT_OUT`, every test pytest collects here with the reason its skip marks give on
this machine (null when it runs), and every module pytest skipped or failed to import.

`{"tests": [[path, name, reason-or-null], ...], "modules": {path: "skipped: reason" | "error: text"}}`, paths
relative to the rootdir. Reasons come from pytest's own evaluation of `skip`/`skipif` (a bare `skip` gives
"unconditional skip").
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _pytest.skipping import evaluate_skip_marks

_modules: dict[str, str] = {}
_tests: list[list] = []


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.outcome == "passed" or not report.nodeid.endswith(".py"):
        return
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    _modules[report.nodeid] = f"{report.outcome}: {text}"


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        skip = evaluate_skip_marks(item)
        path = Path(str(item.path)).relative_to(config.rootpath).as_posix()
        _tests.append([path, getattr(item, "originalname", None) or item.name, None if skip is None else skip.reason])


def pytest_sessionfinish(session: pytest.Session) -> None:
    Path(os.environ["TT_PROMISE_COLLECT_OUT"]).write_text(json.dumps({"tests": _tests, "modules": _modules}))
