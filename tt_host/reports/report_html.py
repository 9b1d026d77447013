"""report.html: report.md as one self-contained page (no external file, font, script or style sheet).

The page is made from report.md itself, so both say the same: its headings, bullet lines, tables and
paragraphs (the small Markdown subset tt_host.reports.report writes) become HTML, and each chart image
(`![name](report-x.svg)`) becomes that SVG inline. Every text is escaped (a text report.md already escaped
is unescaped first, never escaped twice), so a prompt or an answer can never add markup to the page.
"""

from __future__ import annotations

import html
import re

STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
         "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .5em;"
         "vertical-align:top;text-align:left}th{background:#f4f4f4}p.verdict{font-size:1.15em}"
         "code{background:#f4f4f4;padding:0 .2em}svg{display:block;margin:.5em 0}")
_IMAGE = re.compile(r"^!\[(.*)\]\((.+)\)$")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


def _inline(text: str) -> str:
    """Escaped text with **bold** and `code` made into tags."""
    out = html.escape(html.unescape(text), quote=False)
    out = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", out)


def _cells(line: str) -> list[str]:
    return [cell.strip().replace("\\|", "|") for cell in _CELL_SPLIT.split(line.strip())[1:-1]]


def _table(rows: list[str]) -> list[str]:
    out = ["<table>"]
    body = [r for r in rows if not re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", r.strip())]
    for number, row in enumerate(body):
        tag = "th" if number == 0 else "td"
        out.append("<tr>" + "".join(f"<{tag}>{_inline(cell)}</{tag}>" for cell in _cells(row)) + "</tr>")
    return out + ["</table>"]


def render_html(markdown: str, svgs: dict[str, str], title: str) -> str:
    """The page for report.md text; `svgs` maps each chart file name to its SVG text."""
    body: list[str] = []
    table: list[str] = []
    items: list[str] = []

    def flush() -> None:
        if table:
            body.extend(_table(table))
            table.clear()
        if items:
            body.extend(["<ul>"] + [f"<li>{_inline(i)}</li>" for i in items] + ["</ul>"])
            items.clear()

    for line in markdown.splitlines():
        stripped = line.strip()
        if stripped.startswith("|"):
            if items:
                flush()
            table.append(stripped)
            continue
        if stripped.startswith("- "):
            if table:
                flush()
            items.append(stripped[2:])
            continue
        flush()
        image = _IMAGE.match(stripped)
        if not stripped:
            continue
        if image and image.group(2) in svgs:
            body.append(f'<figure>{svgs[image.group(2)]}</figure>')
        elif stripped.startswith("## "):
            body.append(f"<h2>{_inline(stripped[3:])}</h2>")
        elif stripped.startswith("# "):
            body.append(f"<h1>{_inline(stripped[2:])}</h1>")
        elif stripped.startswith("**") and stripped.endswith("**") and not body[1:]:
            body.append(f'<p class="verdict">{_inline(stripped)}</p>')
        else:
            body.append(f"<p>{_inline(stripped)}</p>")
    flush()
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")
