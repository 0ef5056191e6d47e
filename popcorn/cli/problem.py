"""`popkit problem add | list | show`: the problems this project knows, and adding one from its folder."""
from __future__ import annotations

from pathlib import Path

import click

from popcorn.cli.failures import fail_cleanly, loads_torch
from popcorn.evidence.tables import render_table


def _kind(prob) -> str:
    return "native" if prob.native is not None else "harness"


def register(main):
    """Add the `problem` group to the `popkit` group."""

    @main.group("problem")
    def problem_group():
        """The problems popkit knows: add one from a competition folder, list them, show one."""

    @problem_group.command("add")
    @click.argument("name")
    @click.option("--from", "source", required=True, type=click.Path(path_type=Path),
                  help="the competition's problem folder (task.yml, reference.py, eval.py ...)")
    @click.option("--force", is_flag=True, help="refresh an existing problem's record (its parts are kept)")
    @click.option("--leaderboard", help="the leaderboard name, when the folder's index does not give it")
    @fail_cleanly
    @loads_torch
    def add_cmd(name, source, force, leaderboard):
        """Record problem NAME from its folder and scaffold parts/NAME/ so `popkit build NAME` works at once."""
        from checks.problem_add import add_problem
        from checks.problems import ENTRY_POINT, load_problem
        result = add_problem(name, source, force=force, leaderboard=leaderboard)
        verb = "refreshed" if result.replaced else "added"
        click.echo(f"{verb} {name}: leaderboard {result.leaderboard}, {result.tests} tests, "
                   f"{result.benchmarks} benchmarks -> {result.record}")
        for path in result.created:
            click.echo(f"  created {path}")
        for path in result.kept:
            click.echo(f"  kept {path}")
        if result.packages:
            listed = ("the new manifest's packages list them" if any(p.name == "manifest.yml" for p in result.created)
                      else "add those your parts import to the manifest's packages")
            click.echo(f"packages: {', '.join(result.packages)} (third-party modules the folder's templates and "
                       f"reference.py import; {listed})")
        if result.entry_points != [ENTRY_POINT]:
            click.echo(f"note: its eval.py calls {', '.join(result.entry_points)}, not {ENTRY_POINT}: a scaffolded "
                       "route has a stub for each, which fails until you write it")
        elif result.no_ref_kernel:
            click.echo(f"note: no ref_kernel to start from ({result.no_ref_kernel}): a scaffolded route's "
                       f"{ENTRY_POINT} raises NotImplementedError until you write it")
        kind = _kind(load_problem(name))
        click.echo(f"kind: {kind} ({'our gates' if kind == 'native' else 'the folder' + chr(39) + 's eval.py'}); "
                   f"next: popkit build {name} && popkit check {name}")

    @problem_group.command("list")
    @fail_cleanly
    @loads_torch
    def list_cmd():
        """Every problem with its kind, leaderboard and case counts (an unreadable record is named, not fatal)."""
        from checks.problems import known_problems, load_problem
        from popcorn.errors import ProblemError
        rows, broken = [], []
        for name in known_problems():
            try:
                prob = load_problem(name)
            except ProblemError as exc:
                rows.append([name, "unreadable", "-", "-", "-", "-"])
                broken.append(str(exc))
                continue
            rows.append([name, _kind(prob), prob.leaderboard, ", ".join(prob.gpus), len(prob.tests),
                         len(prob.benchmarks)])
        click.echo(render_table(["problem", "kind", "leaderboard", "gpus", "tests", "benchmarks"], rows, {4, 5}))
        for line in broken:
            click.echo(f"warning: {line}", err=True)

    @problem_group.command("show")
    @click.argument("name")
    @fail_cleanly
    @loads_torch
    def show_cmd(name):
        """One problem: its facts, where its folder is on this machine, the packages its built file may import,
        and its case lists."""
        from build import load_manifest
        from checks import task_folder
        from checks.problems import format_spec, load_problem, record_path, world_size
        from popcorn.errors import PopkitError, ProblemError
        prob = load_problem(name)
        try:
            folder = str(task_folder.harness_folder(prob))
        except ProblemError as exc:
            folder = f"not found ({exc})"
        try:
            listed = ", ".join(load_manifest(name)["packages"]) or "none (torch and the standard library)"
        except PopkitError as exc:
            listed = f"unknown ({exc})"
        click.echo(f"{name}: {_kind(prob)} problem, leaderboard {prob.leaderboard} on {', '.join(prob.gpus)}")
        click.echo(f"record: {record_path(name)}")
        click.echo(f"folder: {folder}")
        click.echo("timeouts: " + ", ".join(f"{k} {v} s" for k, v in prob.timeouts_s.items()))
        click.echo(f"ranking: {prob.ranking or '-'}")
        click.echo(f"eval.py calls: {', '.join(prob.entry_points)}")
        click.echo(f"packages: {listed}")
        if prob.multi_gpu:
            click.echo(f"multi-GPU: each case runs on world_size GPUs (up to {world_size(prob.tests + prob.benchmarks)}"
                       "): check, bench and diff need a host with that many")
        for label, specs in (("tests", prob.tests), ("benchmarks", prob.benchmarks)):
            click.echo(f"{label} ({len(specs)}):")
            for spec in specs:
                click.echo(f"  {format_spec(spec)}")
