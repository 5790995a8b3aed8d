"""The Docs page's work (no Streamlit here): the repository's ``docs/``, where every reference the diagnoser, the CLI
and the charts print points (``docs/FILE.md#anchor``), read back section by section for the dashboard.

Anchors are GitHub's, so the same reference resolves on GitHub and here: the heading's text (links, backticks and
asterisks dropped), lower-cased, every character but letters, digits, spaces, ``-`` and ``_`` dropped, spaces turned
into ``-``; a repeated heading gets ``-1``, ``-2``."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

from grpo_doctor.app import DOCS

PAGE = "docs"  # the Docs page's url_path
FIRST = "troubleshooting.md"  # what the page opens on
REFERENCE = re.compile(r"docs/([a-z0-9][\w.-]*\.md)(?:#([\w-]+))?")  # docs/FILE.md#anchor, as the diagnosis prints
RELATIVE_LINK = re.compile(r"\]\((?!https?:|mailto:)([\w.-]*?\.md)?(?:#([\w-]+))?\)")
HEADING = re.compile(r"(#{1,6})\s+(.*?)\s*#*\s*$")


@dataclass(frozen=True)
class Heading:
    level: int
    title: str
    anchor: str
    line: int  # its line number in the file (0-based)


def anchor(title: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def doc_names() -> list[str]:
    """The docs the page can show (``docs/*.md``), by name; empty where the repository's docs are not installed."""
    return sorted(p.name for p in DOCS.glob("*.md")) if DOCS.is_dir() else []


def read(name: str) -> str | None:
    """A doc's text, only for a name ``doc_names`` lists (nothing else on disk can be reached through the page)."""
    return (DOCS / name).read_text() if name in doc_names() else None


def headings(text: str) -> list[Heading]:
    """Every heading with its anchor (headings inside fenced code blocks are not headings)."""
    seen: dict[str, int] = {}
    found, fenced = [], False
    for i, line in enumerate(text.splitlines()):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        match = None if fenced else HEADING.match(line)
        if match:
            base = anchor(match.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.append(Heading(len(match.group(1)), match.group(2), base if n == 0 else f"{base}-{n}", i))
    return found


def section(text: str, anchor_: str) -> str | None:
    """The section an anchor names: its heading and everything up to the next heading of its level or higher."""
    lines, found = text.splitlines(), headings(text)
    for i, h in enumerate(found):
        if h.anchor == anchor_:
            end = next((later.line for later in found[i + 1:] if later.level <= h.level), len(lines))
            return "\n".join(lines[h.line:end])
    return None


def url(name: str, anchor_: str | None = None) -> str:
    """The Docs page's address for a doc (and a section of it), relative to any page of the dashboard."""
    return f"{PAGE}?" + urlencode({"file": name, **({"section": anchor_} if anchor_ else {})})


def reference_link(ref: str) -> str:
    """A printed reference (``docs/FILE.md#anchor``) as a markdown link to its section on the Docs page; anything
    else as code."""
    match = REFERENCE.fullmatch(ref)
    return f"[{ref}]({url(match.group(1), match.group(2))})" if match else f"`{ref}`"


def with_reference_links(text: str, escape: Callable[[str], str]) -> str:
    """Text for markdown: each reference in it a link (``reference_link``), the rest passed through ``escape``."""
    out, at = [], 0
    for match in REFERENCE.finditer(text):
        out += [escape(text[at:match.start()]), reference_link(match.group(0))]
        at = match.end()
    return "".join(out + [escape(text[at:])])


def for_the_page(markdown: str, name: str) -> str:
    """A doc's markdown with its links between docs (``[x](health-ranges.md#entropy)``, ``[x](#oom)``) pointed at
    the Docs page, so they work inside the dashboard."""
    def relink(m: re.Match) -> str:
        return f"]({url(m.group(1) or name, m.group(2))})"
    return RELATIVE_LINK.sub(relink, markdown)
