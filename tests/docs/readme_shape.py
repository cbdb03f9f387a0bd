#!/usr/bin/env python3
"""The README stays a landing page (ctest: docs_readme_shape): at most 150 lines, no paragraph
of prose over 8 lines (code blocks and tables are not prose), and every relative link points to
a file that exists.

  /usr/bin/python3 tests/docs/readme_shape.py [ROOT]
"""
import re
import sys
from pathlib import Path

from doc_check import verdict

MAX_LINES, MAX_PARAGRAPH = 150, 8


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
    lines = (root / "README.md").read_text().splitlines()
    problems = []
    if len(lines) > MAX_LINES:
        problems.append(f"README.md has {len(lines)} lines, more than {MAX_LINES}")
    in_code, start, run = False, 0, 0
    for i, line in enumerate(lines + [""], 1):
        if line.startswith("```"):
            in_code, run = not in_code, 0
            continue
        prose = not in_code and line.strip() and not line.startswith(("|", "#", "![", "- "))
        if prose:
            start, run = (i, 1) if run == 0 else (start, run + 1)
        else:
            if run > MAX_PARAGRAPH:
                problems.append(f"README.md:{start}: a paragraph of {run} lines, more than {MAX_PARAGRAPH}")
            run = 0
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", "\n".join(lines)):
        if "://" not in target and not (root / target).exists():
            problems.append(f"README.md: the link to {target} points to no file")
    return verdict(problems, f"readme_shape: {len(lines)} lines, {len(problems)} problems")


if __name__ == "__main__":
    sys.exit(main())
