"""Guards on the code's shape, so that the next engineer keeps it: every dashboard page has an AppTest, every
diagnoser rule a fixture, no function over 80 lines and no module over 500 (in ``app/``, ``trainer/``,
``diagnostics/``), and one meaning per name where two meanings once lived side by side."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from support import ROOT

TESTS = ROOT / "tests"
PAGES = ROOT / "app" / "dashboard" / "app_pages"
PACKAGES = ("app", "trainer", "diagnostics")
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 500


def _sources(folders) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def _functions(path: Path):
    """``(name, first line, lines)`` of every function in a module, nested ones and methods included (a
    decorator counts as part of its function)."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            yield node.name, start, node.end_lineno - start + 1


# ------------------------------------------------------------------------------------- pages and rules
def app_test_sources() -> list[str]:
    """The test modules that drive the dashboard with Streamlit's AppTest."""
    return [p.read_text() for p in sorted(TESTS.rglob("test_*.py")) if "AppTest" in p.read_text()]


def page_is_tested(page: str, sources: list[str]) -> bool:
    """An AppTest opens the page: by its path (``app_pages/<page>.py``), through test_app's ``open_page("<page>")``,
    or as one of the pages a test parametrises over (``@pytest.mark.parametrize("page", [..., "<page>", ...])``)."""
    quoted = re.escape(f'"{page}"')
    patterns = (re.escape(f"app_pages/{page}.py"), rf"open_page\(\s*{quoted}",
                rf'parametrize\(\s*"page"\s*,\s*\[[^\]]*{quoted}')
    return any(re.search(p, source) for p in patterns for source in sources)


def test_the_page_check_sees_a_test_and_misses_a_page_without_one():
    sources = ['at.switch_page("app_pages/teach.py").run()', 'open_page("samples", 1)',
               '@pytest.mark.parametrize("page", ["run", "compare"])']
    assert all(page_is_tested(p, sources) for p in ("teach", "samples", "run", "compare"))
    assert not any(page_is_tested(p, sources) for p in ("runs", "import_log", "new_page"))


@pytest.mark.parametrize("page", sorted(p.stem for p in PAGES.glob("*.py") if p.stem != "__init__"))
def test_every_page_has_an_app_test(page):
    assert page_is_tested(page, app_test_sources()), (
        f"app/dashboard/app_pages/{page}.py has no AppTest: open it in tests/unit/app/test_app.py "
        f"(open_page({page!r}, ...)), and add it to test_pages_on_an_empty_store if it reads runs")


def test_every_rule_has_a_fixture_is_guarded_in_test_rules():
    """The guard itself lives beside the fixtures (``tests/unit/diagnostics/test_rules.py``): every rule id in
    ``diagnostics.rules.RULES`` is expected by some ``Fixture``. Here: that guard is still there."""
    tree = ast.parse((TESTS / "unit" / "diagnostics" / "test_rules.py").read_text())
    guard = next((f for f in tree.body if isinstance(f, ast.FunctionDef)
                  and f.name == "test_every_rule_is_exercised_by_a_fixture"), None)
    assert guard is not None, "tests/unit/diagnostics/test_rules.py lost test_every_rule_is_exercised_by_a_fixture"
    text = ast.unparse(guard)
    assert "RULES" in text and "FIXTURES" in text


# ------------------------------------------------------------------------------------- sizes
def oversized() -> list[str]:
    """Every function over ``MAX_FUNCTION_LINES`` lines and every module over ``MAX_MODULE_LINES`` lines."""
    found = []
    for path in _sources(PACKAGES):
        where = path.relative_to(ROOT)
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{where}: {lines} lines")
        found += [f"{where}:{start} {name}: {n} lines" for name, start, n in _functions(path)
                  if n > MAX_FUNCTION_LINES]
    return found


def test_no_function_over_80_lines_and_no_module_over_500():
    found = oversized()
    assert not found, "split these by role:\n" + "\n".join(found)


def test_the_cli_is_a_table_of_small_commands():
    """The command line split by role: ``app/cli/main.py`` keeps the table, the parser and the error handling."""
    assert len((ROOT / "app" / "cli" / "main.py").read_text().splitlines()) <= MAX_MODULE_LINES
    for path in sorted((ROOT / "app" / "cli").glob("*.py")):
        assert all(n <= MAX_FUNCTION_LINES for _, _, n in _functions(path)), path.name


# ------------------------------------------------------------------------------------- one meaning per name
def _definitions(pattern: str) -> list[str]:
    """The module of every line in the packages that matches ``pattern`` (a definition), once per line."""
    regex = re.compile(pattern)
    return [str(p.relative_to(ROOT)) for p in _sources(PACKAGES) for line in p.read_text().splitlines()
            if regex.match(line)]


