"""`tt serve` refuses an API key shorter than 16 characters (exit 2), without printing the key."""

from __future__ import annotations


def test_an_api_key_shorter_than_16_characters_is_refused(tt, tmp_path):
    for key in ("Qz", "fifteen-chars-x"):
        tt.env["TT_API_KEY"] = key
        code, out = tt.json("serve", "no-such-model")
        assert code == 2 and "at least 16" in out["error"]["message"] and key not in out["error"]["message"], out
    tt.env["TT_API_KEY"] = "sixteen-chars-xy"
    code, out = tt.json("serve", "no-such-model")
    assert code == 2 and "no registered model" in out["error"]["message"], out  # past the key check


def test_an_api_key_file_that_is_a_fifo_or_a_link_to_dev_zero_is_refused_at_once(tt, tmp_path):
    """Read through the safe reader: a FIFO never blocks `tt serve`, /dev/zero is never read into memory."""
    import os

    fifo, zero = tmp_path / "key.fifo", tmp_path / "key.txt"
    os.mkfifo(fifo)
    zero.symlink_to("/dev/zero")
    for path, kind in ((fifo, "named pipe"), (zero, "character device")):
        code, out = tt.json("serve", "no-such-model", "--api-key-file", str(path), timeout=60)
        assert code == 2 and str(path) in out["error"]["message"] and kind in out["error"]["message"], out
