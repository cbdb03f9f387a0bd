#!/usr/bin/env python3
"""The headline numbers cannot drift from where they are measured (ctest: docs_numbers_agree).

Every number in a results table must appear in the text that reports its measurement:
- the tables of README.md's "What it found" and the claims table at the head of
  docs/reproductions.md: in the body of docs/reproductions.md (every section after the claims
  table) or in docs/gpu.md;
- the table of README.md's "Speed": in docs/performance.md.
A number is matched as the whole phrase it stands in: "−0.223 ± 0.048", "28/40", "[0.55, 0.82]"
(also found as "0.55–0.82"), "0.63–0.93", "28/40" (also as "28 of 40"), or a lone number such as "5.75e-03" or "2.08×"; signs
are compared (− and - are the same sign), digits exactly. Exit 1 naming each number not found.

  /usr/bin/python3 tests/docs/numbers_agree.py [ROOT]
"""
import re
import sys
from pathlib import Path

from doc_check import verdict

NUM = r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?"
PHRASE = re.compile(
    r"(?<![\w.])(?:"
    r"(?P<date>\d{4}-\d{2}-\d{2})"
    rf"|(?P<pm>{NUM}\s*±\s*{NUM})"
    rf"|(?P<iv>\[\s*{NUM},\s*{NUM}\s*\])"
    rf"|(?P<range>{NUM}–{NUM})"
    rf"|(?P<frac>\d+/\d+)"
    rf"|(?P<num>{NUM})"
    r")(?!\w|\.\d)")  # not inside a name: "Qwen3-30B", "k3", "A3B"


def norm(text):
    """One spelling of the minus sign, single spaces around ±."""
    text = text.replace("−", "-")
    return re.sub(r"\s*±\s*", " ± ", text)


def section(text, start, stop=r"^## "):
    """The lines from the heading matching start up to the next heading matching stop."""
    m = re.search(start, text, re.M)
    if not m:
        return None
    rest = text[m.end():]
    e = re.search(stop, rest, re.M)
    return rest[:e.start()] if e else rest


def table_rows(text):
    return [l for l in text.splitlines()
            if l.startswith("|") and not re.fullmatch(r"[|\s:-]+", l)]


def found(phrase, kind, source):
    """Whether phrase (already normalised) appears in source as a whole phrase."""
    def whole(p):
        return re.search(r"(?<![\d.])" + re.escape(p) + r"(?![\d])", source) is not None
    if kind == "iv":
        lo, hi = re.findall(NUM, phrase)
        return any(whole(p) for p in (f"[{lo}, {hi}]", f"{lo}–{hi}", f"({lo}–{hi})"))
    if kind == "frac":
        a, b = phrase.split("/")
        return whole(phrase) or whole(f"{a} of {b}")
    if kind == "num":
        # a lone number: its sign is the text's business; a leading + is often left out
        return whole(phrase) or whole(phrase.lstrip("+"))
    return whole(phrase)


def check(label, rows, source, where):
    missing = []
    for row in rows:
        for cell in row.strip("|").split("|"):
            cell = norm(cell)
            for m in PHRASE.finditer(cell):
                kind = m.lastgroup
                phrase = m.group(kind)
                if kind == "date" or (kind == "num" and re.fullmatch(r"\d", phrase)):
                    continue  # a date, or a single digit (a row number, "n = 3"), says nothing
                if not found(phrase, kind, source):
                    missing.append(f"{label}: '{phrase}' (in: {cell.strip()[:80]}) is not in {where}")
    return missing


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
    readme = (root / "README.md").read_text()
    repro = (root / "docs/reproductions.md").read_text()
    gpu = (root / "docs/gpu.md").read_text()
    perf = (root / "docs/performance.md").read_text()

    claims = section(repro, r"^## The claims")
    found_rows = section(readme, r"^## What it found")
    speed = section(readme, r"^## Speed")
    problems = []
    for name, part in (("README.md: What it found", found_rows), ("README.md: Speed", speed),
                       ("docs/reproductions.md: The claims", claims)):
        if part is None or not table_rows(part):
            problems.append(f"{name}: the section or its table is missing")
    if problems:
        print("\n".join(problems))
        return 1
    body = repro[repro.index(claims) + len(claims):]
    results_source = norm(body + "\n" + gpu)
    problems += check("README.md, What it found", table_rows(found_rows), results_source,
                      "docs/reproductions.md (after its claims table) or docs/gpu.md")
    problems += check("docs/reproductions.md, The claims", table_rows(claims), results_source,
                      "the body of docs/reproductions.md or docs/gpu.md")
    problems += check("README.md, Speed", table_rows(speed), norm(perf), "docs/performance.md")
    n = sum(len(table_rows(x)) for x in (found_rows, claims, speed))
    return verdict(problems, f"numbers_agree: {n} table rows checked, {len(problems)} numbers not found")


if __name__ == "__main__":
    sys.exit(main())
