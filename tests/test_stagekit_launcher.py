"""Multi-node settings are checked once (tt_stagekit.launcher) and refused the same way by both engines' specs."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tt_engine_adapter.spec import Hyperparameters
from tt_engine_foundation.spec import FoundationConfig
from tt_stagekit.launcher import endpoint_error, nodes_error


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
