"""Multi-node settings are checked once (tt_stagekit.launcher) and refused the same way by both engines' specs."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from tt_engine_adapter.spec import Hyperparameters
from tt_engine_foundation.spec import FoundationConfig
from tt_host.spec.schema import DistributedSettings as SpecSettings
from tt_stagekit.launcher import DistributedSettings, endpoint_error, nodes_error


def test_endpoint_and_nodes_checks():
    assert endpoint_error("10.0.0.1:29500") is None and endpoint_error("[::1]:29500") is None
    for bad in ("10.0.0.1", ":29500", "host:0", "host:99999", "host:port"):
        assert "is not host:port" in endpoint_error(bad)
    assert nodes_error("x.", 1, 0, None) is None and nodes_error("x.", 2, 1, "h:1") is None
    assert nodes_error("x.", 2, 0, None) == "x.nnodes is 2 but x.rdzv_endpoint is not set: give node 0's host:port"
    assert nodes_error("x.", 2, 2, "h:1") == "x.node_rank (2) must be smaller than x.nnodes (2)"


@pytest.mark.parametrize(("model", "prefix"), [(Hyperparameters, "hyperparameters."), (FoundationConfig, "foundation.")])
def test_both_engines_refuse_with_their_own_field_names(model, prefix):
    with pytest.raises(ValidationError, match=rf"{prefix}nnodes is 2 but {prefix}rdzv_endpoint is not set"):
        model(nnodes=2)
    with pytest.raises(ValidationError, match=rf"{prefix}node_rank \(3\) must be smaller"):
        model(nnodes=2, node_rank=3, rdzv_endpoint="h:29500")
    with pytest.raises(ValidationError, match="is not host:port"):
        model(nnodes=2, rdzv_endpoint="nohost")
    assert model(nnodes=2, node_rank=1, rdzv_endpoint=" h:29500 ").rdzv_endpoint == "h:29500"


def test_the_settings_are_declared_once_for_both_engines():
    """Both engines' spec blocks and typed stage configs inherit the four fields (bounds, defaults, checks)."""
    from tt_engine_adapter.runtime import config as adapter_config
    from tt_engine_foundation.runtime import config as foundation_config

    names = [f.name for f in dataclasses.fields(DistributedSettings)]
    assert names == list(SpecSettings.model_fields) == ["nproc_per_node", "nnodes", "node_rank", "rdzv_endpoint", "rendezvous"]
    assert issubclass(Hyperparameters, SpecSettings) and issubclass(FoundationConfig, SpecSettings)
    assert issubclass(adapter_config.AdapterSettings, DistributedSettings)
    assert issubclass(foundation_config.FoundationSettings, DistributedSettings)
    assert Hyperparameters(nproc_per_node=2, nnodes=3, node_rank=2, rdzv_endpoint="h:1", batch_size=6).world_size == 6
    assert adapter_config.AdapterSettings(nproc_per_node=4).world_size == 4


def test_doctor_checks_the_world_size_the_same_way_for_both_engines():
    """One world-size check (tt_host.checks.preflight.world_size_check), named after each engine's field."""
    import os
    import shutil

    from tt_host.checks.preflight import world_size_check

    for model, name in ((Hyperparameters, "hyperparameters.nproc_per_node"), (FoundationConfig, "foundation.nproc_per_node")):
        assert world_size_check(name, model(), "cpu").status == "ok"
        two = world_size_check(name, model(nproc_per_node=2, batch_size=8), "cpu")
        assert (two.name, two.status) == (name, "ok") and "gloo on CPU" in two.detail
        assert world_size_check(name, model(nproc_per_node=2, batch_size=8), "mps").status == "fail"
        many = (os.cpu_count() or 1) + 1
        if many <= 64:  # more processes than cores
            assert world_size_check(name, model(nproc_per_node=many, batch_size=8 * many), "cpu").status == "warn"
        if shutil.which("nvidia-smi") is None:  # CUDA asked for on a machine without a GPU
            assert world_size_check(name, model(nproc_per_node=2, batch_size=8), "cuda").status == "fail"
