"""A `tt serve` log line (and the ready line's model name) is shown as text, never read as rich markup.
(A spec name's escape sequences: tests/host/spec/test_blank_text.py.)"""

from __future__ import annotations


def test_a_serve_log_line_with_markup_is_shown_as_written(capsys):
    from tt_host.cli.serve import show_event

    for level in ("error", "warning", "info"):
        show_event({"type": "log", "level": level, "message": f"{level}: bad tag [/x] and [bold]kept[/bold]"})
    show_event({"type": "ready", "model": "m[/y]", "url": "http://127.0.0.1:1", "context_length": 8,
                "device": "cpu"})
    captured = capsys.readouterr()
    for level in ("error", "warning", "info"):
        assert f"{level}: bad tag [/x] and [bold]kept[/bold]" in captured.err, captured.err
    assert "m[/y]" in captured.out, captured.out
