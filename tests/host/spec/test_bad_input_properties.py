"""Property-based bad input: random malformed specs, dataset rows and serving requests.

For every generated input: no traceback, exit 2 (a 4xx for a request), the
culprit named (the field's dotted path, `file:line`, or the request `param`),
`--json` output that parses, and nothing written. `tt` runs in-process
(typer's CliRunner) so each example costs milliseconds; one property also goes
through the real console script. Examples are few (`max_examples`) and
`deadline=None`: the machine is loaded.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from badinput_support import error_locs, in_process_tt, snapshot
from conftest import TT_BIN, base_env, echo_spec
from plugin_site import echo_site
from tt_engine_adapter.formats import rows
from tt_engine_adapter.serve.request import ApiError, ChatParams, parse_chat
from tt_host.spec.general import GeneralSetError, read_general_set
from tt_stagekit.chatrows import parsed_lines

# database=None: no .hypothesis/ folder written into the checkout
FAST = settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
CLI = settings(FAST, max_examples=20)  # each example runs tt validate and tt run in-process

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                      st.text(max_size=20))
json_value = st.recursive(json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                             st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                          max_leaves=12)
containers = st.one_of(st.lists(json_leaf, max_size=3), st.dictionaries(st.text(max_size=5), json_leaf, max_size=3))
huge_int = st.builds(lambda sign, n: sign + "9" * n, st.sampled_from(["", "-"]), st.integers(4301, 6000))  # JSON text

# (dotted field, values that must be refused there): wrong types, out of range, not finite, never converted
NOT_INT = st.one_of(st.text(max_size=6), st.floats(), st.booleans(), st.none(), containers,
                    st.integers(max_value=0), st.integers(min_value=100_001), st.just("4"), st.just(4.0))
NOT_POSITIVE_FLOAT = st.one_of(st.text(max_size=6), st.booleans(), st.none(), containers,
                               st.floats(max_value=0), st.sampled_from([math.inf, -math.inf, math.nan]))
NOT_NAME = st.one_of(st.integers(), st.floats(), st.booleans(), st.none(), containers, st.just(""),
                     st.text(min_size=201, max_size=260))
FIELDS = {
    "echo.steps": NOT_INT,
    "echo.fail_at_step": st.one_of(st.text(max_size=4), st.floats(), st.booleans(), containers, st.just("2")),
    "echo.learning_rate": NOT_POSITIVE_FLOAT,
    "echo.reject_input": st.one_of(st.integers(), st.text(max_size=4), st.floats(), st.none(), containers),
    "name": NOT_NAME,
    "examples.3.input": st.one_of(st.integers(), st.floats(), st.booleans(), st.none(), containers, st.just("")),
    "guidelines": st.one_of(st.text(max_size=5), st.integers(), st.booleans(), st.dictionaries(st.text(), st.text())),
}


@pytest.fixture(scope="module")
def tt_in(tmp_path_factory):
    with in_process_tt(tmp_path_factory.mktemp("tt-in")) as tt:
        yield tt


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("examples")


def _set(spec: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    target = spec
    for part in parents:
        target = target[int(part)] if part.isdigit() else target.setdefault(part, {})
    target[int(last) if last.isdigit() else last] = value


def _write(base: Path, data: bytes) -> tuple[Path, Path]:
    folder = Path(tempfile.mkdtemp(dir=base))
    (folder / "tunedtensor.json").write_bytes(data)
    return folder, folder / "tunedtensor.json"


def _refused(tt_in, folder: Path, path: Path) -> dict:
    code, out = tt_in.json("validate", path)
    assert code == 2 and out["valid"] is False and out["errors"], out
    assert all(e["loc"] and e["msg"] for e in out["errors"]), out
    code, run = tt_in.json("run", path, "--resume", folder / "run")
    assert code == 2, run
    assert snapshot(folder) == {"tunedtensor.json"}
    return out


@CLI
@given(data=st.data(), field=st.sampled_from(sorted(FIELDS)))
def test_a_wrong_value_is_refused_at_its_field(tt_in, scratch, data, field):
    value = data.draw(FIELDS[field], label=field)
    spec = echo_spec()
    _set(spec, field, value)
    folder, path = _write(scratch, json.dumps(spec).encode())
    out = _refused(tt_in, folder, path)
    assert any(loc == field or loc.startswith(field + ".") for loc in error_locs(out)), (field, value, out)


@CLI
@given(field=st.sampled_from(["name", "system_prompt", "echo", "examples"]), digits=huge_int)
def test_duplicate_keys_and_huge_integers_name_the_key(tt_in, scratch, field, digits):
    text = json.dumps(echo_spec())
    text = text.replace(f'"{field}": ', f'"{field}": 1, "{field}": ', 1)
    folder, path = _write(scratch, text.encode())
    assert field in error_locs(_refused(tt_in, folder, path))
    text = json.dumps(echo_spec(steps=1)).replace('"steps": 1', f'"steps": {digits}')
    folder, path = _write(scratch, text.encode())
    assert "echo.steps" in error_locs(_refused(tt_in, folder, path))


@CLI
@given(raw=st.one_of(st.binary(max_size=200), json_value.map(lambda v: json.dumps(v).encode()),
                     st.integers(1, 3000).map(lambda n: b'{"name": ' + b"[" * n + b"]" * n + b"}")))
def test_arbitrary_bytes_or_json_as_a_spec(tt_in, scratch, raw):
    folder, path = _write(scratch, raw)
    _refused(tt_in, folder, path)


def _good_row(i: int) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": f"q{i}"},
                                    {"role": "assistant", "content": f"a{i}"}]}).encode()


def _one_line_not_blank(raw: bytes) -> bool:
    """`raw` is one line (no line break of any reader's splitting) that a reader cannot skip as blank."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return b"\n" not in raw and b"\r" not in raw
    return len(text.splitlines()) == 1 and text.strip() != ""


bad_line = st.one_of(st.binary(min_size=1, max_size=60).filter(_one_line_not_blank),
                     json_value.map(lambda v: json.dumps(v).encode()),
                     st.builds(lambda n: b'{"id": ' + b"1" * n + b"}", st.integers(4301, 5000)),
                     st.builds(lambda n: b"[" * n + b"]" * n, st.integers(65, 3000)),
                     st.just(b'{"messages": [], "messages": []}'))


@FAST
@given(lines=st.lists(bad_line, min_size=1, max_size=3), position=st.integers(0, 3))
def test_dataset_rows_are_refused_naming_file_and_line(scratch, lines, position):
    folder = Path(tempfile.mkdtemp(dir=scratch))
    path = folder / "rows.jsonl"
    content = [_good_row(i) for i in range(3)]
    content[position:position] = lines
    path.write_bytes(b"\n".join(content) + b"\n")
    count = len(b"\n".join(content).splitlines())
    for name, read, error in (("read_chat_jsonl", lambda: rows.read_chat_jsonl(path, "train"), rows.RowError),
                              ("read_general_set", lambda: read_general_set(path, None), GeneralSetError)):
        try:
            read()
        except error as exc:
            message = str(exc)
            assert message.startswith(f"{path}:"), message
            line = message[len(str(path)) + 1:].split(":", 1)[0]
            assert line.isdigit() and 1 <= int(line) <= count, message
        else:  # every inserted line is bad and none is blank: accepting the file breaks the promise
            pytest.fail(f"{name} accepted a file with a bad line: {lines!r}")
    assert sorted(os.listdir(folder)) == ["rows.jsonl"]


@FAST
@given(line=st.one_of(st.binary(max_size=80), st.text(max_size=80)))
def test_shared_row_parser_raises_only_its_error(line):
    try:
        list(parsed_lines([line], "f.jsonl", ValueError))
    except ValueError as exc:
        assert str(exc).startswith("f.jsonl:1: "), exc


VALID_REQUEST = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
REQUEST_FIELDS = {
    "messages": st.one_of(json_leaf, st.lists(json_leaf, max_size=3), st.just([])),
    "max_tokens": st.one_of(st.text(max_size=4), st.floats(), st.booleans(), st.integers(max_value=0),
                            st.integers(min_value=1025), containers),
    "temperature": st.one_of(st.text(max_size=4), st.booleans(), containers, st.floats(min_value=2.0001),
                             st.floats(max_value=-0.0001), st.sampled_from([math.inf, math.nan])),
    "stream": st.one_of(st.integers(), st.text(max_size=4), containers),
    "stop": st.one_of(st.integers(), st.lists(st.integers(), min_size=1, max_size=3), st.just([""])),
    "seed": st.one_of(st.text(max_size=4), st.floats(), st.booleans()),
}


def _parse(raw: bytes):
    try:
        return parse_chat(raw, "m", 1024)
    except ApiError as exc:
        assert 400 <= exc.status < 500 and exc.message, exc
        body = exc.body()
        assert json.loads(json.dumps(body)) == body
        return exc


@FAST
@given(raw=st.one_of(st.binary(max_size=200), json_value.map(lambda v: json.dumps(v).encode()),
                     st.integers(1, 3000).map(lambda n: b'{"messages": ' + b"[" * n + b"]" * n + b"}"),
                     huge_int.map(lambda d: json.dumps({**VALID_REQUEST, "seed": 0}).replace('"seed": 0',
                                                                                           f'"seed": {d}').encode()),
                     st.just(b'{"model": "m", "model": "m", "messages": []}')))
def test_arbitrary_request_bodies_get_a_4xx(raw):
    result = _parse(raw)
    assert isinstance(result, (ApiError, ChatParams))


@FAST
@given(data=st.data(), field=st.sampled_from(sorted(REQUEST_FIELDS)))
def test_a_wrong_request_field_is_refused_by_name(data, field):
    body = {**VALID_REQUEST, field: data.draw(REQUEST_FIELDS[field], label=field)}
    result = _parse(json.dumps(body).encode())
    assert isinstance(result, ApiError) and result.status == 400, (body, result)
    assert (result.param or "").startswith(field), (body, result.param, result.message)


@settings(max_examples=3, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.one_of(st.binary(min_size=1, max_size=100), json_value.map(lambda v: json.dumps(v).encode())))
def test_real_console_script_refuses_random_specs(scratch, raw):
    folder, path = _write(scratch, raw)
    env = base_env(folder, echo_site(scratch / "site"))
    proc = subprocess.run([TT_BIN, "validate", str(path), "--json"], env=env, cwd=folder, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    out = json.loads(proc.stdout)
    assert out["errors"] and all(e["loc"] for e in out["errors"])
    assert snapshot(folder) == {"tunedtensor.json"}
