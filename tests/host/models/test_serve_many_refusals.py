"""`tt serve A B ...` / `--models-from FILE` refusals that need no engine environment (echo engine, fast).

The file is data: a line with spaces or control characters inside, a path, an unknown id, a
file that is not UTF-8 or lists nothing: exit 2 naming FILE:line (or the file), nothing started. Several MODELs
must be registered models served on a base: a folder, or a model served on its own (the echo engine's), is
refused naming it. The terminal never shows a control character from the file.
"""

from __future__ import annotations

import os

from conftest import echo_spec, write_spec


def _model(tt, tmp_path, steps: int) -> str:
    code, out = tt.json("run", write_spec(tmp_path / f"s{steps}", echo_spec(steps=steps)))
    assert code == 0, out
    return out["report"]["models"][0]["id"]


def test_a_models_file_is_data_and_every_bad_line_is_named(tt, tmp_path):
    first = _model(tt, tmp_path, 2)
    listed = tmp_path / "models.txt"
    cases = [
        (f"# ours\n{first}\n\n{first} extra\n", ":4", "one model id per line"),
        (f"{first}\n/etc/passwd\n", ":2", "is a path"),
        (f"{first}\nbad\x1b[31mred\n", ":2", "one model id per line"),
        ("# first\nno-such-model-anywhere\n", ":2", "no-such-model-anywhere"),
        ("# nothing\n\n", "", "no model id in it"),
    ]
    for text, line, words in cases:
        listed.write_text(text)
        proc = tt("serve", "--models-from", listed, "--port", "0", timeout=120)
        assert proc.returncode == 2 and f"{listed}{line}" in proc.stderr and words in proc.stderr, (text, proc.stderr)
        assert "\x1b" not in proc.stderr
    listed.write_bytes(b"\xff\xfe\n")
    proc = tt("serve", "--models-from", listed, "--port", "0", timeout=120)
    assert proc.returncode == 2 and "not UTF-8" in proc.stderr


def test_several_models_must_be_registered_models_served_on_one_base(tt, tmp_path):
    first, second = _model(tt, tmp_path, 2), _model(tt, tmp_path, 3)
    proc = tt("serve", first, second, "--port", "0", timeout=120)
    assert proc.returncode == 2 and first in proc.stderr and "served alone" in proc.stderr, proc.stderr
    folder = tmp_path / "a-folder"
    folder.mkdir()
    proc = tt("serve", str(folder), first, "--port", "0", timeout=120)
    assert proc.returncode == 2 and "registered model ids only" in proc.stderr, proc.stderr
    proc = tt("serve", "--port", "0", timeout=120)
    assert proc.returncode == 2 and "--models-from" in proc.stderr
    proc = tt("serve", first, second, "--max-adapters", "0", "--port", "0", timeout=120)
    assert proc.returncode == 2 and "--max-adapters must be between 1 and 4096" in proc.stderr


def test_models_trained_on_another_base_name_revision_or_fingerprint_are_each_named(tmp_path):
    import pytest

    from tt_host.engine import SERVE_ON_BASE
    from tt_host.models.references import ResolvedModel
    from tt_host.models.serve_many import ManyError, check_one_base

    def model(name: str, base: dict) -> ResolvedModel:
        return ResolvedModel(form=SERVE_ON_BASE, path=tmp_path / name, model_id=name, kind="lora",
                             manifest={"base_model": base})

    base = {"name": "/models/base", "revision": None, "fingerprint": "a" * 64}
    same = [model("m1", base), model("m2", dict(base))]
    check_one_base(same, ["MODEL 1", "MODEL 2"])
    others = [model("other-fingerprint", dict(base, fingerprint="b" * 64)),
              model("other-revision", dict(base, revision="c0ffee")),
              model("other-name", dict(base, name="org/other\x1b[2J"))]
    with pytest.raises(ManyError) as caught:
        check_one_base(same + others, ["MODEL 1", "MODEL 2", "list.txt:3", "list.txt:4", "list.txt:5"])
    message = str(caught.value)
    assert caught.value.exit_code == 2 and "m2" not in message.split("but", 1)[1]
    for name, where in [("other-fingerprint", "list.txt:3"), ("other-revision", "list.txt:4"),
                        ("other-name", "list.txt:5")]:
        assert f"{name} ({where}) is trained on" in message
    assert "bbbbbbbbbbbb" in message and "at c0ffee" in message and "\x1b" not in message


