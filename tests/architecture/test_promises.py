"""docs/promises.md: every promise names a test that can fail when the promise breaks.

An entry `path::name` counts only when (tests/architecture/promise_checks.py) `name` is a test pytest collects from
that file (a helper, a fixture or a nested function does not back a promise), it asserts (itself or through a helper
it calls), it never returns early, and each skip it can take states a reason. The host's tests (under `tests/`)
are also collected for real, in a `pytest --collect-only` subprocess of this environment
(tests/architecture/promise_collector.py): each must be collected here, and one that is skipped on this machine
must say why. The engines' tests (`plugins/*/tests`) are judged from their source only (docs/testing.md "Promises").
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from promise_checks import collected_tests, problems

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
ENTRY = re.compile(r"`([\w/.-]+\.py)::(\w+)`")
DEFAULT_SKIP = "unconditional skip"  # the reason pytest gives a bare pytest.mark.skip
CONDITION_ONLY = "condition: "  # the reason it gives a skipif whose only text is its condition


def entries() -> list[tuple[str, str]]:
    return sorted(set(ENTRY.findall((REPO / "docs" / "promises.md").read_text())))


def support_folders(path: str) -> tuple[Path, ...]:
    """Where a test module's local imports live besides its own folder: `tests/`, or the engine's tests folder."""
    parts = Path(path).parts
    return (REPO / "tests",) if parts[0] == "tests" else (REPO.joinpath(*parts[:3]),)


def collect(paths: list[str], rootdir: Path, tmp_path: Path) -> dict:
    """What `pytest --collect-only` of `paths` collects under `rootdir`, with each test's skip reason on this
    machine (promise_collector.py)."""
    out = tmp_path / "collected.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TT_PROMISE"))}
    env.update(TT_PROMISE_COLLECT_OUT=str(out), PYTHONPATH=os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-p", "promise_collector", "--rootdir", str(rootdir), *paths],
                          cwd=rootdir, env=env, capture_output=True, text=True, timeout=600)
    assert out.is_file(), f"pytest --collect-only wrote nothing (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    return json.loads(out.read_text())


def collection_problems(wanted: list[tuple[str, str]], collected: dict) -> list[str]:
    """The entries of `wanted` that pytest did not collect, or skips here without a reason."""
    reasons = {(path, name): reason for path, name, reason in collected["tests"]}
    found = []
    for path, name in wanted:
        if (path, name) not in reasons:
            module = collected["modules"].get(path, "")
            if module.startswith("skipped: ") and module[len("skipped: "):].strip():
                continue  # the whole module is skipped here, and says why
            found.append(f"{path}::{name}: not collected by pytest here {module}".rstrip())
        elif reasons[(path, name)] is not None and (reasons[(path, name)].strip() in ("", DEFAULT_SKIP)
                                                    or reasons[(path, name)].startswith(CONDITION_ONLY)):
            found.append(f"{path}::{name}: skipped on this machine without a reason")
    return found


def test_every_promised_test_is_collected_and_can_fail(tmp_path):
    listed = entries()
    assert len(listed) >= 30, "docs/promises.md lists too few promises to be the full list"
    found = [f"{path}::{name}: {why}" for path, name in listed for why in problems(REPO / path, name, support_folders(path))]
    host = [(path, name) for path, name in listed if path.startswith("tests/")]
    if not found:  # the static rules first: they name the line; collection then checks what pytest makes of it
        found += collection_problems(host, collect(sorted({path for path, _ in host}), REPO, tmp_path))
    assert not found, "docs/promises.md names tests that cannot back a promise:\n" + "\n".join(found)


def test_only_collected_tests_count():
    source = '''
def helper(): pass
def test_real(): pass
def test_outer():
    def test_nested(): pass
class TestGroup:
    def test_method(self): pass
    def helper(self): pass
class Other:
    def test_not_collected(self): pass
'''
    assert collected_tests(source) == {"test_real", "test_outer", "test_method"}


SAMPLE = '''
import pytest
from sample_support import check_answer

def _local_check(value):
    assert value == 2

def test_asserts(): assert 1 + 1 == 2
def test_raises():
    with pytest.raises(ZeroDivisionError):
        1 / 0
def test_through_a_local_helper(): _local_check(2)
def test_through_a_support_module(): check_answer(2)
def test_through_an_assert_call():
    import math
    math.assert_close = None
    assert_close(1, 1)
def test_returns_early():
    value = 1 + 1
    if value:
        return
    assert value == 2
def test_asserts_nothing(): print(1 + 1)
def test_helper_that_asserts_nothing(): print(2)
@pytest.mark.skip
def test_bare_skip(): assert False
@pytest.mark.skip(reason="needs a GPU")
def test_skip_with_reason(): assert False
@pytest.mark.skipif(True)
def test_skipif_without_reason(): assert False
@pytest.mark.skipif(False, reason="never here")
def test_skipif_with_reason(): assert True
def test_skip_call_without_reason():
    pytest.skip()
    assert False
'''


def judge(folder: Path, source: str) -> dict[str, list[str]]:
    """problems() of each test of `source`, written as folder/test_sample.py beside a support module that asserts."""
    (folder / "test_sample.py").write_text(source)
    (folder / "sample_support.py").write_text("def check_answer(value):\n    assert value == 2\n")
    return {name: problems(folder / "test_sample.py", name, ()) for name in collected_tests(source)}


def test_the_rules_refuse_a_test_that_returns_early_asserts_nothing_or_skips_without_a_reason(tmp_path):
    judged = judge(tmp_path, SAMPLE)
    fine = {name for name, why in judged.items() if not why}
    assert fine == {"test_asserts", "test_raises", "test_through_a_local_helper", "test_through_a_support_module",
                    "test_through_an_assert_call", "test_skip_with_reason", "test_skipif_with_reason"}, judged
    assert "returns" in judged["test_returns_early"][0]
    assert judged["test_asserts_nothing"] == judged["test_helper_that_asserts_nothing"] != []
    assert "without a reason" in judged["test_bare_skip"][0] and "reason=" in judged["test_skipif_without_reason"][0]
    assert "pytest.skip() without a reason" in judged["test_skip_call_without_reason"][0]
    assert problems(tmp_path / "test_sample.py", "helper_gone", ()) == ["pytest collects no test of that name there"]


def test_collection_names_what_pytest_does_not_collect_and_skips_without_a_reason(tmp_path):
    """The collection half, run for real: a module pytest cannot import, a bare skip and a skipif that holds here."""
    (tmp_path / "test_collected.py").write_text(textwrap.dedent('''
        import pytest
        @pytest.mark.skip
        def test_bare(): assert False
        @pytest.mark.skip(reason="needs a GPU")
        def test_explained(): assert False
        @pytest.mark.skipif("sys.platform.startswith('linux')")
        def test_skipif_here(): assert True
        def test_runs(): assert True
    '''))
    (tmp_path / "test_broken.py").write_text("import no_such_module_here\ndef test_never(): assert True\n")
    (tmp_path / "test_module_skip.py").write_text(
        "import pytest\npytest.skip('not on this machine', allow_module_level=True)\ndef test_skipped(): assert True\n")
    collected = collect(["test_collected.py", "test_broken.py", "test_module_skip.py"], tmp_path, tmp_path)
    wanted = [("test_collected.py", n) for n in ("test_bare", "test_explained", "test_skipif_here", "test_runs")]
    found = collection_problems(wanted + [("test_broken.py", "test_never"), ("test_module_skip.py", "test_skipped")],
                                collected)
    assert found[:2] == ["test_collected.py::test_bare: skipped on this machine without a reason",
                         "test_collected.py::test_skipif_here: skipped on this machine without a reason"], found
    assert found[2].startswith("test_broken.py::test_never: not collected by pytest here failed: ")
    assert "no_such_module_here" in found[2] and len(found) == 3, found


HIDDEN = '''
import pytest
from sample_support import check_answer

def _soft(value):
    try:
        assert value == 2
    except AssertionError:
        pass

def test_swallowed():
    try:
        assert 1 == 2
    except AssertionError:
        pass
def test_swallowed_helper_by_exception():
    try:
        check_answer(3)
    except (KeyError, Exception):
        print("never mind")
def test_bare_except():
    try:
        assert False
    except:
        pass
def test_through_a_soft_helper(): _soft(3)
def test_kept_and_asserted_later():
    failures = []
    try:
        assert 1 == 2
    except AssertionError as exc:
        failures.append(exc)
    assert not failures
def test_reraised():
    try:
        assert 1 == 1
    except AssertionError:
        print("context")
        raise
def test_another_exception_is_fine():
    try:
        assert 1 == 1
    except OSError:
        pass
def test_never_taken():
    if False:
        assert 1 == 2
def test_after_a_skip():
    pytest.skip("not yet")
    assert 1 == 2
def test_loop_over_nothing():
    for value in []:
        assert value
def test_constant_while():
    while not 1:
        check_answer(2)
def test_else_of_true():
    if True:
        print(1)
    else:
        assert 1 == 2
def test_one_live_one_dead():
    assert 1 == 1
    if 0:
        assert 1 == 2
def test_after_both_branches_end():
    if 1 + 1 == 2:
        raise RuntimeError("x")
    else:
        raise ValueError("y")
    assert 1 == 2
def test_a_live_branch_counts():
    value = 1 + 1
    if value == 2:
        assert value
'''


def test_an_assertion_swallowed_or_in_a_branch_never_taken_does_not_count_and_is_named(tmp_path):
    judged = judge(tmp_path, HIDDEN)
    fine = {name for name, why in judged.items() if not why}
    assert fine == {"test_kept_and_asserted_later", "test_reraised", "test_another_exception_is_fine",
                    "test_a_live_branch_counts"}, judged
    nothing = "asserts nothing (no assert, pytest.raises, assert* call or helper that asserts)"
    for name, why in (("test_swallowed", "swallowed: line 14's `except AssertionError`"),
                      ("test_swallowed_helper_by_exception", "swallowed: line 19's `except (KeyError, Exception)`"),
                      ("test_bare_except", "swallowed: line 24's `except`"),
                      ("test_never_taken", "never taken: line 46's condition is constant"),
                      ("test_after_a_skip", "never reached: line 49 always ends its block"),
                      ("test_loop_over_nothing", "never taken: line 52 loops over an empty literal"),
                      ("test_constant_while", "never taken: line 55's condition is constant"),
                      ("test_else_of_true", "never taken: line 58's condition is constant"),
                      ("test_after_both_branches_end", "never reached: line 67 always ends its block")):
        assert len(judged[name]) == 2 and why in judged[name][0] and judged[name][1] == nothing, (name, judged[name])
        assert judged[name][0].startswith("line ") and "can never fail the test" in judged[name][0]
    assert judged["test_through_a_soft_helper"] == [nothing]  # a helper's swallowed assert does not count
    (one,) = judged["test_one_live_one_dead"]  # named, though a live assert backs the test
    assert one.startswith("line 65: ") and "condition is constant" in one, one
