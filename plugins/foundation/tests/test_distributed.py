"""Distributed building blocks: the shard plan, the torchrun arguments and the exit codes through torchrun.

The spec's bounds are checked through `tt validate` (tests/e2e/test_foundation_inputs.py).

The real 2-process gloo runs are end-to-end tests (tests/e2e/test_distributed_foundation.py); here two
ranks that only exit (or wait until torchrun stops them) show how the launcher maps their exit codes.
"""

from __future__ import annotations

import pytest
from tt_stagekit.launcher import stage_arguments, torchrun_arguments
from tt_engine_foundation.runtime.sharding import shard_plan, split_error
from tt_stagekit.protocol import InvalidInput


@pytest.mark.parametrize("batch, accum, world", [(8, 1, 2), (8, 2, 4), (3, 4, 2), (6, 3, 3), (4, 4, 4), (5, 1, 1)])
def test_ranks_cover_the_single_process_batch_exactly_once(batch, accum, world):
    start = 1000
    single = list(range(start, start + batch * accum))
    seen = []
    for rank in range(world):
        plan = shard_plan(batch, accum, world, rank)
        assert plan.micro_batch * plan.micro_steps * world == batch * accum
        for micro in range(plan.micro_steps):
            first = plan.start(start, micro)
            seen.extend(range(first, first + plan.micro_batch))
    assert sorted(seen) == single


def test_uneven_split_is_refused_naming_the_fields():
    assert split_error(8, 1, 2) is None and split_error(3, 4, 2) is None
    with pytest.raises(InvalidInput, match="foundation.batch_size .* foundation.gradient_accumulation_steps"):
        shard_plan(3, 3, 2, 0)


def test_launch_arguments():
    module = "tt_engine_foundation.stages.pretrain"
    assert stage_arguments({"nproc_per_node": 1}, module) == ["-m", module]
    single = stage_arguments({"nproc_per_node": 2}, module)
    assert single[:2] == ["-m", "tt_stagekit.launcher"] and single[-2:] == ["-m", module]
    assert "--standalone" in single and single[single.index("--nproc_per_node") + 1] == "2"
    multi = torchrun_arguments({"nproc_per_node": 4, "nnodes": 2, "node_rank": 1, "rdzv_endpoint": "node0:29501"})
    assert multi[:10] == ["--nnodes", "2", "--node_rank", "1", "--master_addr", "node0", "--master_port", "29501",
                          "--nproc_per_node", "4"]
    assert "--standalone" not in multi


@pytest.mark.parametrize("rank_exit, stage_exit, rank_1", [(2, 2, "exits"), (3, 1, "exits"), (2, 2, "is stopped")])
def test_a_refusal_exits_2_through_torchrun(tmp_path, rank_exit, stage_exit, rank_1):
    """Two real ranks under the torchrun launcher: rank 0 exits `rank_exit`, and rank 1 exits the same way or
    is still starting when torchrun stops it (it waits for a signal, so torchrun's SIGTERM ends it, as it ends
    a rank still importing torch when another one refused its input). Invalid input (2) is still exit 2 either
    way (torchrun alone turns every failure into 1, and lists the rank it stopped among the failures); any
    other failure is 1."""
    import os
    import subprocess
    import sys

    wait = "    signal.pause()\n" if rank_1 == "is stopped" else f"    sys.exit({rank_exit})\n"
    (tmp_path / "refusing_stage.py").write_text(
        f"import os, signal, sys\nif os.environ['RANK'] == '1':\n{wait}sys.exit({rank_exit})\n")
    args = stage_arguments({"nproc_per_node": 2}, "refusing_stage")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TT_")}
    done = subprocess.run([sys.executable, *args], cwd=tmp_path, env=dict(env, PYTHONPATH=str(tmp_path)),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == stage_exit, done.stdout[-2000:] + done.stderr[-2000:]
    assert "was killed by" not in done.stdout, done.stdout[-2000:]


def test_two_nodes_meet_at_the_rendezvous_read_from_slurm(tmp_path, monkeypatch):
    """`rendezvous: "slurm"` end to end through torchrun: two launchers on this machine, each with its own
    SLURM_NODEID and the same SLURM_JOB_NODELIST (node 0 first), build their arguments from the environment as
    the host does at launch and meet at the static rendezvous: every rank learns its place (rank = node_rank ×
    nproc_per_node + local rank, world size 2)."""
    import json
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (tmp_path / "placed_stage.py").write_text(
        "import json, os, pathlib\n"
        "place = {k: os.environ[k] for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT')}\n"
        "pathlib.Path(os.environ['PLACED'], os.environ['RANK']).write_text(json.dumps(place))\n")
    slurm = {"SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "127.0.0.1,127.0.0.2", "MASTER_PORT": str(port)}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TT_", "SLURM_", "MASTER_"))}
    env.update(PYTHONPATH=str(tmp_path), PLACED=str(tmp_path))
    launchers = []
    for node in (1, 0):
        for name, value in {**slurm, "SLURM_NODEID": str(node)}.items():
            monkeypatch.setenv(name, value)
        args = stage_arguments({"nproc_per_node": 1, "rendezvous": "slurm"}, "placed_stage")
        assert args[args.index("--node_rank") + 1] == str(node) and "--standalone" not in args
        launchers.append(subprocess.Popen([sys.executable, *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
    for launcher in launchers:
        out, _ = launcher.communicate(timeout=300)
        assert launcher.returncode == 0, out[-3000:]
    placed = {rank: json.loads((tmp_path / rank).read_text()) for rank in ("0", "1")}
    assert {r: (p["WORLD_SIZE"], p["LOCAL_RANK"], p["MASTER_ADDR"], p["MASTER_PORT"]) for r, p in placed.items()} == \
        {"0": ("2", "0", "127.0.0.1", str(port)), "1": ("2", "0", "127.0.0.1", str(port))}
