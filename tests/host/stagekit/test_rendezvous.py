"""`rendezvous`: nnodes, node_rank and rdzv_endpoint read from Slurm or a torchrun/PyTorchJob-style environment
when a training stage starts (tt_stagekit.rendezvous, docs/distributed.md "Launching on a cluster").

Host side, no torch: Slurm's compressed nodelist expanded in stdlib, each mode's variables, the refusals (naming
the variable and the setting, never echoing control characters), "spec" unchanged by any variable, `tt run`'s
refusal before anything is created, the fingerprints untouched, and a one-process stage that never sees an
inherited RANK/WORLD_SIZE (a real stage process through the host's runner)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tt_stagekit.launcher import stage_arguments
from tt_stagekit.rendezvous import RendezvousError, expand_nodelist, resolve

REPO = Path(__file__).resolve().parents[3]
ADAPTER, FOUNDATION = "examples/adapter/tunedtensor.json", "examples/foundation/tunedtensor.json"
SLURM = {"SLURM_NNODES": "4", "SLURM_NODEID": "2", "SLURM_JOB_NODELIST": "gpu[07-09,12]"}
ENV = {"MASTER_ADDR": "trainer-0.svc", "MASTER_PORT": "23456", "NNODES": "3", "NODE_RANK": "1"}
NODE_SETTINGS = {"nproc_per_node": 2, "nnodes": 1, "node_rank": 0, "rdzv_endpoint": None}


@pytest.mark.parametrize("text,hosts", [
    ("node01", ["node01"]),
    ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
    ("a,b[1-2],c", ["a", "b1", "b2", "c"]),
    ("gpu-[9-11]-ib", ["gpu-9-ib", "gpu-10-ib", "gpu-11-ib"]),
    ("n[1-2]x[3,5]", ["n1x3", "n1x5", "n2x3", "n2x5"]),
    ("rack[001-002],login", ["rack001", "rack002", "login"]),
])
def test_slurm_nodelists_expand_in_order_with_their_padding(text, hosts):
    assert expand_nodelist(text) == hosts


@pytest.mark.parametrize("text", ["", "n[1-", "n[]", "n[3-1]", "n[a-b]", "n]1[", "n[1-2000]", "a,,b", "n 1",
                                  "n[1-2]]", "x" * 5000])
def test_malformed_nodelists_are_refused(text):
    with pytest.raises(ValueError):
        expand_nodelist(text)


def test_slurm_reads_the_nodes_the_rank_and_node_zero():
    read = resolve({**NODE_SETTINGS, "rendezvous": "slurm"}, SLURM)
    assert (read["nnodes"], read["node_rank"], read["rdzv_endpoint"]) == (4, 2, "gpu07:29500")
    assert read["nproc_per_node"] == 2  # the spec's: not taken from SLURM_GPUS_ON_NODE or the task count
    other = {"SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "a,b", "MASTER_PORT": "1234",
             "SLURM_GPUS_ON_NODE": "8"}
    read = resolve({**NODE_SETTINGS, "rendezvous": "slurm"}, other)
    assert (read["nnodes"], read["node_rank"], read["rdzv_endpoint"], read["nproc_per_node"]) == (2, 0, "a:1234", 2)


def test_env_reads_master_addr_nnodes_and_node_rank_never_world_size_or_rank():
    read = resolve({**NODE_SETTINGS, "rendezvous": "env"}, ENV)
    assert (read["nnodes"], read["node_rank"], read["rdzv_endpoint"]) == (3, 1, "trainer-0.svc:23456")
    pet = {"MASTER_ADDR": "fd00::7", "PET_NNODES": "2", "PET_NODE_RANK": "1", "WORLD_SIZE": "16", "RANK": "9"}
    read = resolve({**NODE_SETTINGS, "rendezvous": "env"}, pet)
    assert (read["nnodes"], read["node_rank"], read["rdzv_endpoint"]) == (2, 1, "[fd00::7]:29500")
    with pytest.raises(RendezvousError, match="NNODES or PET_NNODES is not set"):
        resolve({**NODE_SETTINGS, "rendezvous": "env"}, {"MASTER_ADDR": "h", "WORLD_SIZE": "4", "RANK": "1"})


@pytest.mark.parametrize("mode,environ,variable,setting", [
    ("slurm", {}, "SLURM_NNODES or SLURM_JOB_NUM_NODES is not set", "nnodes"),
    ("slurm", {**SLURM, "SLURM_NNODES": "+4"}, "SLURM_NNODES is '+4'", "nnodes"),
    ("slurm", {**SLURM, "SLURM_NNODES": "0"}, "SLURM_NNODES is '0'", "nnodes"),
    ("slurm", {**SLURM, "SLURM_NODEID": "4"}, "SLURM_NODEID is '4', not a whole number from 0 to 3", "node_rank"),
    ("slurm", {k: v for k, v in SLURM.items() if k != "SLURM_NODEID"}, "SLURM_NODEID is not set", "node_rank"),
    ("slurm", {**SLURM, "SLURM_JOB_NODELIST": "gpu[07-"}, "SLURM_JOB_NODELIST is 'gpu[07-'", "rdzv_endpoint"),
    ("slurm", {**SLURM, "MASTER_PORT": "70000"}, "MASTER_PORT is '70000'", "rdzv_endpoint's port"),
    ("env", {**ENV, "NNODES": "1:3"}, "NNODES is '1:3'", "nnodes"),  # an elastic range: tt's runs are static
    ("env", {**ENV, "NODE_RANK": " 1"}, "NODE_RANK is ' 1'", "node_rank"),
    ("env", {k: v for k, v in ENV.items() if k != "MASTER_ADDR"}, "MASTER_ADDR is not set", "rdzv_endpoint"),
    ("env", {**ENV, "MASTER_ADDR": "a b"}, "MASTER_ADDR is 'a b'", "rdzv_endpoint"),
])
def test_a_missing_or_malformed_variable_is_refused_naming_it_and_the_setting(mode, environ, variable, setting):
    with pytest.raises(RendezvousError) as caught:
        resolve({**NODE_SETTINGS, "rendezvous": mode}, environ)
    assert variable in str(caught.value) and f'rendezvous "{mode}" reads {setting} from it' in str(caught.value)


def test_control_characters_and_long_values_are_never_echoed():
    for value in ("4\x1b[2J", "h\nFAKE LOG LINE", "9" * 300):
        for mode, environ in (("slurm", {**SLURM, "SLURM_NNODES": value}), ("env", {**ENV, "MASTER_ADDR": value})):
            with pytest.raises(RendezvousError) as caught:
                resolve({**NODE_SETTINGS, "rendezvous": mode}, environ)
            assert value not in str(caught.value) and "\x1b" not in str(caught.value)
            assert "not shown" in str(caught.value)


def test_spec_mode_reads_no_variable_and_builds_todays_arguments(monkeypatch):
    settings = {"nproc_per_node": 2, "nnodes": 2, "node_rank": 1, "rdzv_endpoint": "10.0.0.1:29500"}
    before = stage_arguments(settings, "m")
    for name, value in {**SLURM, **ENV}.items():
        monkeypatch.setenv(name, value)
    assert resolve(settings) == settings == {k: v for k, v in resolve({**settings, "rendezvous": "spec"}).items()
                                             if k != "rendezvous"}
    assert stage_arguments(settings, "m") == stage_arguments({**settings, "rendezvous": "spec"}, "m") == before
    assert before[before.index("--node_rank") + 1] == "1" and "10.0.0.1" in before


def test_the_torchrun_arguments_are_built_from_the_environment_at_launch(monkeypatch):
    for name, value in SLURM.items():
        monkeypatch.setenv(name, value)
    args = stage_arguments({"nproc_per_node": 1, "rendezvous": "slurm"}, "m")
    assert args[:2] == ["-m", "tt_stagekit.launcher"] and args[-2:] == ["-m", "m"]
    assert [args[args.index(o) + 1] for o in ("--nnodes", "--node_rank", "--master_addr", "--master_port")] == \
        ["4", "2", "gpu07", "29500"]
    monkeypatch.setenv("SLURM_NODEID", "3")  # read again at every launch: nothing was frozen
    assert args != (again := stage_arguments({"nproc_per_node": 1, "rendezvous": "slurm"}, "m"))
    assert again[again.index("--node_rank") + 1] == "3"


def _loaded(path: str, overrides: list[str], folder: Path):
    sys.path.insert(0, str(REPO / "tests"))
    from example_copy_support import tracked_copy
    from tt_host.plugins import plugins
    from tt_host.spec.loading import load_spec

    spec = tracked_copy(str(REPO / Path(path).parent), folder / "example") / Path(path).name
    loaded = load_spec(spec, plugins(), overrides=overrides)
    assert not loaded.errors, [str(e) for e in loaded.errors]
    return loaded


@pytest.mark.parametrize("path,block", [(ADAPTER, "hyperparameters"), (FOUNDATION, "foundation")])
def test_the_mode_and_what_it_reads_are_in_no_fingerprint(monkeypatch, path, block):
    from tt_host.runs.fingerprint import chain

    def prints(overrides: list[str]) -> dict[str, str]:
        with tempfile.TemporaryDirectory() as folder:
            loaded = _loaded(path, overrides, Path(folder))
            return {p.stage.name: p.fingerprint for p in chain(loaded.engine, loaded.spec, loaded.compiled)}

    spec = prints([f"{block}.nproc_per_node=2"])
    for name, value in {**SLURM, "SLURM_JOB_NODELIST": "n[1-4]"}.items():
        monkeypatch.setenv(name, value)
    slurm = prints([f"{block}.nproc_per_node=2", f"{block}.rendezvous=slurm"])
    monkeypatch.setenv("SLURM_NODEID", "0")
    assert spec == slurm == prints([f"{block}.nproc_per_node=2", f"{block}.rendezvous=slurm"])


def test_tt_run_refuses_before_creating_anything(monkeypatch, tmp_path):
    from tt_host.plugins import plugins
    from tt_host.runs.drive import execute
    from tt_host.runs.opening import RunRefused

    for name in (*SLURM, "SLURM_JOB_NUM_NODES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_NNODES", "2")
    monkeypatch.setenv("SLURM_NODEID", "1")
    loaded = _loaded(ADAPTER, ["hyperparameters.rendezvous=slurm"], tmp_path)
    folder = loaded.path.parent
    before = sorted(p.name for p in folder.iterdir())
    with pytest.raises(RunRefused) as caught:
        execute(loaded, plugins())
    assert "hyperparameters.rendezvous: SLURM_JOB_NODELIST is not set" in str(caught.value)
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-2]")
    monkeypatch.setenv("SLURM_NNODES", "3")  # batch_size 8 cannot split across 3 nodes: the engine's rule, re-run
    with pytest.raises(RunRefused) as caught:
        execute(loaded, plugins())
    assert "cannot be split evenly across 3 processes" in str(caught.value) and "nnodes 3" in str(caught.value)
    assert sorted(p.name for p in folder.iterdir()) == before


STAGE = ("import json, os; from tt_stagekit import distributed; device = distributed.init('cpu'); "
         "print(json.dumps({'device': device, 'world': distributed.context().world_size, 'left': sorted("
         "k for k in os.environ if k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR') or k.startswith('PET_'))}))")
DRIVER = '''
import json, sys
from pathlib import Path
from tt_host.engines.runner import run_stage
folder, seen = Path(sys.argv[1]), []
outcome = run_stage(Path(sys.executable), ["-c", sys.argv[2]], folder / "request.json", folder, folder / "stage.log",
                    seen.append)
print(json.dumps({"exit_code": outcome.exit_code, "said": [e.get("message") for e in seen]}))
'''


def test_a_one_process_stage_ignores_an_inherited_pytorchjob_rank(tmp_path):
    """A PyTorchJob pod (or an outer torchrun) sets RANK/WORLD_SIZE/LOCAL_RANK/MASTER_*/PET_* for tt itself: a
    one-process stage started by the host's runner must stay world size 1, not wait for 3 peers that never come."""
    inherited = {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1",
                 "PET_NNODES": "4", "PET_RDZV_BACKEND": "c10d", "TORCHELASTIC_RUN_ID": "x"}
    import os

    proc = subprocess.run([sys.executable, "-P", "-c", DRIVER, str(tmp_path), STAGE], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **inherited})
    assert proc.returncode == 0, proc.stderr
    outcome = json.loads(proc.stdout)
    assert outcome["exit_code"] == 0, (outcome, (tmp_path / "stage.log").read_text())
    said = json.loads(outcome["said"][-1])
    assert said == {"device": "cpu", "world": 1, "left": []}
