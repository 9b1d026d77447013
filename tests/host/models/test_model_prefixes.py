"""Every command taking a model id takes its unique prefix (tt_host.models.references.registered_id), `@n` after
it too: `tt models get|activate|verify|export|history` and `tt serve` (its `--print-command`, which resolves the
model as serving does and starts nothing). An ambiguous prefix exits 2 listing the ids it begins; no match exits 2
as an unknown id does. Host only: the echo test engine.
"""

from __future__ import annotations

from conftest import echo_spec, registered_runs, write_spec


def test_a_unique_prefix_names_its_model_in_every_command_and_an_ambiguous_one_lists_them(tt, tmp_path):
    ids = registered_runs(tt, write_spec(tmp_path, echo_spec(steps=2)), [tmp_path / "run-a", tmp_path / "run-b"])
    first = ids[0]
    prefix = first[: first.index("run-a") + len("run-a")]
    assert prefix != first and len([i for i in ids if i.startswith(prefix)]) == 1, ids

    code, got = tt.json("models", "get", f"{prefix}@1")
    assert code == 0 and (got["id"], got["version"]) == (first, 1), got
    code, shown = tt.json("serve", prefix, "--port", "0", "--print-command")
    assert code == 0 and shown["model_id"] == first, shown
    code, shown = tt.json("serve", f"{prefix}@1", "--port", "0", "--print-command")
    assert code == 0 and shown["model_id"] == first, shown
    code, checked = tt.json("models", "verify", prefix)
    assert code == 0 and checked["id"] == first, checked
    code, listed = tt.json("models", "history", prefix)
    assert code == 0 and listed["id"] == first, listed
    code, activated = tt.json("models", "activate", f"{prefix}@1", "--force")
    assert code == 0 and activated["model"] == first, activated
    code, exported = tt.json("models", "export", prefix, tmp_path / "exported")
    assert code == 0 and exported["model"] == first, exported

    for command in (("serve", "capitals-run-", "--print-command"), ("serve", "capitals-run-@1", "--print-command"),
                    ("models", "export", "capitals-run-", str(tmp_path / "never")), ("models", "history", "capitals-run-"),
                    ("models", "get", "capitals-run-@1"), ("models", "activate", "capitals-run-")):
        code, out = tt.json(*command)
        message = out["error"]["message"]
        assert code == 2 and all(i in message for i in ids) and "give more of the id" in message, (command, out)
    assert not (tmp_path / "never").exists()
    for command in (("serve", "zz-no-such", "--print-command"), ("models", "export", "zz-no-such", str(tmp_path / "never")),
                    ("models", "get", "zz-no-such@1")):
        code, out = tt.json(*command)
        assert code == 2 and "no registered model 'zz-no-such" in out["error"]["message"], (command, out)
    assert not (tmp_path / "never").exists()
