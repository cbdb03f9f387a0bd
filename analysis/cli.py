"""What every command-line entry point of the analysis shares: a refusal is one line on stderr,
"<prog>: error: <what is wrong>", and a non-zero exit status — 1 for input it cannot use, 2 for a
bad command line (as argparse) — never a Python traceback (docs/reliability.md, "Analysis").

    from .cli import Entry                          # (scripts: from analysis.cli import Entry)
    entry = Entry(__name__, "analysis.audits")      # before the imports that need third-party modules
    with entry.imports():                           # a missing numpy: one line naming its Debian package
        import numpy as np
    ...
    def main(argv=None):
        ap = entry.parser(description=...)          # argparse; its error line has the same prefix
        ...
    if __name__ == "__main__":
        entry.run(main)                             # exit status: main's return value, or the refusal's

`entry.run` turns into one line: AnalysisError (and BadFile) — input the analysis cannot use —,
`SystemExit("message")`, an OSError (the path and the reason), a failed subprocess, a Python module
that cannot be imported (named with the Debian package that installs it), and, as a last resort,
any other exception (its type, message and where it was raised; MOERL_TRACEBACK=1 shows the whole
traceback instead). Imported as a library (a notebook, the tests), nothing is caught: `imports()`
only acts when its module is the program, and `main()` raises as before.

Imports only the standard library, so it works where numpy does not.
"""
import argparse
import contextlib
import os
import subprocess
import sys
import traceback


class AnalysisError(ValueError):
    """Input the analysis cannot use: a missing or empty directory, no readable run, an unknown
    --group-by key, an --out that is a file, an index.json that is not JSON. An ordinary exception,
    so a notebook can catch it; the entry points (`python3 -m analysis`, `moerl report`, ...) turn
    it into their one-line error."""


# Third-party modules the analysis imports → the Debian package that installs them
# (scripts/install-deps.sh installs all but python3-torch, which it adds with --with-python).
DEBIAN_PACKAGES = {
    "numpy": "python3-numpy",
    "h5py": "python3-h5py",
    "matplotlib": "python3-matplotlib",
    "scipy": "python3-scipy",
    "pandas": "python3-pandas",
    "torch": "python3-torch",
}


def read_json(path, what, bad_json_hint=""):
    """A JSON file's value. Raises AnalysisError naming the file and what it should have been
    (`what`: "a moerl audit output"): unreadable, not UTF-8, not JSON (with `bad_json_hint`)."""
    import json
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise AnalysisError(f"{path}: cannot read {what}: {e.strerror or e}")
    except UnicodeDecodeError as e:
        raise AnalysisError(f"{path}: not {what}: not UTF-8 text (byte {e.start})")
    except ValueError as e:  # json.JSONDecodeError
        raise AnalysisError(f"{path}: not {what}: not valid JSON ({e}){bad_json_hint}")


def missing_module_message(e):
    """One line for an ImportError: the module, the interpreter, and the Debian package to install."""
    name = (getattr(e, "name", None) or "").split(".")[0]
    if not name:  # "cannot import name X from Y": the module is the one named after "from"
        text = str(e)
        name = text.split(" from '", 1)[1].split("'")[0].split(".")[0] if " from '" in text else ""
    pkg = DEBIAN_PACKAGES.get(name)
    what = f"the Python module {name}" if name else "a Python module"
    if pkg:
        script = "scripts/install-deps.sh" + (" --with-python" if pkg == "python3-torch" else "")
        return (f"{what} cannot be imported into {sys.executable} ({e}); it comes with the Debian package "
                f"{pkg} (apt install {pkg}, or {script})")
    return f"{what} cannot be imported into {sys.executable} ({e})"


def _where(e):
    """file:line where an exception was raised, relative to the checkout when inside it."""
    tb = traceback.extract_tb(e.__traceback__)
    if not tb:
        return ""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    f = tb[-1]
    path = os.path.relpath(f.filename, root) if os.path.abspath(f.filename).startswith(root + os.sep) else f.filename
    return f" at {path}:{f.lineno}"


