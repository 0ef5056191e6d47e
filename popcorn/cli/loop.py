"""The core loop's verbs: build, check, bench, diff, promote."""
from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import click

from popcorn.cli.failures import fail_cleanly, loads_torch
from popcorn.errors import PopkitError
from popcorn.evidence import logs
from popcorn.evidence.tables import fmt_speedup

ROOT = logs.ROOT
DEFAULT_SUBMISSION = ROOT / "submission.py"


def _progress(text: str) -> None:
    click.echo(f"  .. {text}", err=True)


def _print_outcome(outcome, label: str) -> None:
    from checks.runner import header_line
    for note in outcome.notes:
        click.echo(f"note: {note}")
    rec = outcome.record
    click.echo(header_line(label, rec))
    click.echo(outcome.table)
    if rec.get("geomean_us") is not None:
        line = f"geomean {rec['geomean_us']:,.1f} us"
        if rec.get("baseline_geomean_us"):
            line += (f"; {rec['baseline']} {rec['baseline_geomean_us']:,.1f} us"
                     f" ({fmt_speedup(rec['baseline_geomean_us'] / rec['geomean_us'])})")
        if rec.get("incumbent_geomean_us"):
            line += f"; incumbent {rec['incumbent_geomean_us']:,.1f} us"
        click.echo(line)
    click.echo("PASS" if outcome.passed else "FAIL")


def _exit_with(outcome) -> None:
    """The verb's end once its outcome is shown: exit 0 when it passed; a record that did not reach the log
    is an error line, so that the run's table is not lost with it."""
    if outcome.log_error:
        raise PopkitError(outcome.log_error)
    raise SystemExit(0 if outcome.passed else 1)


