"""`tt doctor` on a spec with foundation.cpu_bf16: the CPU's bf16 units read from /proc/cpuinfo, before any stage.

The pretrain stage refuses the setting on a CPU without AMX or AVX-512 BF16 (plugins/foundation/tests/
test_cpu_bf16.py); the doctor says so first. The check's verdict on given cpuinfo texts, then the real `tt
doctor` on this machine, whose verdict must agree with this machine's own flags.
"""

from __future__ import annotations

import json
from pathlib import Path

from tt_engine_foundation.doctor import cpu_bf16_check, cpu_bf16_flags
from tt_engine_foundation.spec import FoundationSpec
from example_copy_support import tracked_copy

REPO = Path(__file__).resolve().parents[3]
AMX = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f amx_bf16 amx_tile\n\nprocessor\t: 1\nflags\t\t: fpu avx2 amx_bf16\n"
AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n"


def spec(cpu_bf16: bool) -> FoundationSpec:
    return FoundationSpec.model_validate(
        {"name": "f", "engine": "foundation", "system_prompt": "Answer.",
         "examples": [{"input": "e1", "output": "o1"}, {"input": "e2", "output": "o2"}],
         "foundation": {"cpu_bf16": cpu_bf16}}, context={"spec_dir": str(REPO)})


def test_the_check_reads_the_flags_and_fails_a_cpu_without_bf16_units():
    assert cpu_bf16_flags(AMX) == {"amx_bf16"} and cpu_bf16_flags(AVX2) == set() and cpu_bf16_flags(None) is None
    [ok] = cpu_bf16_check(spec(True), "cpu", AMX)
    assert ok.status == "ok" and "amx_bf16" in ok.detail
    [fail] = cpu_bf16_check(spec(True), "cpu", AVX2)
    assert fail.name == "foundation.cpu_bf16" and fail.status == "fail"
    assert "no native bf16 matrix unit" in fail.detail and fail.hint == "set foundation.cpu_bf16 to false"
    [maybe_gpu] = cpu_bf16_check(spec(True), "auto", AVX2)  # auto might still pick a GPU
    assert maybe_gpu.status == "warn"
    [unknown] = cpu_bf16_check(spec(True), "cpu", None)
    assert unknown.status == "warn"
    assert list(cpu_bf16_check(spec(False), "cpu", AVX2)) == []
    assert list(cpu_bf16_check(spec(True), "cuda", AVX2)) == []


def test_doctor_on_this_machine_agrees_with_its_cpuinfo(tt, tmp_path):
    folder = tmp_path / "project"
    tracked_copy("examples/foundation", folder)
    path = folder / "tunedtensor.json"
    document = json.loads(path.read_text())
    document.setdefault("foundation", {})["cpu_bf16"] = True
    path.write_text(json.dumps(document))
    proc = tt("doctor", path, "--device", "cpu", "--json")
    checks = {check["name"]: check for check in json.loads(proc.stdout)["checks"]}
    native = bool(cpu_bf16_flags(Path("/proc/cpuinfo").read_text()))
    assert checks["foundation.cpu_bf16"]["status"] == ("ok" if native else "fail"), checks["foundation.cpu_bf16"]
