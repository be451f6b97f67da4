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