def _one_line(text):
    return " ".join(str(text).split("\n")).strip()


class Entry:
    """One entry point: its program name and error prefix (see the module's docstring).

    name: the module's __name__ (so that imports() acts only when it is the program); module: its
    dotted name, e.g. "analysis.audits". The program name is "python3 -m <module>" when run with -m,
    else the script's file name (as argparse names it); prog and prefix override both (`moerl report`
    sets MOERL_PROG and MOERL_ERROR_PREFIX for analysis/__main__.py)."""

    def __init__(self, name, module, prog=None, prefix=None):
        self.is_main = name == "__main__"
        main = sys.modules.get("__main__")
        if prog is None:
            run_as_script = self.is_main and getattr(main, "__spec__", None) is None
            prog = os.path.basename(sys.argv[0]) if run_as_script and sys.argv and sys.argv[0] else f"python3 -m {module}"
        self.prog = prog
        self.prefix = prefix if prefix is not None else f"{prog}: error: "

    def error(self, message, status=1):
        """Prints the one-line refusal and exits with status (1: bad input, 2: bad usage)."""
        sys.stdout.flush()
        print(f"{self.prefix}{_one_line(message)}", file=sys.stderr)
        sys.exit(status)

    @contextlib.contextmanager
    def imports(self):
        """Around a module's imports of third-party modules: when the module is the program, a
        missing one is the one-line error naming its Debian package (exit 1); else it raises."""
        try:
            yield
        except ImportError as e:
            if not self.is_main or os.environ.get("MOERL_TRACEBACK"):
                raise
            self.error(missing_module_message(e))

    def parser(self, **kwargs):
        """An argparse parser whose errors are the usage line, then one line with the prefix; exit 2."""
        kwargs.setdefault("prog", self.prog)
        return _Parser(self.prefix, **kwargs)

    def run(self, main, *args):
        """Calls main(*args) and exits with its return value (None: 0), or with the one-line error."""
        if os.environ.get("MOERL_TRACEBACK"):
            sys.exit(main(*args))
        try:
            code = main(*args)
        except SystemExit as e:
            if isinstance(e.code, str):  # sys.exit("reason") / raise SystemExit("reason"): a refusal
                self.error(e.code)
            raise
        except KeyboardInterrupt:
            self.error("interrupted", 130)
        except BrokenPipeError:  # the reader of stdout went away (| head): not an error of ours
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            except OSError:
                pass
            sys.exit(1)
        except AnalysisError as e:
            self.error(str(e))
        except ImportError as e:
            self.error(missing_module_message(e))
        except subprocess.CalledProcessError as e:
            cmd = e.cmd if isinstance(e.cmd, str) else " ".join(str(c) for c in e.cmd)
            self.error(f"{cmd}: failed with exit status {e.returncode}")
        except OSError as e:
            if e.filename is not None and e.strerror:
                what = f"{e.filename}: {e.strerror}" + (f" (→ {e.filename2})" if e.filename2 else "")
            else:
                what = str(e) or type(e).__name__
            self.error(what)
        except Exception as e:  # noqa: BLE001 — a last resort: one line, where it was raised
            runs = sys.modules.get(__package__ + ".runs")  # its BadFile: input, not a bug
            if runs is not None and isinstance(e, runs.BadFile):
                self.error(str(e))
            self.error(f"internal error: {type(e).__name__}: {e}{_where(e)} (a bug, or input it did not "
                       "expect; MOERL_TRACEBACK=1 shows the traceback)")
        sys.exit(code)


class _Parser(argparse.ArgumentParser):
    def __init__(self, prefix, **kwargs):
        super().__init__(**kwargs)
        self._error_prefix = prefix

    def error(self, message):
        self.print_usage(sys.stderr)
        print(f"{self._error_prefix}{_one_line(message)}", file=sys.stderr)
        sys.exit(2)
