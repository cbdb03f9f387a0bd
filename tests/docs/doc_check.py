"""What the checks of tests/docs/ share: how a check ends (ctest: docs_*).

    from doc_check import verdict
    return verdict(problems, "readme_shape: 120 lines")
"""


def verdict(problems, summary):
    """Prints each problem on its line, then the check's summary line; the exit status: 1 with a
    problem, else 0."""
    for p in problems:
        print(p)
    print(summary)
    return 1 if problems else 0
