"""Every reference GRPO Doctor prints is a link into the repository's own docs that resolves: ``docs/FILE.md#anchor``
in the code (rules, health ranges, fixes, status lines), in ``grpo-doctor diagnose --json`` on every recorded run of
``sample_runs/``, and in the docs and the README themselves; no citation of documents a user does not have remains;
the dashboard shows a reference as a link to that section on its Docs page.

Anchors are GitHub's: the heading's text (link targets, backticks and asterisks dropped), lower-cased, every
character that is not a letter, a digit, a space, ``-`` or ``_`` dropped, spaces turned into ``-``; a repeated
heading gets ``-1``, ``-2``."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest
from support import ROOT

from grpo_doctor.app.dashboard import SCRIPT

DOCS = ROOT / "docs"
#: A link into the docs as the code and the docs write it: ``docs/health-ranges.md#gradient-norm``.
DOCS_LINK = re.compile(r"docs/([a-z0-9][\w.-]*\.md)(?:#([\w-]+))?")  # "docs/FILE.md" is a placeholder
#: A relative markdown link inside docs/: ``[text](troubleshooting.md#oom)``, ``[text](#hidden-nan)``.
RELATIVE_LINK = re.compile(r"\]\((?!https?:|mailto:)([\w./-]*?\.md)?(?:#([\w-]+))?\)")
#: Citations of documents that are not in the repository (the source blog posts by file number, the research notes).
OLD_CITATION = re.compile(r"seed 00\d|SEED_00|REFERENCE §|REFERENCE\.md|REF_TABLE|painpoints|PAINPOINTS|research/"
                          r"|\b00[01] §|\(F\d{1,2}\)|note \d\)|row \d", re.IGNORECASE)
CODE_DIRS = ("app", "diagnostics", "trainer")


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every heading's anchor in a markdown file (headings inside fenced code blocks are not headings)."""
    seen: dict[str, int] = {}
    found, fenced = set(), False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        match = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            base = anchor(match.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return frozenset(found)


def resolves(path: Path, fragment: str | None) -> bool:
    return path.is_file() and (not fragment or fragment in anchors(path))


def section(link: str) -> str:
    """The text of the section a ``docs/FILE.md#anchor`` link points at, up to the next heading of its level or
    higher (for tests that a health range's section says where the range comes from)."""
    match = DOCS_LINK.fullmatch(link)
    assert match and match.group(2), link
    lines, out, level = (DOCS / match.group(1)).read_text().splitlines(), [], None
    for line in lines:
        heading = re.match(r"(#{1,6})\s+(.*)", line)
        if heading and level is not None and len(heading.group(1)) <= level:
            break
        if heading and level is None and anchor(heading.group(2)) == match.group(2):
            level = len(heading.group(1))
        if level is not None:
            out.append(line)
    assert out, link
    return "\n".join(out)


def unresolved(text: str) -> list[str]:
    """The ``docs/FILE.md#anchor`` links in a text that name no file or no heading."""
    return [m.group(0) for m in DOCS_LINK.finditer(text) if not resolves(DOCS / m.group(1), m.group(2))]


def code_files(folder: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


# ---------------------------------------------------------------------------------------- the anchor rule
def test_anchors_are_githubs():
    assert anchor("Gradient norm above `max_grad_norm`") == "gradient-norm-above-max_grad_norm"
    assert anchor("A §2.5 The KL term and its estimators") == "a-25-the-kl-term-and-its-estimators"
    assert anchor("Advantage std ≈ 0") == "advantage-std--0"
    assert anchor("[Loss](x.md) near 0") == "loss-near-0"


#: The docs the diagnoser, the CLI and the charts cite: a repeated heading there would make a printed link ambiguous.
CITED = ("health-ranges.md", "troubleshooting.md", "field-reports.md", "source-mistakes.md", "sources.md")


def test_no_cited_docs_file_repeats_a_heading():
    for path in (DOCS / name for name in CITED):
        headings = [anchor(m) for m in re.findall(r"(?m)^#{1,6}\s+(.*)$", path.read_text())]
        assert len(headings) == len(set(headings)), f"{path.name} repeats a heading: its links would be ambiguous"


# ---------------------------------------------------------------------------------------- links in code and docs
@pytest.mark.parametrize("folder", CODE_DIRS)
def test_every_docs_link_in_the_code_resolves(folder):
    bad = [f"{p.relative_to(ROOT)}: {link}" for p in code_files(folder) for link in unresolved(p.read_text())]
    assert bad == []


def test_every_link_in_the_docs_and_the_readme_resolves():
    bad = []
    for path in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        text = path.read_text()
        bad += [f"{path.name}: {link}" for link in unresolved(text)]
        if path.parent == DOCS:  # relative links between the docs, and to a section of the same file
            for match in RELATIVE_LINK.finditer(text):
                target = (path.parent / match.group(1)).resolve() if match.group(1) else path
                if target.suffix == ".md" and not resolves(target, match.group(2)):
                    bad.append(f"{path.name}: {match.group(0)[2:-1]}")
    assert bad == []


@pytest.mark.parametrize("folder", ["app", "diagnostics", "trainer"])
def test_no_citation_of_documents_a_user_does_not_have(folder):
    bad = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in code_files(folder)
           for n, line in enumerate(p.read_text().splitlines(), 1)
           if OLD_CITATION.search(line)]
    assert bad == []


def test_the_recorded_runs_the_teach_page_shows_cite_only_the_docs():
    """The Teach page shows sample_runs/manifest.json's rows and the fixes tried, as the diagnoser wrote them."""
    manifest = (ROOT / "sample_runs" / "manifest.json").read_text()
    assert OLD_CITATION.findall(manifest) == []
    assert unresolved(manifest) == []


# ---------------------------------------------------------------------------------------- what is printed
def test_every_rule_reference_and_health_source_is_a_docs_link_that_resolves():
    from grpo_doctor.diagnostics.metrics.catalogue import CATALOGUE
    from grpo_doctor.diagnostics.rules import RULES

    for rule in RULES:
        assert rule.references, rule.id
        for ref in rule.references:
            match = DOCS_LINK.fullmatch(ref)
            assert match and match.group(2) and resolves(DOCS / match.group(1), match.group(2)), (rule.id, ref)
    configs = [{}, {"num_generations": 8, "num_iterations": 1}, {"num_iterations": 4, "scale_rewards": "none"},
               {"advantage": "grpo", "group_by": "prompt", "num_generations": 16, "scale_rewards": "group"}]
    for metric in CATALOGUE:
        for config in configs:
            band = metric.health(config)
            if band is not None:
                match = DOCS_LINK.fullmatch(band.source)
                assert match and match.group(2) and resolves(DOCS / match.group(1), match.group(2)), \
                    (metric.name, band.source)


def test_every_reference_diagnose_json_prints_on_the_sample_runs_resolves(tmp_path, capsys, monkeypatch):
    from grpo_doctor.app.cli.main import main

    monkeypatch.delenv("GRPO_DOCTOR_DB", raising=False)
    logs = sorted((ROOT / "sample_runs").glob("*.jsonl"))
    assert len(logs) >= 10
    printed = set()
    for n, log in enumerate(logs):
        main(["--db", str(tmp_path / f"{n}.db"), "diagnose", str(log), "--json"])
        out = capsys.readouterr().out
        data = json.loads(out)
        for finding in data["findings"] + data["expected"]:
            assert finding["references"], (log.name, finding["rule"])
            printed.update(finding["references"])
        for row in data["health"]:
            if row["range"] is not None:
                assert DOCS_LINK.fullmatch(row["range"]["source"]), (log.name, row["metric"])
        printed.update(m.group(0) for m in DOCS_LINK.finditer(out))
        assert not OLD_CITATION.search(out), log.name
    assert len(printed) >= 10
    assert [link for link in sorted(printed) if unresolved(link)] == []


def test_the_text_report_names_a_file_once():
    from grpo_doctor.diagnostics.report.render import references_text

    refs = ["docs/troubleshooting.md#kl-blow-up", "docs/field-reports.md#sudden-collapse",
            "docs/field-reports.md#early-kl-rise"]
    assert references_text(refs) == ("docs/troubleshooting.md#kl-blow-up; docs/field-reports.md#sudden-collapse, "
                                     "#early-kl-rise")


def test_a_health_ranges_section_says_where_its_range_comes_from():
    from grpo_doctor.diagnostics.metrics.catalogue import health

    assert "source doc B §3.2" in section(health("grad_norm").source)
    assert "source doc A §2.5" in section(health("kl").source)
    entropy = section(health("entropy").source)
    assert "never marks a run unhealthy on its own" in entropy and "run's own start" in entropy
    bound = section(health("advantage/abs_max", {"num_generations": 8, "scale_rewards": "group"}).source)
    assert "(G − 1)/√G" in bound and "source-mistakes.md#the-advantage-bound-is-far-below-100" in bound


# ---------------------------------------------------------------------------------------- the dashboard
def test_a_reference_is_a_link_to_its_section_on_the_docs_page():
    from grpo_doctor.app.dashboard.doc_sections import reference_link
    from grpo_doctor.app.dashboard.run_page import _md

    assert reference_link("docs/troubleshooting.md#kl-blow-up") == \
        "[docs/troubleshooting.md#kl-blow-up](docs?file=troubleshooting.md&section=kl-blow-up)"
    assert reference_link("docs/field-reports.md") == "[docs/field-reports.md](docs?file=field-reports.md)"
    assert reference_link("not a docs path") == "`not a docs path`"
    # a status line: its text escaped for markdown, its references links
    assert _md("grad_norm out of range (docs/health-ranges.md#gradient-norm), *not* judged") == (
        "grad\\_norm out of range ([docs/health-ranges.md#gradient-norm](docs?file=health-ranges.md"
        "&section=gradient-norm)), \\*not\\* judged")


def test_the_run_page_shows_a_findings_references_as_links(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from grpo_doctor.diagnostics.store import RunStore

    path = str(tmp_path / "kl.db")
    with RunStore(path) as store:
        run = store.create_run("klrun", config={"beta": 0.04, "num_generations": 8}, source="jsonl",
                               status="finished")
        store.write_steps(run, ((step, {"kl": 0.0 if step == 1 else (0.02 if step < 8 else 0.02 * 1.5 ** (step - 7)),
                                        "reward": 0.5, "grad_norm": 0.5, "loss": 0.1}) for step in range(1, 41)))
    monkeypatch.setenv("GRPO_DOCTOR_DB", path)
    at = AppTest.from_file(str(SCRIPT), default_timeout=60).run()
    at.query_params["run"] = str(run)
    at.switch_page("app_pages/run.py").run()
    assert not at.exception
    (finding,) = [e for e in at.expander if "KL to the reference is blowing up" in e.label]
    text = "\n".join(m.value for m in finding.markdown)
    assert "[docs/troubleshooting.md#kl-blow-up](docs?file=troubleshooting.md&section=kl-blow-up)" in text
    assert "[docs/field-reports.md#sudden-collapse](docs?file=field-reports.md&section=sudden-collapse)" in text
    (notes,) = [e for e in at.expander if e.label.startswith("Expected behaviour")]
    assert "(docs?file=field-reports.md&section=kl-0-at-step-1)" in "\n".join(m.value for m in notes.markdown)


@pytest.mark.parametrize("link", ["docs/health-ranges.md#entropy", "docs/sources.md#a-25-the-kl-term-and-its-estimators",
                                  "docs/field-reports.md#gradient-norm-above-max_grad_norm"])
def test_the_docs_page_opens_the_section_a_reference_names(link):
    """What a reference links to on the dashboard: that section (its heading first, nothing of the next section of
    its level), with the whole document folded below it."""
    from streamlit.testing.v1 import AppTest

    from grpo_doctor.app.dashboard.doc_sections import reference_link

    target = reference_link(link).split("](")[1].rstrip(")")
    query = dict(pair.split("=") for pair in target.partition("?")[2].split("&"))
    at = AppTest.from_file(str(SCRIPT), default_timeout=60).run()
    for key, value in query.items():
        at.query_params[key] = value
    at.switch_page("app_pages/docs.py").run()
    assert not at.exception
    shown = at.markdown[0].value
    expected = section(link)
    assert shown.splitlines()[0] == expected.splitlines()[0]
    assert len(shown.rstrip().splitlines()) == len(expected.rstrip().splitlines())
    assert [e.label for e in at.expander] == [f"The whole of {query['file']}"]


def test_the_docs_page_refuses_a_file_outside_docs_in_one_line():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(SCRIPT), default_timeout=60).run()
    at.query_params["file"] = "../pyproject.toml"
    at.switch_page("app_pages/docs.py").run()
    assert not at.exception
    assert [w.value for w in at.warning] == ["There is no doc named '../pyproject.toml'; showing troubleshooting.md."]
    assert "pyproject" not in "\n".join(m.value for m in at.markdown)
