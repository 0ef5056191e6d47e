"""What the scripts in scripts/ share at their command line: the built file they import, the kernel benches'
argument handling, and how a run ends (one line for an error, exit 130 and one line for Ctrl-C)."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Callable

import torch

from checks.problems import Problem, load_problem
from checks.runner import require_submission_for
from checks.worker import ImportFailed, import_each
from popcorn.errors import PopkitError, ProblemError
from popcorn.evidence.files import write_error


def argument_parser(doc: str) -> argparse.ArgumentParser:
    """A script's parser, whose --help prints its whole docstring as written: the first line alone left out the
    usage, the inputs' formats and the exit codes."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def built_file(path: str, prob: Problem | None = None) -> str:
    """PATH when it is a file and, given PROB, a submission for it (runner.require_submission_for: it defines
    the entry points and names no other leaderboard); else a PopkitError in one line, before the import (on a GPU
    host a CUDA compile, then an AttributeError traceback or every case failed)."""
    if not os.path.isfile(path):
        raise PopkitError(f"{path}: no such file (build one: popkit build PROBLEM -o FILE.py)")
    if prob is not None:
        try:
            require_submission_for(prob, Path(path), "file")
        except OSError as exc:
            raise PopkitError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    return path


def import_built(path: str, module_name: str):
    """The built file at PATH imported as the verbs' worker imports it (checks.worker.import_each, its module
    named after MODULE_NAME); a file that fails at import (a syntax error, a raise, a sys.exit, a CUDA compile
    error) is one PopkitError naming it, not the import's traceback."""
    try:
        return import_each({module_name: path})[module_name]
    except ImportFailed as exc:
        raise PopkitError(str(exc)) from None


def json_output(path: str | None) -> str | None:
    """--json OUT, which a script rewrites after each case: a folder, or a place where no file can be written, is
    a PopkitError before the run (the first write's OSError was a traceback once a case had been timed)."""
    if path is None:
        return None
    if Path(path).is_dir():
        raise PopkitError(f"--json {path}: a folder; name the file to write")
    why = write_error(path)
    if why is not None:
        raise PopkitError(f"--json {path}: cannot write it there ({why})")
    return path


def as_global(value):
    """A JSON value as the route's tables hold it: lists of rows become tuples of tuples."""
    return tuple(tuple(row) if isinstance(row, list) else row for row in value) if isinstance(value, list) else value


def route_globals(text: str, option: str) -> dict:
    """OPTION's JSON object of module globals to set (as a sweep_route variant), e.g.
    '{"UPDATE_RESIDENT": [[1073741824, 1, 4]]}'; anything else is a PopkitError naming OPTION."""
    try:
        overrides = json.loads(text)
    except ValueError as exc:
        raise PopkitError(f"{option} {text}: not JSON ({exc})") from None
    if not isinstance(overrides, dict):
        raise PopkitError(f'{option} {text}: need an object of globals, e.g. {{"BLOCK_NB": [[1073741824, 64]]}}')
    return overrides


def set_globals(module, overrides: dict, label: str) -> None:
    """Set OVERRIDES on the built MODULE; a name it does not define is a PopkitError (a misspelt tunable
    would otherwise run the route's default under LABEL)."""
    unknown = sorted(key for key in overrides if not hasattr(module, key))
    if unknown:
        raise PopkitError(f"{label}: the built file defines no {', '.join(unknown)}")
    for key, value in overrides.items():
        setattr(module, key, as_global(value))


def bench_each_built_file(argv: list[str], doc: str, bench, problem: str) -> None:
    """The command line of a kernel bench script: -h or --help prints DOC; else every argument must be a
    submission built for PROBLEM (checked before the first run, so a typo in the last costs nothing) and the
    machine must have a CUDA GPU, then bench(path, tag) for each, tagged v0:NAME, v1:NAME, ... in argument order."""
    if "-h" in argv or "--help" in argv:
        print(doc)
        raise SystemExit(0)
    if not argv:
        print(f"usage: {doc.splitlines()[2].split(': ', 1)[-1]} (--help says more)", file=sys.stderr)
        raise SystemExit(2)
    options = [arg for arg in argv if arg.startswith("-")]
    if options:        # it was looked for as a file: "--json: no such file"
        raise PopkitError(f"{options[0]}: not an option: this script takes built files only (--help says more)")
    prob = load_problem(problem)
    for path in argv:
        built_file(path, prob)
    if not torch.cuda.is_available():
        raise PopkitError("a kernel bench times CUDA kernels: this machine has no CUDA GPU (run it on a GPU host)")
    for i, path in enumerate(argv):
        bench(path, f"v{i}:{os.path.basename(path)}")


def run_main(main: Callable[[], int | None], name: str) -> None:
    """Run a script's MAIN and exit with its code: a PopkitError or ProblemError is 'error: ...' and exit 2,
    Ctrl-C is one line and exit 130 (what a script wrote as it went, --json tables included, stays), and a
    reader that went away (`| head`) ends it quietly."""
    try:
        code = main()
    except (PopkitError, ProblemError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print(f"interrupted: {name} stopped (Ctrl-C); what it printed or wrote so far stands", file=sys.stderr)
        code = 130
    except BrokenPipeError:           # nothing to say, and nowhere to say it; the exit's flush must not fail
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    raise SystemExit(code or 0)
