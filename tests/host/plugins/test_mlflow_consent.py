"""The shipped MLflow observer sends a run to a spec's remote tracking URI only with the user's consent
(MLFLOW_TRACKING_URI naming the same one, or TT_MLFLOW_SPEC_TRACKING_URI=1); a local URI is used as written."""

from __future__ import annotations

import pytest


def test_a_spec_cannot_send_the_run_to_a_remote_mlflow_without_consent(monkeypatch):
    from tt_observer_mlflow import tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("TT_MLFLOW_SPEC_TRACKING_URI", raising=False)
    remote = {"tracking_uri": "https://collector.example/mlflow"}
    with pytest.raises(ValueError, match="nothing was sent"):
        tracking_uri(remote)
    assert tracking_uri({"tracking_uri": "file:///tmp/mlruns"}) == "file:///tmp/mlruns"  # local: as written
    assert tracking_uri({"tracking_uri": "mlruns-here"}) == "mlruns-here"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://collector.example/mlflow")  # the user chose the same one
    assert tracking_uri(remote) == "https://collector.example/mlflow"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://mine.example")
    with pytest.raises(ValueError):
        tracking_uri(remote)
    monkeypatch.setenv("TT_MLFLOW_SPEC_TRACKING_URI", "1")
    assert tracking_uri(remote) == "https://collector.example/mlflow"
