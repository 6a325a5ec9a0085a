"""Every example in the documentation and the README is checked here."""

from __future__ import annotations

import doctest
import json
import re
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core import checks

from django_posixcron.declarations import collect

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def code_blocks(path: Path, language: str) -> list[str]:
    """Return the bodies of the ``.. code-block:: <language>`` directives in an rst file."""
    blocks = []
    lines = path.read_text().splitlines()
    for index, line in enumerate(lines):
        if line.strip() != f".. code-block:: {language}":
            continue
        body = []
        for following in lines[index + 1 :]:
            if following.strip() and not following.startswith((" ", "\t")):
                break
            body.append(following)
        blocks.append(textwrap.dedent("\n".join(body)).strip("\n"))
    return blocks


def quickstart_namespace() -> dict[str, object]:
    """Execute the quickstart's Python blocks, in order, in one settings-like namespace."""
    # What the top of a settings module made by startproject defines, and the blocks use.
    namespace: dict[str, object] = {"BASE_DIR": Path("/srv/mysite")}
    for block in code_blocks(DOCS / "quickstart.rst", "python"):
        if "def " in block:
            continue  # the task module, executed by quickstart_task_module
        exec(compile(block, "quickstart.rst", "exec"), namespace)
    return namespace


@pytest.fixture
def quickstart_task_module() -> Iterator[types.ModuleType]:
    """Make the quickstart's task module importable as the dotted path its settings name."""
    (source,) = [b for b in code_blocks(DOCS / "quickstart.rst", "python") if "def " in b]
    package = types.ModuleType("reports")
    package.__path__ = []
    module = types.ModuleType("reports.jobs")
    exec(compile(source, "quickstart.rst", "exec"), module.__dict__)
    package.jobs = module  # type: ignore[attr-defined]
    saved = {name: sys.modules.get(name) for name in ("reports", "reports.jobs")}
    sys.modules.update({"reports": package, "reports.jobs": module})
    yield module
    for name, previous in saved.items():
        if previous is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = previous


def test_quickstart_installs_the_app_with_time_zone_support():
    namespace = quickstart_namespace()
    assert "django_posixcron" in namespace["INSTALLED_APPS"]  # type: ignore[operator]
    assert namespace["USE_TZ"] is True


def test_quickstart_sqlite_database_uses_immediate_transactions():
    databases = quickstart_namespace()["DATABASES"]
    default = databases["default"]  # type: ignore[index]
    assert default["ENGINE"] == "django.db.backends.sqlite3"
    assert default["NAME"] == Path("/srv/mysite/db.sqlite3")
    assert default["OPTIONS"] == {"transaction_mode": "IMMEDIATE"}
    text = (DOCS / "quickstart.rst").read_text()
    assert "posixcron.W001" in text
    assert "database is locked" in text