def test_the_admin_endpoint_takes_a_name_never_a_path_and_names_only_what_it_was_given(tmp_path, monkeypatch):
    """`POST /admin/adapters`' model, as the host answers it (serve_many.answer): a path is refused alike
    whether it exists or not (an answer never tells which host paths exist), a name that is a folder in the
    server's folder is just a name, and a prefix is looked up on the server's base only: an answer never lists
    a registered id on another base the client did not name."""
    import json

    from tt_host.models.serve_many import answer

    home, here = tmp_path / "tt-home", tmp_path / "here"
    (home / "models").mkdir(parents=True)
    (here / "secret-project").mkdir(parents=True)
    monkeypatch.setenv("TT_HOME", str(home))
    monkeypatch.chdir(here)
    base_a = {"name": "org/base-a", "revision": None, "fingerprint": "a" * 64}
    base_b = {"name": "org/base-b", "revision": None, "fingerprint": "b" * 64}
    for model_id, base in (("alpha-on-a", base_a), ("alpha-on-b", base_b), ("alpha-two-b", base_b),
                           ("zeta-on-b", base_b)):
        (home / "models" / f"{model_id}.json").write_text(json.dumps(
            {"id": model_id, "kind": "lora", "engine": "adapter", "path": str(tmp_path / "gone" / model_id),
             "base_model": base, "manifest_sha256": "0" * 64}))
    on_a = ("org/base-a", None, "a" * 64)

    def said(name: str) -> tuple[int, str]:
        reply = answer({"ref": 1, "model": name}, on_a)
        assert "model" not in reply, reply
        return reply["status"], reply["error"]

    refused = said("/no/such/folder")
    assert refused[0] == 400 and "never a path" in refused[1], refused
    for name in ("/etc", "/etc/passwd", str(here), "~", "~/.ssh", "../here", "./secret-project", "a b", "", "Alpha"):
        assert said(name) == refused, name  # existing or not, the same words: nothing told
    missing, folder = said("no-such-project"), said("secret-project")
    assert missing[0] == 404 and folder == (404, missing[1].replace("no-such-project", "secret-project")), folder
    status, error = said("zeta")  # begins only a model on another base: not found, never named
    assert status == 404 and "zeta-on-b" not in error, error
    status, error = said("alpha")  # one id on this base begins it; the other base's are never named
    assert "alpha-on-a" in error and "-on-b" not in error and "two-b" not in error, error
    on_b = ("org/base-b", None, "b" * 64)
    reply = answer({"ref": 2, "model": "alpha"}, on_b)  # ambiguous on base b: its ids listed, never base a's
    assert reply["status"] == 400 and "alpha-on-b" in reply["error"] and "alpha-two-b" in reply["error"], reply
    assert "alpha-on-a" not in reply["error"], reply
    status, error = said("zeta-on-b")  # the client named it: it is found (and then refused on its own merits)
    assert "zeta-on-b" in error and "no registered model" not in error, error

def test_a_models_file_that_is_a_fifo_or_a_link_to_dev_zero_is_refused_at_once(tt, tmp_path):
    """Read through the safe reader (tt_stagekit.userinput.read_regular): a FIFO never blocks tt, /dev/zero is never
    read until MemoryError; exit 2 naming the file and what it is."""
    fifo, zero = tmp_path / "models.fifo", tmp_path / "models.txt"
    os.mkfifo(fifo)
    zero.symlink_to("/dev/zero")
    for path, kind in ((fifo, "named pipe"), (zero, "character device")):
        proc = tt("serve", "--models-from", path, "--port", "0", timeout=60)
        assert proc.returncode == 2 and str(path) in proc.stderr and kind in proc.stderr, proc.stderr