def test_one_number_formatter():
    """Numbers for people are written by ``diagnostics.formatting.number`` alone (the CLI, the reports, the fixes,
    the dashboard), not by look-alikes that differ in their digits and their ``.0``."""
    from grpo_doctor.diagnostics import fixes, formatting
    from grpo_doctor.diagnostics.report import render

    assert _definitions(r"\s*def (number|value_text|fmt|_num)\(") == ["diagnostics/formatting.py"]
    assert render.number is formatting.number
    assert fixes.text(0.04) == formatting.number(0.04, 6) and fixes.text([1.0, 2]) == "1.0 2"
    assert [formatting.number(x) for x in (2.0, 0.123456, 1e-6, float("nan"), -float("inf"), 3, None)] == [
        "2.0", "0.1235", "1e-06", "NaN", "-inf", "3", "–"]


def test_one_meaning_per_name():
    assert _definitions(r"\s*PARTING_METRICS\b") == ["diagnostics/report/parting.py"]  # the Compare page's first charts
    assert _definitions(r"\s*class LaunchError\b") == ["app/launch/processes.py"]  # a refused launch
    assert _definitions(r"\s*class WorldSizeError\b") == ["trainer/distributed.py"]  # processes ≠ WORLD_SIZE
    assert _definitions(r"\s*class (View|RunTick)\b") == ["app/dashboard/run_tick.py"]  # one refresh of the Run page



def test_each_concept_is_defined_once():
    """What was written twice or three times before the regrouping: the robust-σ constant, the band test and the band
    text (``HealthRange.outside``/``status``/``bounds_text``), the early baseline."""
    assert _definitions(r"\s*MAD_TO_SIGMA\s*=") == ["diagnostics/metrics/rolling.py"]
    assert _definitions(r"\s*def (outside|_outside_value|_range|bounds_text|range_text)\(") == [
        "diagnostics/metrics/catalogue.py", "diagnostics/metrics/catalogue.py", "diagnostics/report/metric_text.py"]
    assert _definitions(r"\s*def baseline\(") == ["diagnostics/metrics/baseline.py"]
    assert _definitions(r".*[<>]=? *[\w.]+ *[-+] *1e-12") == []  # the band's tolerance: catalogue.TOLERANCE


# ------------------------------------------------------------------------------------- one import package
def _packages_in_pyproject() -> set[str]:
    import tomllib

    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])


def test_every_package_folder_is_installed_under_grpo_doctor():
    """pyproject.toml lists each package; a new folder with an ``__init__.py`` missing there would be left out of the
    wheel."""
    folders = {"grpo_doctor." + ".".join(p.parent.relative_to(ROOT).parts)
               for top in PACKAGES for p in (ROOT / top).rglob("__init__.py")}
    assert folders | {"grpo_doctor", "grpo_doctor.docs", "grpo_doctor.sample_runs"} == _packages_in_pyproject()


#: An import of the old top-level names (``app``, ``trainer``, ``diagnostics``), in code or in a string of code.
OLD_IMPORT = re.compile(r"(?:^\s*|[;\"'(]\s*)(?:from (?:app|trainer|diagnostics)[. ]"
                        r"|import (?:app|trainer|diagnostics)\b)|-m (?:app|trainer)\b")


@pytest.mark.parametrize("folder", [*PACKAGES, "tests", "benchmarks", "docs", "grpo_doctor"])
def test_nothing_imports_the_old_top_level_names(folder):
    """Every module is ``grpo_doctor.<part>...``: code, the code strings tests run in subprocesses, the docs' examples
    and the benchmark scripts (from the repository root, ``import trainer`` would still work, and hide the mistake)."""
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in sorted((ROOT / folder).rglob("*"))
             if p.suffix in (".py", ".md", ".sh") and "data" not in p.relative_to(ROOT).parts
             for n, line in enumerate(p.read_text().splitlines(), 1) if OLD_IMPORT.search(line)]
    assert not found, "\n".join(found)


def test_the_long_files_run_first_and_exist(request):
    """conftest's LONG_FILES names test files that exist (a renamed one would fall back to collection order)."""
    conftest = next(p for p in request.config.pluginmanager.get_plugins()
                    if getattr(p, "__file__", None) == str(TESTS / "conftest.py"))
    long_files = conftest.LONG_FILES
    missing = [name for name in long_files if not (TESTS / name).is_file()]
    assert not missing, f"tests/conftest.py LONG_FILES names files that are gone: {missing}"
    files = list(dict.fromkeys(item.path for item in request.session.items))
    first = [TESTS / name for name in long_files if TESTS / name in files]  # those collected, in LONG_FILES' order
    assert files[:len(first)] == first