def test_quickstart_logging_shows_the_schedulers_info_lines():
    """Configured the way Django does it, the LOGGING example prints INFO, not DEBUG."""
    logging_setting = quickstart_namespace()["LOGGING"]
    program = textwrap.dedent(
        """
        import json, logging, sys
        import django
        from django.conf import settings

        settings.configure(LOGGING=json.load(sys.stdin))
        django.setup()
        logger = logging.getLogger("django_posixcron.scheduler")
        logger.info("run started task=visible")
        logger.debug("a debug line")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", program],
        input=json.dumps(logging_setting),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "run started task=visible" in result.stderr
    assert "a debug line" not in result.stderr + result.stdout


def test_quickstart_declaration_is_valid(quickstart_task_module):
    namespace = quickstart_namespace()
    declarations, problems = collect(namespace["POSIXCRON"])
    assert problems == []
    assert list(declarations) == ["daily-digest"]
    assert declarations["daily-digest"].resolve() is quickstart_task_module.send_digest


def test_quickstart_declaration_passes_the_system_checks(quickstart_task_module, settings):
    namespace = quickstart_namespace()
    settings.POSIXCRON = namespace["POSIXCRON"]
    settings.TIME_ZONE = namespace["TIME_ZONE"]
    errors = [m for m in checks.run_checks() if m.id and m.id.startswith("posixcron.")]
    assert errors == []


def test_quickstart_task_runs_with_its_declared_kwargs(quickstart_task_module, caplog):
    namespace = quickstart_namespace()
    declarations, _ = collect(namespace["POSIXCRON"])
    declaration = declarations["daily-digest"]
    caplog.set_level("INFO", logger="reports.jobs")
    declaration.resolve()(**declaration.kwargs)
    assert "sending the digest (full=True)" in caplog.text


def rst_files_with_doctests() -> list[Path]:
    return sorted(p for p in DOCS.glob("*.rst") if ">>> " in p.read_text())


@pytest.mark.parametrize("path", rst_files_with_doctests(), ids=lambda p: p.name)
def test_doctests_in_the_docs_pass(path):
    result = doctest.testfile(
        str(path),
        module_relative=False,
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
        verbose=False,
        report=True,
    )
    assert result.failed == 0, f"{result.failed} doctest example(s) failed in {path.name}"


def test_api_page_has_doctests():
    assert DOCS / "api.rst" in rst_files_with_doctests()


def test_every_page_is_in_the_toctree_and_exists():
    index = (DOCS / "index.rst").read_text()
    toctree = index.split(".. toctree::", 1)[1]
    entries = re.findall(r"^   ([a-z_]+)$", toctree, flags=re.MULTILINE)
    assert entries == [
        "quickstart",
        "settings",
        "semantics",
        "running",
        "handoff",
        "admin",
        "operations",
        "testing",
        "comparison",
        "benchmarks",
        "api",
        "changelog",
    ]
    pages = {p.stem for p in DOCS.glob("*.rst")} - {"index"}
    assert pages == set(entries)


def test_readme_quick_start_is_exactly_make_demo_and_make_test():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    fenced = re.findall(r"```(?:console|sh|bash)?\n(.*?)```", section, flags=re.DOTALL)
    commands = [line for block in fenced for line in block.splitlines() if line.strip()]
    assert commands == ["make demo", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, flags=re.MULTILINE)
    assert re.search(r"^test:", makefile, flags=re.MULTILINE)


def test_changelog_has_an_unreleased_section():
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog
    assert (DOCS / "changelog.rst").read_text().count("../CHANGELOG.md") == 1


def test_readme_settings_example_is_valid():
    (block,) = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    namespace: dict[str, object] = {}
    exec(compile(block, "README.md", "exec"), namespace)
    package = types.ModuleType("reports")
    package.__path__ = []
    module = types.ModuleType("reports.jobs")
    module.nightly = lambda: None  # type: ignore[attr-defined]
    saved = {name: sys.modules.get(name) for name in ("reports", "reports.jobs")}
    sys.modules.update({"reports": package, "reports.jobs": module})
    try:
        declarations, problems = collect(namespace["POSIXCRON"])
    finally:
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous
    assert problems == []
    assert declarations["nightly-report"].timezone == "Europe/Berlin"


def logged_actions() -> set[str]:
    """Return every `action` the package logs: the literals of its `extra` dicts, and those
    it passes through a variable (reconcile's changes, the admin's actions)."""
    import ast

    from django_posixcron.reconcile import LABELS

    package = ROOT / "django_posixcron"
    actions = set(LABELS)
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "action":
                        actions |= {
                            n.value
                            for n in ast.walk(value)
                            if isinstance(n, ast.Constant) and isinstance(n.value, str)
                        }
    admin = (package / "admin" / "actions.py").read_text()
    return actions | set(re.findall(r'"(admin_[a-z_]+)"', admin))


def test_the_logging_section_lists_every_action_logged():
    text = (DOCS / "running.rst").read_text()
    section = text.split("\nLogging\n-------\n", 1)[1].split("\n---", 1)[0]
    # What the section names that is not an action: loggers, and a record's other attributes
    # and their values.
    named = set(re.findall(r"``([a-z][a-z0-9_.]*)``", section))
    attributes = {"action", "task", "run_id", "part", "loop", "heartbeat", "tasks"}
    documented = {n for n in named if not n.startswith("django_posixcron")} - attributes
    logged = logged_actions()
    assert logged - documented == set(), "logged, not in docs/running.rst's Logging section"
    assert documented - logged == set(), "in docs/running.rst's Logging section, never logged"


def test_the_refusal_inside_a_transaction_names_a_page_that_exists():
    import inspect

    from django_posixcron.scheduling import loop

    source = inspect.getsource(loop.inside_a_transaction)
    assert "Testing your project" in source
    assert (DOCS / "testing.rst").read_text().startswith("Testing your project\n")


def test_every_test_the_comparison_cites_exists():
    """The table of the peers' known failures names the tests that keep them out."""
    text = (DOCS / "comparison.rst").read_text()
    cited = re.findall(r"``(tests/[\w/]+\.py)::(\w+)``", text)
    assert len(cited) > 20
    missing = [
        f"{path}::{name}"
        for path, name in cited
        if not re.search(rf"^\s*(async\s+)?def {name}\(", (ROOT / path).read_text(), re.M)
    ]
    assert missing == []


def test_readme_links_work_where_the_readme_is_read():
    """The README is also the package's page on PyPI, where a link relative to the repository
    leads nowhere: its links are absolute, and each documentation page it names exists."""
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)]+)\)", readme)
    assert targets
    assert [t for t in targets if not t.startswith("https://")] == []
    docs_base = "https://django-posixcron.readthedocs.io/en/latest/"
    pages = {t.removeprefix(docs_base) for t in targets if t.startswith(docs_base)}
    named = {p.removesuffix(".html") for p in pages if p}
    assert named <= {p.stem for p in DOCS.glob("*.rst")}, named


def test_testing_page_builds_a_run_context_that_runs():
    (source,) = [b for b in code_blocks(DOCS / "testing.rst", "python") if "RunContext(" in b]
    namespace: dict[str, object] = {}
    exec(source, namespace)  # the documentation's own example
    context = namespace["context"]
    assert context.attempt == 1  # type: ignore[attr-defined]
