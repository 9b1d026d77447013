"""tt_stagekit.files and tt_stagekit.gpus: the one copy of atomic writes, file digests and nvidia-smi parsing."""

from __future__ import annotations

import hashlib
import os
import stat

import pytest

from tt_stagekit import files, gpus


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path):
    target = tmp_path / "a.json"
    files.atomic_write_bytes(target, b"first")
    with pytest.raises(RuntimeError):
        with files.atomic_file(target) as handle:
            handle.write(b"half")
            raise RuntimeError("crash mid-write")
    assert target.read_bytes() == b"first" and [p.name for p in tmp_path.iterdir()] == ["a.json"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    with pytest.raises(FileNotFoundError):
        files.atomic_write_bytes(tmp_path / "missing" / "x", b"", make_parents=False)
    assert not (tmp_path / "missing").exists()
    data = os.urandom(3 << 20)
    target.write_bytes(data)
    assert files.file_sha256(target) == hashlib.sha256(data).hexdigest()


def test_append_line_writes_0600_under_any_umask_and_narrows_a_wider_log(tmp_path):
    log = tmp_path / "logs" / "heartbeat.jsonl"
    umask = os.umask(0)
    try:
        files.append_line(log, '{"step": 1}')
        files.append_line(log, '{"step": 2}\n')
        older = tmp_path / "older.jsonl"  # a log an older tt created with the umask's mode
        older.write_text("old\n")
        older.chmod(0o666)
        files.append_line(older, "new")
    finally:
        os.umask(umask)
    assert log.read_text() == '{"step": 1}\n{"step": 2}\n' and stat.S_IMODE(log.stat().st_mode) == 0o600
    assert older.read_text() == "old\nnew\n" and stat.S_IMODE(older.stat().st_mode) == 0o600
    (tmp_path / "link.jsonl").symlink_to(log)
    with pytest.raises(OSError):  # never through a symbolic link
        files.append_line(tmp_path / "link.jsonl", "x")
    assert log.read_text().count("\n") == 2


def test_host_and_engines_use_the_same_helpers():
    from tt_engine_adapter.formats import fingerprint
    from tt_host import fsutil
    from tt_host.spec import compiler
    from tt_stagekit import chatrows

    assert fsutil.sha256_file is files.file_sha256 is fingerprint.sha256_file
    assert compiler.normalize_prompt is chatrows.normalize_prompt


def _fake_smi(tmp_path, monkeypatch, script: str) -> None:
    exe = tmp_path / "bin" / "nvidia-smi"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_nvidia_gpus_parses_the_query_and_honours_cuda_visible_devices(tmp_path, monkeypatch):
    _fake_smi(tmp_path, monkeypatch, 'echo "NVIDIA H200, 9.0, 570.86"\necho "NVIDIA H200, 9.0, 570.86"\n')
    assert gpus.nvidia_gpus() == [gpus.Gpu("NVIDIA H200", "9.0", "570.86")] * 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert len(gpus.nvidia_gpus() or []) == 1


def test_nvidia_gpus_falls_back_to_the_list_and_reports_a_failure(tmp_path, monkeypatch):
    _fake_smi(tmp_path, monkeypatch, 'case "$1" in -L) echo "GPU 0: Tesla V100 (UUID: GPU-1)";; *) exit 6;; esac\n')
    assert gpus.nvidia_gpus() == [gpus.Gpu("Tesla V100", "", "")]
    (tmp_path / "bin" / "nvidia-smi").write_text("#!/bin/sh\nexit 9\n")
    assert gpus.nvidia_gpus() is None
