"""No file of the project keeps a merge's conflict markers: a README or a module with
`<<<<<<<` lines in it reads wrong (or does not import), and nothing else would say so."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIPPED = {".git", ".venv", "node_modules", "build", "__pycache__", ".ruff_cache"}
SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".json", ".cfg", ".ini", ".txt", ".html",
            ".js", ".css", ".sh", ".sql", ".mako", ""}
MARKER = re.compile(r"^(<{7} |>{7} |={7}$)", re.MULTILINE)


def project_files() -> list[Path]:
    """The project's text files, not descending into the virtual environment and caches."""
    files = []
    for folder, subfolders, names in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders
                         if d not in SKIPPED and not d.endswith(".egg-info")]
        for name in names:
            path = Path(folder, name)
            if path.suffix in SUFFIXES and path.stat().st_size < 2_000_000:
                files.append(path)
    return files


def test_no_file_keeps_conflict_markers() -> None:
    files = project_files()
    assert any(f.name == "README.md" for f in files)
    found = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for match in MARKER.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{path.relative_to(ROOT)}:{line}: {match.group(0).strip()}")
    assert not found, "conflict markers left by a merge:\n" + "\n".join(found)


def test_the_check_finds_a_marker(tmp_path: Path) -> None:
    text = "a\n<<<<<<< HEAD\nb\n=======\nc\n>>>>>>> other\n"
    assert len(MARKER.findall(text)) == 3
    assert not MARKER.findall("a\n======= not a marker\n<<<<<<<no space\n")
