"""`tt models export` and `tt serve` refusals that need no engine environment (fast, host only)."""

from __future__ import annotations

import json
from pathlib import Path


def fake_model(folder: Path) -> Path:
    """A folder that looks like a verified artifact (manifest over one file)."""
    import hashlib

    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    data = (folder / "config.json").read_bytes()
    (folder / "artifact-manifest.json").write_text(json.dumps({
        "format": 1, "kind": "foundation-hf", "engine": "foundation",
        "files": [{"path": "config.json", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}]}))
    return folder


def test_public_bind_without_key_is_refused_before_anything(tt, tmp_path):
    tt.env.pop("TT_API_KEY", None)
    proc = tt("serve", "no-such-model", "--host", "0.0.0.0")
    assert proc.returncode == 2 and "API key" in proc.stderr
    code, out = tt.json("serve", str(tmp_path), "--host", "192.168.1.5")
    assert code == 2 and "API key" in out["error"]["message"]


def test_bad_options_and_unknown_models(tt, tmp_path):
    code, out = tt.json("serve", "no-such-model")
    assert code == 2 and "no registered model" in out["error"]["message"]
    code, out = tt.json("serve", str(tmp_path / "x"), "--max-concurrency", "0")
    assert code == 2 and "max-concurrency" in out["error"]["message"]
    code, out = tt.json("serve", str(tmp_path), "--device", "tpu")
    assert code == 2 and "--device" in out["error"]["message"]
    code, out = tt.json("models", "export", "no-such-model", str(tmp_path / "out"))
    assert code == 2 and "no registered model" in out["error"]["message"] and not (tmp_path / "out").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out = tt.json("models", "export", str(empty), str(tmp_path / "out"))
    assert code == 2 and "not a model folder" in out["error"]["message"]


def test_export_never_overwrites_and_tampering_is_caught(tt, tmp_path):
    model = fake_model(tmp_path / "model")
    taken = tmp_path / "taken"
    taken.mkdir()
    code, out = tt.json("models", "export", str(model), str(taken))
    assert code == 2 and "already exists" in out["error"]["message"]
    code, out = tt.json("models", "export", str(model), str(tmp_path / "new"))
    assert code == 2 and "already a Hugging Face model folder" in out["error"]["message"]
    (model / "config.json").write_text('{"changed": true}')
    code, out = tt.json("models", "export", str(model), str(tmp_path / "new"))
    assert code == 1 and "config.json" in out["error"]["message"] and not (tmp_path / "new").exists()
    code, out = tt.json("serve", str(model))
    assert code == 1 and "config.json" in out["error"]["message"]


def test_formats_and_quants_are_the_model_kinds_declarations(tt, tmp_path):
    model = fake_model(tmp_path / "model")  # foundation-hf: declares no format besides hf
    code, out = tt.json("models", "export", str(model), str(tmp_path / "new"), "--format", "gguf")
    assert code == 2 and "kind 'foundation-hf' exports as hf" in out["error"]["message"] and not (tmp_path / "new").exists()
    code, out = tt.json("models", "export", str(model), str(tmp_path / "new"), "--quant", "q8_0")
    assert code == 2 and "--quant applies to formats that quantize" in out["error"]["message"]
    assert not (tmp_path / "new").exists() and not list(tmp_path.glob(".new*"))


def test_api_key_from_a_file_or_the_environment_not_the_command_line(tt, tmp_path):
    """`--api-key-file` (or TT_API_KEY) satisfies the public-bind check; a key typed on the command line
    (visible in `ps`) is warned about; a missing or empty key file is exit 2 naming the file."""
    tt.env.pop("TT_API_KEY", None)
    key = tmp_path / "key"
    key.write_text("s3cret-key-0123456789\n")
    code, out = tt.json("serve", "no-such-model", "--host", "0.0.0.0", "--api-key-file", str(key))
    assert code == 2 and "no registered model" in out["error"]["message"]  # past the key check: the key was read
    for bad, why in ((tmp_path / "missing", "cannot read"), (tmp_path / "empty", "key alone")):
        if bad.name == "empty":
            bad.write_text("\n")
        code, out = tt.json("serve", "no-such-model", "--host", "0.0.0.0", "--api-key-file", str(bad))
        assert code == 2 and str(bad) in out["error"]["message"] and why in out["error"]["message"], out
    code, out = tt.json("serve", "no-such-model", "--api-key", "k", "--api-key-file", str(key))
    assert code == 2 and "not both" in out["error"]["message"]
    proc = tt("serve", "no-such-model", "--host", "0.0.0.0", "--api-key", "typed-key-0123456789")
    assert proc.returncode == 2 and "visible" in proc.stderr and "no registered model" in proc.stderr
    tt.env["TT_API_KEY"] = "from-env-key-0123456789"
    proc = tt("serve", "no-such-model", "--host", "0.0.0.0")
    assert proc.returncode == 2 and "visible" not in proc.stderr and "no registered model" in proc.stderr


def test_serving_limits_and_names_are_checked(tt, tmp_path):
    for args, named in ((["--allowed-host", "evil.example:80"], "--allowed-host"),
                        (["--allowed-host", "http://x"], "--allowed-host"),
                        (["--default-max-tokens", "0"], "--default-max-tokens"),
                        (["--max-queue", "-1"], "--max-queue"), (["--queue-timeout", "0"], "--queue-timeout"),
                        (["--max-batch-tokens", "0"], "--max-batch-tokens")):
        code, out = tt.json("serve", "no-such-model", *args)
        assert code == 2 and named in out["error"]["message"], out
