"""The rooms' import rules, as the architecture page's table settles them, hold for the package;
and the check that says so finds a forbidden import when there is one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.import_rules import EVERYTHING, WIRING, Violation, read_table, violations

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "compactor"
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "layout_pkg"
IO_LIBRARIES = ("pyspark", "delta", "confluent_kafka")


def test_no_import_crosses_a_rule_of_the_architecture_table() -> None:
    rules = read_table((ROOT / "docs" / "architecture.md").read_text())
    found = violations(PACKAGE, rules)
    assert not found, "imports the rooms' table forbids:\n" + "\n".join(map(str, found))


def test_the_table_names_every_room_of_the_package() -> None:
    rules = read_table((ROOT / "docs" / "architecture.md").read_text())
    rooms = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert rooms | {"errors", WIRING} <= set(rules)
    assert rules["rules"] == {"config"}  # planners stay pure: testable in microseconds
    assert rules["stream/merging"] == frozenset()  # scheduling never reaches back into the stream
    assert "delta/rewrite" not in rules["delta/log"], "reading the log never reaches the rewrites"
    assert "delta/commit" not in rules["delta/warehouse"], "the job's own state takes no data-table commit"
    assert EVERYTHING in rules["cli"] and EVERYTHING in rules[WIRING]


def test_pure_rooms_import_no_spark_kafka_or_delta() -> None:
    pure = ("domain", "config", "codec", "rules", "catalog")
    offenders = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for room in pure
        for path in sorted((PACKAGE / room).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if line.lstrip().startswith(("import ", "from ")) and line.split()[1].split(".")[0] in IO_LIBRARIES
    ]
    assert not offenders, "\n".join(offenders)


def test_the_check_names_the_file_and_line_of_a_forbidden_import() -> None:
    rules = read_table((FIXTURE / "ARCHITECTURE.md").read_text())
    assert rules == {
        "errors": frozenset(),
        "domain": frozenset(),
        "rules": frozenset(),
        "delta": frozenset({"rules"}),
        "delta/queue": frozenset(),
        "cli": frozenset({EVERYTHING}),
        WIRING: frozenset({EVERYTHING}),
    }
    assert violations(FIXTURE, rules) == [
        Violation(
            FIXTURE / "delta" / "queue" / "work.py", 2, "delta/queue", "layout_pkg.delta.store.STORE", "delta"
        ),
        Violation(FIXTURE / "rules" / "planner.py", 2, "rules", "layout_pkg.delta.store.STORE", "delta"),
    ]
    assert str(violations(FIXTURE, rules)[1]).endswith(
        "rules/planner.py:2: rules/ may not import delta/ (layout_pkg.delta.store.STORE)"
    )


def test_a_room_missing_from_the_table_is_an_error() -> None:
    rules = read_table((FIXTURE / "ARCHITECTURE.md").read_text())
    del rules["delta"]
    with pytest.raises(AssertionError, match=r"room 'delta' is not in the import-rule table"):
        violations(FIXTURE, rules)


def test_the_public_api_imports_from_the_package_without_starting_spark() -> None:
    code = (
        "import sys, compactor\n"
        "assert 'pyspark' not in sys.modules, 'import compactor pulled in Spark'\n"
        "from compactor.client import loader\n"
        "resolved = {name: getattr(compactor, name) for name in compactor.__all__}\n"
        "assert resolved['load_segment'] is loader.load_segment\n"
        "print(' '.join(sorted(resolved)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert {"SparkLoader", "ArrowLoader", "StreamingSink", "ResultsFollower", "load_segment"} <= set(
        out.stdout.split()
    )
    assert set(compactor_homes()) == set(compactor_all()) - {"__version__"}, "every public name has a home"
    import compactor

    with pytest.raises(AttributeError, match="no attribute 'loader'"):
        compactor.loader  # noqa: B018  # the old module path is gone, not silently aliased


def compactor_homes() -> dict[str, str]:
    import compactor

    return compactor._HOMES


def compactor_all() -> list[str]:
    import compactor

    return compactor.__all__
