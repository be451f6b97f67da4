"""The project's Python (test harness, benchmarks, scripts) has no undefined names: a helper moved
between modules must not leave a reference to a name that only its old module had. pyflakes reads
the sources without running them. Needs no running stack."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def python_sources() -> list[Path]:
    found = []
    for directory in ("Tests", "scripts", "deploy"):
        for path in sorted((ROOT / directory).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts or "Generated" in path.parts:
                continue
            if path.suffix == ".py":
                found.append(path)
            elif path.suffix == "":
                with path.open("rb") as handle:
                    first = handle.readline()
                if first.startswith(b"#!") and b"python" in first:
                    found.append(path)
    return found


def test_the_harness_and_scripts_are_found():
    names = {path.relative_to(ROOT).as_posix() for path in python_sources()}
    assert "Tests/e2e/pushstack.py" in names and "scripts/fault-matrix" in names, sorted(names)


def test_no_python_source_uses_an_undefined_name():
    result = subprocess.run([sys.executable, "-m", "pyflakes", *map(str, python_sources())],
                            capture_output=True, text=True)
    assert "No module named pyflakes" not in result.stderr, "pyflakes is missing: run scripts/install-deps"
    serious = [line for line in (result.stdout + result.stderr).splitlines()
               if "undefined name" in line or "syntax" in line.lower() or "referenced before assignment" in line]
    assert not serious, "\n".join(serious)


def whole_log_absence_checks(source: str) -> list[int]:
    """Lines of `assert "..." not in name` where `name` was read from a process's whole log (`x.log.read_text()`
    with nothing cut away). The stack's processes append to one log over the whole run, so such a check also
    reads every earlier test's lines: a line another test caused on purpose (a paused holder losing its
    partitions) fails a later, unrelated test. `LogMark(path).text()` reads only a test's own lines."""
    import ast
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, ast.FunctionDef):
            continue
        whole = set()
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                parts = list(ast.walk(node.value))
                reads_log = any(isinstance(p, ast.Call) and isinstance(p.func, ast.Attribute)
                                and p.func.attr == "read_text" and isinstance(p.func.value, ast.Attribute)
                                and p.func.value.attr == "log" for p in parts)
                cut = any(isinstance(p, ast.Subscript) or (isinstance(p, ast.Attribute) and p.attr == "split")
                          for p in parts)
                if reads_log and not cut:
                    whole.add(node.targets[0].id)
        for node in ast.walk(function):
            if isinstance(node, ast.Compare) and any(isinstance(op, ast.NotIn) for op in node.ops):
                if any(isinstance(c, ast.Name) and c.id in whole for c in node.comparators):
                    found.append(node.lineno)
    return found


def test_whole_log_absence_checks_are_found():
    # The shape that failed a CI run: the join test read the stack dispatcher's whole log.
    bad = 'def t(d, p):\n    logs = d.log.read_text(errors="replace") + p.read_text()\n    assert "lost=true" not in logs\n'
    cut = 'def t(d, m):\n    logs = m.text()\n    assert "lost=true" not in logs\n'
    assert whole_log_absence_checks(bad) == [3] and whole_log_absence_checks(cut) == []


def test_no_test_asserts_an_absence_over_a_whole_process_log():
    offenders = [f"{path.relative_to(ROOT)}:{line}" for path in sorted((ROOT / "Tests" / "e2e").glob("test_*.py"))
                 for line in whole_log_absence_checks(path.read_text())]
    assert not offenders, "read the test's own lines with pushstack.LogMark: " + ", ".join(offenders)
