#!/usr/bin/env python3
"""sim/'s top level names its parts, and docs/architecture.md says what each is
(ctest: docs_architecture_rooms): at most 12 entries at sim/'s top level, no source file among
them, and every folder of sim/ has its row in architecture.md's folder table.

  /usr/bin/python3 tests/docs/architecture_rooms.py [ROOT]
"""
import sys
from pathlib import Path

from doc_check import verdict

MAX_ENTRIES = 12


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
    sim = root / "sim"
    entries = sorted(p.name for p in sim.iterdir() if not p.name.startswith("."))
    arch = (root / "docs/architecture.md").read_text()
    problems = []
    if len(entries) > MAX_ENTRIES:
        problems.append(f"sim/ has {len(entries)} entries at its top level, more than {MAX_ENTRIES}: {entries}")
    loose = [e for e in entries if e.endswith((".cpp", ".h", ".cu"))]
    if loose:
        problems.append(f"sim/ has source files at its top level, outside any room: {loose}")
    for e in entries:
        if (sim / e).is_dir() and f"| `sim/{e}/` |" not in arch:
            problems.append(f"docs/architecture.md has no row for sim/{e}/ in its folder table")
    return verdict(problems, f"architecture_rooms: sim/ has {len(entries)} entries, {len(problems)} problems")


if __name__ == "__main__":
    sys.exit(main())
