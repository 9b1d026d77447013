"""The adapter's stages parse their request once into frozen dataclasses: a wrong value exits 2 naming the field."""

from __future__ import annotations

from tt_engine_adapter.testing.harness import sentiment_run


def test_a_wrong_setting_type_exits_2_naming_the_field_before_any_work(tmp_path):
    run = sentiment_run(tmp_path / "run", str(tmp_path / "no-model-needed"), {"batch_size": "4"}, n_train=2, n_eval=1)
    out = run.stage("prepare", check=False)
    assert out["code"] == 2
    errors = [e["message"] for e in out["events"] if e.get("type") == "log" and e.get("level") == "error"]
    assert errors == ["request.spec.hyperparameters.batch_size: expected an integer, got '4' (string)"]
    assert sorted(p.name for p in (tmp_path / "run" / "prepare").iterdir()) == ["request.json"]  # nothing written

    run.spec["hyperparameters"]["batch_size"] = 4
    assert run.stage("prepare")["result"]["metrics"] == {"data.train_rows": 2}