def scratch_build_path(problem: str, checkout: Path) -> Path:
    """Where a verb builds PROBLEM's parts when no file is given: a temporary folder of this checkout's own (two
    checkouts on one machine, a project and its snapshots on a GPU host, wrote one /tmp/popkit-builds/NAME.py)."""
    tag = hashlib.sha256(str(checkout).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / "popkit-builds" / tag / f"{problem}.py"


def _submission_for(problem: str, given: Path | None) -> Path:
    """The given file; else submission.py when it is built for PROBLEM (its leaderboard, and its parts when
    popkit built it: two problems may share a board); else PROBLEM's parts, built now to a file outside the
    tree (so checking one problem right after building another just works)."""
    if given is not None:
        return given
    import build as builder
    from checks.problems import load_problem
    from checks.preflight import leading_directives
    from popcorn.evidence.provenance import built_from
    board = load_problem(problem).leaderboard
    if DEFAULT_SUBMISSION.is_file():
        text = DEFAULT_SUBMISSION.read_text(encoding="utf-8", errors="replace")
        parts_of = built_from(text)        # None: a file popkit did not build
        if leading_directives(text).get("leaderboard") == board and parts_of in (None, problem):
            _warn_if_older_than_parts(problem)
            return DEFAULT_SUBMISSION
    target = scratch_build_path(problem, Path(builder.__file__).resolve().parent)
    builder.build(problem, target)
    click.echo(f"note: {DEFAULT_SUBMISSION.name} is not built for {problem}: built parts/{problem} to {target}")
    return target


def _warn_if_older_than_parts(problem: str) -> None:
    """A part edited since `popkit build` would otherwise be checked, timed or diffed as the old build."""
    import build as builder
    from popcorn.evidence.provenance import part_hashes
    try:
        current = builder.part_hashes(problem)
    except PopkitError as exc:      # a manifest mid-edit: the built file still runs
        click.echo(f"warning: parts/{problem} cannot be read now ({exc}): this run is of "
                   f"{DEFAULT_SUBMISSION.name} as built")
        return
    built = part_hashes(DEFAULT_SUBMISSION)
    changed = sorted(p for p in set(built) | set(current) if built.get(p) != current.get(p))
    if built and changed:
        click.echo(f"warning: {DEFAULT_SUBMISSION.name} is older than parts/{problem} (changed since its build: "
                   f"{', '.join(changed)}): this run is of the file as built; `popkit build {problem}` brings "
                   "the changes in")


def _run_logged(mode: str, problem: str, submission: Path | None, cases, device: str | None, log_path: Path,
                run, show=lambda outcome: None, seeds: int = 0, harness: str | None = None,
                rounds: int | None = None, baseline: bool = False, incumbent: str | None = None,
                robust: bool = False, budget: float | None = None) -> None:
    """check, bench and diff: judge --log, --device, --case, --seeds, --rounds, --robust, --harness, --baseline,
    --incumbent and --budget before any build (a wrong one ends the verb at once: a GPU that is not there, the CPU
    for a harness problem, a reference without ref_kernel), then RUN(the file to run) under Ctrl-C's guard, show its
    outcome (and SHOW's lines) and exit with its code."""
    from checks import runner
    from checks.problems import load_problem
    logs.require_appendable(log_path)
    prob = load_problem(problem)
    runner.require_device_for(prob, runner.resolve_device(device), runner.resolve_backend(prob, harness, mode))
    runner.require_options(problem, mode, list(cases), seeds, harness, rounds, baseline, incumbent, robust, budget,
                           device)
    done = []                              # the outcome, once there: Ctrl-C's line says whether it was logged
    with runner.interruptible(mode, problem, log_path, done):
        done.append(run(_submission_for(problem, submission)))
        _print_outcome(done[0], f"{mode} {problem}")
        show(done[0])
    _exit_with(done[0])


def _print_changed_parts(outcome) -> None:
    changed = outcome.record["changed_parts"]
    click.echo("changed parts: " + ("unknown (the candidate or the incumbent has no popkit part hashes: "
                                    "the folder's reference, or a file popkit did not build)"
                                    if changed is None else ", ".join(changed) or "none"))


def register(main):
    """Add this module's verbs to the `popkit` group."""

    @main.command("build")
    @click.argument("problem", required=False)
    @click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_SUBMISSION,
                  show_default=True, help="where to write the single file (a .py name)")
    # exists=True: a missing FILE was told "no leaderboard or gpu directive: assumed ..." before "cannot read"
    @click.option("--check", "check_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                  help="only run the preflight on FILE (any file), build nothing")
    @fail_cleanly
    @loads_torch
    def build_cmd(problem, output, check_file):
        """Build PROBLEM's parts into one submission file (and preflight it)."""
        import build as builder
        from checks.preflight import preflight_file
        if check_file:
            board, record_facts = None, None
            if problem:
                from checks.problems import load_problem
                record = load_problem(problem)
                board = record.leaderboard                     # e.g. vectoradd's board is vectoradd_v2
                # The record gives the board and GPU, as submit's --leaderboard/--gpu do: a file without the
                # directives is checked under them, and told so.
                record_facts = {"leaderboard": board, "gpu": record.gpu}
            report = preflight_file(check_file, expect_leaderboard=board, stand_in=record_facts)
            missing = [key for key in record_facts or {} if key not in report.directives]
            if missing:
                assumed = ", ".join(f"{key} {record_facts[key]}" for key in missing)
                click.echo(f"note: {check_file.name} has no {' or '.join(missing)} directive: assumed {assumed} "
                           f"from {problem}'s record")
        elif not problem:
            raise PopkitError("name a problem (popkit build qr_v2) or a file to check (--check FILE)")
        else:
            result = builder.build(problem, output)
            report = result.preflight
            click.echo(f"built {output} ({len(result.text.encode()):,} bytes, {len(result.parts)} parts)")
        for line in report.notes + [f"warning: {w}" for w in report.warnings]:
            click.echo(line)
        if not report.ok:
            raise PopkitError("; ".join(report.errors))
        click.echo("preflight: ok")

    submission_opt = click.option("--submission", type=click.Path(dir_okay=False, path_type=Path),
                                  help="the file to run (default: submission.py when it is built for PROBLEM, "
                                       "else PROBLEM's parts built to a temporary file)")
    case_opt = click.option("--case", "cases", multiple=True,
                            help="a case spec instead of the official list, in the task's keys, "
                                 "e.g. 'batch: 4; n: 64; cond: 1; seed: 7; case: dense' or 'size: 1024; seed: 5'")
    device_opt = click.option("--device", help="cuda, cuda:N or cpu (default: cuda when available)")
    harness_opt = click.option("--harness", type=click.Choice(["native", "official", "both"]),
                               help="native: our generators and gates (default where checks/native/PROBLEM.py "
                                    "exists); official: the competition folder's eval.py (the default otherwise); "
                                    "both: run the two and compare (check only)")
    log_opt = click.option("--log", "log_path", type=click.Path(dir_okay=False, path_type=Path),
                           default=logs.DEFAULT_LOG, show_default=True)
    budget_opt = click.option("--budget", type=float, metavar="SECONDS",
                              help="stop at this many seconds (native checker): the cases finished by then are "
                                   "logged with their results, the rest as not run (the run fails); for a device "
                                   "call's time limit")

    def run_options(func):
        """--case, --device, --harness, --log and --budget, in this order: the options check, bench and diff share."""
        for option in (budget_opt, log_opt, harness_opt, device_opt, case_opt):
            func = option(func)
        return func

    @main.command("check")
    @click.argument("problem")
    @submission_opt
    @click.option("--seeds", default=0, show_default=True, metavar="K", help="repeat every case with K more seeds")
    @click.option("--robust", is_flag=True, help="add the robustness suite: odd sizes around every power of two, "
                                                  "every input family, batches of 1 and 3")
    @run_options
    @fail_cleanly
    @loads_torch
    def check_cmd(problem, submission, seeds, robust, cases, device, harness, log_path, budget):
        """Run every official test case through the gates, the way the grader does."""
        from checks import runner
        _run_logged("check", problem, submission, cases, device, log_path,
                    lambda file: runner.check(problem, file, list(cases), seeds, device, _progress, log_path,
                                              harness, robust, budget_s=budget),
                    seeds=seeds, harness=harness, robust=robust, budget=budget)

    @main.command("bench")
    @click.argument("problem")
    @submission_opt
    @click.option("--baseline", is_flag=True, help="also time the reference (torch, or the folder's ref_kernel) "
                                                   "in the same run; a case's baseline logged by an earlier "
                                                   "passing bench on the same GPU and torch is reused (marked *)")
    @click.option("--fresh-baseline", is_flag=True, help="--baseline, timing every baseline again (no reuse)")
    @run_options
    @fail_cleanly
    @loads_torch
    def bench_cmd(problem, submission, baseline, fresh_baseline, cases, device, harness, log_path, budget):
        """Grader-style timing of every benchmark case; prints the geomean."""
        from checks import runner
        _run_logged("bench", problem, submission, cases, device, log_path,
                    lambda file: runner.bench(problem, file, baseline or fresh_baseline, list(cases), device,
                                              _progress, log_path, harness, fresh_baseline=fresh_baseline,
                                              budget_s=budget),
                    harness=harness, baseline=baseline or fresh_baseline, budget=budget)

    @main.command("diff")
    @click.argument("problem")
    @submission_opt
    # Text as typed, not a click.Path: that would turn './reference' into the word 'reference'.
    @click.option("--incumbent", metavar="FILE",
                  help="the file to beat (default: logs/incumbents/PROBLEM.py); 'reference' for the "
                       "competition folder's ref_kernel (./reference for a file of that name)")
    @click.option("--rounds", default=3, show_default=True, help="alternating A/B rounds per case (>= 3)")
    @run_options
    @fail_cleanly
    @loads_torch
    def diff_cmd(problem, submission, incumbent, rounds, cases, device, harness, log_path, budget):
        """Candidate against incumbent, case by case; fails on any regression."""
        from checks import runner
        from popcorn.promote import incumbent_path
        _run_logged("diff", problem, submission, cases, device, log_path,
                    lambda file: runner.diff(problem, file, incumbent or incumbent_path(problem), rounds,
                                             list(cases), device, _progress, log_path, harness, budget_s=budget),
                    show=_print_changed_parts, harness=harness, rounds=rounds, incumbent=incumbent, budget=budget)

    @main.command("promote")
    @click.argument("problem")
    @click.option("--submission", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_SUBMISSION,
                  show_default=True, help="the file to make the incumbent (built for PROBLEM)")
    @click.option("--force", is_flag=True,
                  help="skip the GPU evidence (unknown problems, other problems' files and files that are not "
                       "built submissions are still refused)")
    # The evidence is read, not written: a log named with --log must exist (a typo is an error); the
    # default one may be missing (a fresh project). Hence no click default here.
    @click.option("--log", "log_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                  help="the evidence log to read  [default: logs/performance.jsonl]")
    @fail_cleanly
    @loads_torch
    def promote_cmd(problem, submission, force, log_path):
        """Make the candidate the incumbent that `diff` compares against."""
        from popcorn.promote import promote
        target = promote(problem, submission, log_path=log_path or logs.DEFAULT_LOG, force=force)
        click.echo(f"promoted {submission} -> {target}")
