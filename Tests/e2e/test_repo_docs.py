"""Docs in the repository: comments cite only what the repository contains, and the README documents
every variable the executables read. Needs no running stack."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEXT_SUFFIXES = {".swift", ".md", ".py", ".sh", ".yml", ".yaml", ".proto", ".h", ".modulemap", ".json", ""}


def repository_files():
    for path in ROOT.rglob("*"):
        relative = path.relative_to(ROOT)
        if any(part.startswith(".") or part in {"__pycache__", "Generated"} for part in relative.parts[:-1]):
            continue
        if path.is_file() and (path.suffix in TEXT_SUFFIXES) and not relative.parts[0].startswith("."):
            yield path, relative


def test_nothing_points_to_notes_outside_the_repository():
    outside = re.compile(r"DESIGN\.md|apns-reference\.md|TRAPS\.md|/work/shared|STYLE\.md")
    offenders = []
    for path, relative in repository_files():
        if relative == Path("Tests/e2e/test_repo_docs.py"):
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if outside.search(line):
                offenders.append(f"{relative}:{number}: {line.strip()}")
    assert not offenders, "references to files outside the repository:\n" + "\n".join(offenders)


def test_every_docs_reference_exists():
    cited = re.compile(r"\b(docs/[A-Za-z0-9_.-]+\.md)")
    missing = []
    for path, relative in repository_files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for name in cited.findall(line):
                if not (ROOT / name).exists():
                    missing.append(f"{relative}:{number}: {name}")
    assert not missing, "cited docs that do not exist:\n" + "\n".join(missing)


def test_readme_documents_every_variable_the_executables_read():
    read: set[str] = set()
    # Only executables (and the loaders they share) read the environment.
    readers = [*(ROOT / "Sources").glob("*/main.swift"), *(ROOT / "Sources").glob("*/*Program.swift"),
               ROOT / "Sources/AdminHTTP/AdminServer+Environment.swift", ROOT / "Sources/ServiceCore/ServiceMain.swift",
               ROOT / "Sources/Kafka/KafkaSecurity.swift",
               ROOT / "Sources/ServiceCore/Logger.swift", *(ROOT / "Sources/PushCtlCore").glob("*.swift")]
    for path in readers:
        read.update(re.findall(r'"(PUSH_[A-Z0-9_]*[A-Z0-9]|LOG_LEVEL|LOG_FORMAT)"', path.read_text()))
    assert "PUSH_KAFKA_BOOTSTRAP" in read and "PUSH_PG_PASSWORD_FILE" in read
    readme = (ROOT / "README.md").read_text()
    # PUSH_TYPE_* are the contract's enum names, not variables.
    undocumented = sorted(name for name in read if f"`{name}" not in readme and not name.startswith("PUSH_TYPE_"))
    assert not undocumented, f"variables read by the code but not in the README: {undocumented}"
