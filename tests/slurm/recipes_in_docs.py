"""docs/clusters.md shows scripts/slurm/ as they are (ctest: slurm_recipes_in_docs): every file of
scripts/slurm/ appears in it, after a line `<!-- scripts/slurm/NAME -->`, as a fenced block equal
to the file. `--write` rewrites the blocks from the files (after editing a script).

Usage: /usr/bin/python3 tests/slurm/recipes_in_docs.py [--write]
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "clusters.md")


def main():
    write = "--write" in sys.argv
    text = open(DOC).read()
    names = sorted(os.listdir(os.path.join(ROOT, "scripts", "slurm")))
    bad = []
    for name in names:
        body = open(os.path.join(ROOT, "scripts", "slurm", name)).read()
        marker = f"<!-- scripts/slurm/{name} -->\n"
        pat = re.compile(re.escape(marker) + r"```bash\n(.*?)```\n", re.S)
        m = pat.search(text)
        if not m:
            bad.append(f"{name}: no block after '{marker.strip()}'")
            continue
        if m.group(1) != body:
            if write:
                text = text[:m.start()] + marker + "```bash\n" + body + "```\n" + text[m.end():]
            else:
                bad.append(f"{name}: the block in docs/clusters.md differs from the file (--write updates it)")
    if write:
        open(DOC, "w").write(text)
    if bad:
        print("recipes_in_docs: " + "; ".join(bad))
        sys.exit(1)
    print(f"recipes_in_docs: docs/clusters.md shows the {len(names)} files of scripts/slurm/ as they are")


if __name__ == "__main__":
    main()
