"""One list of names per variant family: the config's choices, grpo_math's name → function table, the ``### ``
headings of docs/variants.md and the dashboard's new-run form all agree, in the same order; and every
``docs/variants.md#anchor`` the trainer points to exists."""

import ast
import io
import re
import tokenize

import pytest
from support import ROOT

from grpo_doctor.trainer import config, variant_names
from grpo_doctor.trainer import grpo_math as gm

DOC = ROOT / "docs" / "variants.md"
TABLES = {"advantage": gm.ADVANTAGES, "scale_rewards": gm.SCALE_REWARDS, "group_by": gm.GROUP_BY,
          "loss_type": gm.LOSS_TYPES, "kl_estimator": gm.KL_ESTIMATORS}


def doc_sections() -> dict[str, tuple[str, ...]]:
    """config field → the ``### `` headings of the ``## `` section whose text says "Option: `field`"."""
    sections = {}
    for block in re.split(r"^## ", DOC.read_text(), flags=re.M)[1:]:
        option = re.search(r"^Option: `(\w+)`", block, flags=re.M)
        if option:
            sections[option.group(1)] = tuple(re.findall(r"^### (\S+)\s*$", block, flags=re.M))
    return sections


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation (all but - and _) dropped, spaces → '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def doc_anchors() -> set[str]:
    anchors, seen = set(), {}
    for heading in re.findall(r"^#{1,6} (.+)$", DOC.read_text(), flags=re.M):
        base = github_anchor(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        anchors.add(base if n == 0 else f"{base}-{n}")  # GitHub numbers repeated headings: grpo, grpo-1
    return anchors


def form_options() -> dict[str, list[str]]:
    from streamlit.testing.v1 import AppTest

    def page():
        from grpo_doctor.app.dashboard.run_form import new_run_form
        new_run_form()

    at = AppTest.from_function(page, default_timeout=60).run()
    assert not at.exception, at.exception
    return {box.label: list(box.options) for box in at.selectbox}


def test_every_family_has_a_table_a_config_choice_and_a_doc_section():
    assert set(TABLES) == set(variant_names.BY_FIELD) == set(doc_sections())
    assert all(field in config.CHOICES and field in config.FIELDS for field in TABLES)


@pytest.mark.parametrize("field", list(TABLES))
def test_config_choices_table_keys_and_doc_headings_are_one_list(field):
    names = variant_names.BY_FIELD[field]
    assert config.CHOICES[field] == names
    assert tuple(TABLES[field]) == names
    assert doc_sections()[field] == names
    assert config.FIELDS[field].default in names


def test_the_new_run_form_offers_the_same_names():
    options = form_options()
    for field, names in variant_names.BY_FIELD.items():
        assert options[field] == list(names), field


def test_every_link_into_the_variants_doc_resolves():
    anchors = doc_anchors()
    sources = [*sorted((ROOT / "trainer").glob("*.py")), DOC]
    links = [(path.name, anchor) for path in sources
             for anchor in re.findall(r"(?:docs/variants\.md|\]\()#([\w\-]+)", path.read_text())]
    assert links  # the trainer does point into the doc
    assert [link for link in links if link[1] not in anchors] == []


CITATION = re.compile(r"seed 00\d|REFERENCE(\.md)? *§|painpoints|trl\.md|shared/|seeds/", re.I)


def comments_and_docstrings(source: str) -> list[str]:
    texts = [tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            texts.append(ast.get_docstring(node) or "")
    return texts


@pytest.mark.parametrize("path", sorted((ROOT / "trainer").glob("*.py")), ids=lambda p: p.name)
def test_trainer_comments_cite_nothing_outside_the_repository(path):
    """A comment points to docs/ in the repository (or says its reason), never to documents a user does not have."""
    source = path.read_text()
    texts = comments_and_docstrings(source)
    if path.name == "config.py":  # the option help shown by --help and the dashboard
        texts += [f.metadata.get("help", "") for f in config.FIELDS.values()]
    assert [t for t in texts if CITATION.search(t)] == []
