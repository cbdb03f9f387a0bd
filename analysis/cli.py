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
import errno
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


# The largest text input the analysis reads whole (an index.json, a league-runs.csv): the biggest
# sweep's index is a few MiB; beyond this it is not such a file (a log, an image, /dev/zero).
TEXT_INPUT_MAX_BYTES = 256 << 20


def _kind(mode):
    import stat
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_input_bytes(path, what, limit=TEXT_INPUT_MAX_BYTES):
    """The bytes of a text input (`what`, e.g. "a valid sweep index"), read only when it is a regular
    file of at most `limit` bytes: a FIFO, a device (a link to /dev/zero) or a directory is refused by
    its kind without being opened for reading (a FIFO would block), an oversized file by its size.
    Raises AnalysisError naming the path."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise AnalysisError(f"{path}: cannot read {what}: {e.strerror or e}")
    import stat
    if not stat.S_ISREG(st.st_mode):
        link = f" (a link to {os.path.realpath(path)})" if os.path.islink(path) else ""
        raise AnalysisError(f"{path}: is {_kind(st.st_mode)}{link}, not {what}")
    if st.st_size > limit:
        raise AnalysisError(f"{path}: {st.st_size} bytes, more than the {limit >> 20} MiB of {what}; is it one?")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # replaced since the stat
                raise AnalysisError(f"{path}: not a regular file, not {what}")
            data = f.read(limit + 1)
    except OSError as e:
        raise AnalysisError(f"{path}: cannot read {what}: {e.strerror or e}")
    if len(data) > limit:
        raise AnalysisError(f"{path}: more than the {limit >> 20} MiB of {what}; is it one?")
    return data


def read_json(path, what, bad_json_hint=""):
    """A JSON file's value. Raises AnalysisError naming the file and what it should have been
    (`what`: "a moerl audit output"): not a regular file (a FIFO, /dev/zero: refused unread),
    oversized, unreadable, not UTF-8, not JSON (with `bad_json_hint`)."""
    import json
    data = read_input_bytes(path, what)
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise AnalysisError(f"{path}: not {what}: not UTF-8 text (byte {e.start})")
    except ValueError as e:  # json.JSONDecodeError
        raise AnalysisError(f"{path}: not {what}: not valid JSON ({e}){bad_json_hint}")
    except RecursionError:
        raise AnalysisError(f"{path}: not {what}: nested too deeply{bad_json_hint}")


def write_outputs(files):
    """Writes every file of `files` ({path: str | bytes | callable(tmp_path)}) whole or not at all:
    each goes to a temporary file in its own directory first (a callable writes its temporary itself,
    e.g. a figure's savefig), and only when every one is written and flushed to disk are they
    renamed over their paths (os.replace). A full disk or any other error removes the temporaries
    and raises AnalysisError naming the file and the reason; the files already there (a --runs input
    that is also an output) are untouched. Returns the paths."""
    import tempfile
    done = []  # (tmp, path)
    try:
        for path, data in files.items():
            d, base = os.path.split(os.path.abspath(path))
            fd, tmp = tempfile.mkstemp(prefix=f".{base}.tmp-", suffix=os.path.splitext(base)[1], dir=d)
            done.append((tmp, path))
            try:
                if callable(data):
                    os.close(fd)
                    fd = None
                    data(tmp)
                    fd = os.open(tmp, os.O_RDONLY)
                else:
                    raw = data.encode("utf-8") if isinstance(data, str) else data
                    view = memoryview(raw)
                    while view:
                        view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                if fd is not None:
                    os.close(fd)
            mode = 0o666 & ~_umask()
            os.chmod(tmp, mode)
    except OSError as e:
        for tmp, _ in done:
            with contextlib.suppress(OSError):
                os.remove(tmp)
        path = done[-1][1] if done else next(iter(files), "?")
        raise AnalysisError(f"{path}: cannot be written ({e.strerror or e}); nothing written, "
                            f"the files already there are unchanged")
    except BaseException:
        for tmp, _ in done:
            with contextlib.suppress(OSError):
                os.remove(tmp)
        raise
    for tmp, path in done:
        os.replace(tmp, path)
    return [p for _, p in done]


def _umask():
    u = os.umask(0)
    os.umask(u)
    return u


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
        lost = _stdout_lost()
        print(f"{self.prefix}{_one_line(lost or message)}", file=sys.stderr)
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
            lost = _stdout_lost()  # what main printed is its result: written, or a failure
            if lost:
                self.error(lost)
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
            if e.filename is None and e.errno in (errno.ENOSPC, errno.EFBIG, errno.EIO, errno.EDQUOT):
                _stdout_lost()  # a print() of main's: files are named by their writers (write_outputs)
                self.error(f"its output could not be written to standard output ({e.strerror}): what it printed is "
                           "incomplete or missing")
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


def _stdout_lost():
    """"" when standard output takes what was printed, else the line that says it could not (a full
    disk under a redirect, /dev/full); stdout then goes to /dev/null, so that Python's exit does not
    print a second error. A reader that left (BrokenPipeError) is not a loss of ours: ""."""
    try:
        sys.stdout.flush()
        return ""
    except BrokenPipeError:
        reason = ""
    except OSError as e:
        reason = e.strerror or str(e)
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return f"its output could not be written to standard output ({reason}): what it printed is incomplete or missing" \
        if reason else ""


class _Parser(argparse.ArgumentParser):
    def __init__(self, prefix, **kwargs):
        super().__init__(**kwargs)
        self._error_prefix = prefix

    def error(self, message):
        self.print_usage(sys.stderr)
        print(f"{self._error_prefix}{_one_line(message)}", file=sys.stderr)
        sys.exit(2)
