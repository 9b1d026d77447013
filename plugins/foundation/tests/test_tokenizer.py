"""Item 6: lossless round trip on mixed scripts, emoji, code and whitespace; byte lengths; determinism."""

from tt_engine_foundation.runtime import tokenizer as T

SAMPLES = [
    "plain ASCII text, with punctuation!?",
    "Ünïcödé café naïve — “quotes” ‘single’ … ½ ∑ ∞",
    "Русский текст, ελληνικά, עברית, العربية, हिन्दी, 中文字符, 日本語のテキスト, 한국어",
    "emoji 🎉🚀👩‍👩‍👧‍👦 🇫🇷 👍🏽 and ZWJ\u200d joiners",
    "def f(x):\n\treturn {'k': [x ** 2 for _ in range(3)]}  # code\r\n",
    "   leading and trailing spaces   \n\n\n\t\t\v\f mixed whitespace \u00a0\u2003\u3000",
    "e\u0301 vs é (combining vs precomposed), \ufeffBOM, \x00 nul, \x7f del",
    "<|bos|> <|assistant_end|> literal special-token text stays text",
    "",
    "12345678901234567890 3.14159 -42 1e-9",
]


def _train():
    texts = SAMPLES * 20 + ["the quick brown fox jumps over the lazy dog " * 50]
    return T.train(iter(texts), 400)


def test_round_trip_is_exact():
    tok = _train()
    for text in SAMPLES + ["".join(SAMPLES), "never seen: Ꭰ𐌰𝔘 ⌘ 🦀 \U0010ffff"]:
        ids = T.encode(tok, text)
        assert T.decode(tok, ids) == text


def test_token_bytes_sum_to_utf8_length_and_specials_are_zero():
    tok = _train()
    table = T.token_bytes(tok)
    for text in SAMPLES:
        ids = T.encode(tok, text)
        assert sum(table[i] for i in ids) == len(text.encode("utf-8"))
        assert b"".join(T.token_raw_bytes(tok, i) for i in ids) == text.encode("utf-8")
    for special in T.SPECIAL_TOKENS:
        assert table[T.special_id(tok, special)] == 0


def test_literal_special_text_is_not_a_special_token():
    tok = _train()
    specials = {T.special_id(tok, s) for s in T.SPECIAL_TOKENS}
    assert not specials & set(T.encode(tok, "<|bos|><|assistant_end|>"))


def test_training_is_deterministic_and_saved_loads(tmp_path):
    a, b = _train(), _train()
    assert a.to_str() == b.to_str()
    path = tmp_path / "tokenizer.json"
    a.save(str(path))
    loaded = T.load(path)
    assert T.encode(loaded, SAMPLES[3]) == T.encode(a, SAMPLES[3])
    assert loaded.encode_special_tokens
