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
