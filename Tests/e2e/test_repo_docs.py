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


def _identifiers_in(*folders: str) -> set[str]:
    """Every identifier in the code (not its comments) of the sources and tests, the contracts and the
    deployment configs, plus each proto enum value's suffixes in UpperCamel
    (`OUTCOME_REASON_TOKEN_KIND_MISMATCH` also gives `TokenKindMismatch`)."""
    names: set[str] = set()
    for folder in folders:
        for path in (ROOT / folder).rglob("*"):
            if not path.is_file() or path.suffix not in {".swift", ".h", ".c", ".proto", ".py", ".yml", ".yaml"}:
                continue
            text = path.read_text(errors="replace")
            if path.suffix in {".swift", ".h", ".c"}:  # comments do not define anything
                text = re.sub(r"/\*.*?\*/", " ", re.sub(r"//[^\n]*", " ", text), flags=re.S)
            elif path.suffix == ".py":
                text = re.sub(r'#[^\n]*|"""[\s\S]*?"""', " ", text)
            names.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
            for constant in re.findall(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b", text):
                words = constant.split("_")
                for start in range(1, len(words)):
                    names.add("".join(word.capitalize() for word in words[start:]))
    return names


def test_every_name_the_docs_cite_exists():
    """Every UpperCamel name (`EngineStateMachine`, `TokenStoreBatchTests.someTest`) and every `name()` that
    docs/ and the README cite in backticks exists in Sources/, Tests/, Protos/ or deploy/: a renamed or
    removed type or function cannot leave the design pages describing code that is not there."""
    known = _identifiers_in("Sources", "Tests", "Protos", "deploy")
    span = re.compile(r"`([^`\n]+)`")
    upper_camel = re.compile(r"^[A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+$")
    call = re.compile(r"^([a-z][A-Za-z0-9]*)\([^)]*\)$")
    missing = []
    for doc in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for cited in span.findall(line):
                parts = [cited] if "(" in cited or " " in cited else cited.split(".")
                for part in parts:
                    name = part if upper_camel.match(part) else None
                    if (match := call.match(part)) is not None:
                        name = match.group(1)
                    if name is not None and name not in known:
                        missing.append(f"{doc.relative_to(ROOT)}:{number}: {name} (in `{cited}`)")
    assert not missing, "names cited in the docs that no source, test or contract defines:\n" + "\n".join(missing)
