"""Leaderboard verbs: register, join, submit, submissions, leaderboards, gpus, ranking, fetch.

Thin click commands over popcorn.client.api (the HTTP protocol), popcorn.client.results (tables
and evidence logs) and the preflight. Flags match the official popcorn CLI where
they overlap. Results go to stdout; progress and notes go to stderr, all through
failures.echo: a server's words may hold any character. What is saved (fetched code,
raw replies) is kept as the server sent it.
"""
from __future__ import annotations

import datetime as _dt
import math
import sys
from pathlib import Path

import click

from checks.preflight import SUFFIXES, leading_directives, preflight_bytes
from popcorn.cli.failures import echo, fail_cleanly
from popcorn.client import api, results
from popcorn.errors import Interrupted, PopkitError
from popcorn.evidence.files import write_atomic, write_error
from popcorn.evidence.tables import printable

POLL_S = 5.0
PROGRESS_S = 60.0  # a progress line at least this often, even when nothing changed
RUNNER_HEARTBEAT_S = 15.0  # how often the server's worker marks a running job alive
MISSED_HEARTBEATS = 4  # a running job whose heartbeat stands still this many periods gets a warning

_output_option = click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
                              help="Also write the printed result to this text file (not a source or a .jsonl log).")
_poll_option = click.option("--poll-interval", type=click.FloatRange(min=0), default=POLL_S, hidden=True)


def register(main):
    """Add this module's verbs to the `popkit` group."""
    for add in (_add_register, _add_submit, _add_submissions, _add_listings):
        add(main, fail_cleanly)


# -- verbs -----------------------------------------------------------------------------------

def _add_register(main, fail_cleanly):
    @main.command("register")
    @click.argument("provider", type=click.Choice(sorted(api.OAUTH)), required=False)
    @click.option("--reset", is_flag=True, help="Move your existing account to the new id (official: reregister).")
    @click.option("--confirm", is_flag=True, help="Switch to the new id once its login is done.")
    @fail_cleanly
    def register_verb(provider, reset, confirm):
        """Get a cli_id from the server and log in with PROVIDER to activate it.

        A cli_id that the server still accepts stays in use until `register --confirm`.
        """
        if confirm:
            echo(confirm_pending_id())
        elif provider:
            register_new_id(provider, reset)
        else:
            raise click.UsageError("name a provider (discord or github), or pass --confirm")

    @main.command("join")
    @click.argument("code")
    @fail_cleanly
    def join(code):
        """Redeem an invite CODE: closed leaderboards take your submissions afterwards."""
        boards = connect().join(code)
        echo(f"joined: {', '.join(boards)}" if boards else "code accepted (the server named no leaderboard)")


def _add_submit(main, fail_cleanly):
    @main.command("submit")
    @click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
    @click.option("--leaderboard", help="Leaderboard name.  [default: the file's #!POPCORN leaderboard]")
    @click.option("--gpu", help="GPU as the server lists it, e.g. B200.  [default: the file's #!POPCORN gpu]")
    @click.option("--mode", type=click.Choice(api.MODES), default="test", show_default=True)
    @_output_option
    @_poll_option
    @fail_cleanly
    def submit(file, leaderboard, gpu, mode, output, poll_interval):
        """Preflight FILE, upload it, follow the run and print its per-case table.

        Exits 0 only when every requested run passed.
        """
        require_result_file(output)
        # Read once: the bytes the preflight passes are the bytes sent, whatever becomes of the file meanwhile.
        sent = (file.name, file.read_bytes())
        leaderboard, gpu = preflight_target(sent, leaderboard, gpu)
        client = connect()
        if mode == "profile":
            ok = profile(client, sent, leaderboard, gpu, output)
        else:
            ok = follow(client, upload(client, sent, leaderboard, gpu, mode), mode, poll_interval, output)
        if not ok:
            sys.exit(1)


def _add_submissions(main, fail_cleanly):
    @main.group("submissions")
    def submissions():
        """Your submissions: list, show, wait, delete."""

    @submissions.command("list")
    @click.option("--leaderboard", help="Only this leaderboard.")
    @click.option("--limit", type=click.IntRange(1, 100), default=50, show_default=True)
    @fail_cleanly
    def list_verb(leaderboard, limit):
        """Your latest submissions, newest first, with their best ranked score."""
        found = connect().user_submissions(leaderboard, limit)
        echo(results.render_submission_list(found) if found else "no submissions found")

    @submissions.command("show")
    @click.argument("submission_id", type=int)
    @click.option("--code", is_flag=True, help="Also print the submitted code.")
    @fail_cleanly
    def show(submission_id, code):
        """A submission's runs, per-case tables and scores."""
        outcome = results.parse_submission(connect().submission(submission_id))
        echo(results.render_outcome(outcome))
        if code:
            echo("\n" + outcome.code)

    @submissions.command("wait")
    @click.argument("submission_id", type=int)
    @_output_option
    @_poll_option
    @fail_cleanly
    def wait(submission_id, output, poll_interval):
        """Follow a submission to its end (after Ctrl-C or a lost connection), then log it."""
        require_result_file(output)
        if not follow(connect(), submission_id, None, poll_interval, output):
            sys.exit(1)

    @submissions.command("delete")
    @click.argument("submission_id", type=int)
    @click.option("--force", is_flag=True, help="Delete without asking.")
    @fail_cleanly
    def delete(submission_id, force):
        """Delete one of your submissions (shown first; asks unless --force)."""
        client = connect()
        outcome = results.parse_submission(client.submission(submission_id))
        echo(f"submission {submission_id}: {outcome.leaderboard}, {outcome.file_name}, "
             f"{len(outcome.code.splitlines())} lines, job {outcome.job_status or 'done'}")
        if not force and not confirm_deletion(submission_id):
            echo("not deleted")
            return
        client.delete_submission(submission_id)
        echo(f"deleted submission {submission_id}")


def _add_listings(main, fail_cleanly):
    @main.command("leaderboards")
    @fail_cleanly
    def leaderboards():
        """The server's leaderboards with their access (closed boards need `join`), GPUs and deadlines."""
        echo(results.render_leaderboards(connect(require_id=False).leaderboards()))

    @main.command("gpus")
    @click.argument("leaderboard")
    @fail_cleanly
    def gpus(leaderboard):
        """The GPUs LEADERBOARD runs on, one per line."""
        for name in connect(require_id=False).gpus(leaderboard):
            echo(name)

    @main.command("ranking")
    @click.argument("leaderboard")
    @click.argument("gpu")
    @click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="Rows shown.")
    @fail_cleanly
    def ranking(leaderboard, gpu, limit):
        """The ranking on LEADERBOARD and GPU, with your rank and the gap to first place."""
        client = connect(require_id=False)
        entries = client.ranking(leaderboard, gpu)
        me = my_user_id(client, leaderboard) if client.has_id else None
        echo(results.render_ranking(entries, me, limit))

    @main.command("fetch")
    @click.argument("submission_id", type=int)
    @click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
                  help="Where to save the code.  [default: submission_ID.<suffix> here]")
    @click.option("--force", is_flag=True, help="Overwrite an existing file.")
    @fail_cleanly
    def fetch(submission_id, output, force):
        """Save a past submission's code (e.g. as the incumbent for `diff`)."""
        results.refuse_overwrite(submission_id, output, force)     # before asking the server anything
        outcome = results.parse_submission(connect().submission(submission_id))
        if not outcome.code:
            raise PopkitError(f"the server sent no code for submission {submission_id}")
        path = output or results.code_path(submission_id, outcome.file_name)
        results.refuse_overwrite(submission_id, path, force)       # made meanwhile
        write_atomic(path, outcome.code.encode())
        echo(f"saved submission {submission_id} ({outcome.leaderboard}, {outcome.file_name}) to {path}")


# -- the steps behind the verbs --------------------------------------------------------------

def connect(require_id: bool = True) -> api.Client:
    """A client for the configured server (the id optional for public listings); each retry prints a note."""
    return api.Client.from_config(require_id, on_retry=note_retry)


def note_retry(text: str) -> None:
    """A GET that failed and will be sent again: said on stderr, so a stalled server is not silent for minutes."""
    echo(f"note: {text}", err=True)


def register_new_id(provider: str, reset: bool) -> None:
    """Ask the server for a new id and print its login URL; a working id is kept until --confirm."""
    base = api.api_url()
    if base != api.DEFAULT_API_URL:
        echo(f"warning: POPCORN_API_URL is {base}, but the login URL below activates the id only on "
             f"the hosted server ({api.DEFAULT_API_URL}); on {base} the server's admin must mark it valid",
             err=True)
    keep_current = working_id()
    new_id = api.Client(on_retry=note_retry).auth_init(provider)
    path, backup = api.update_config({api.PENDING_KEY: new_id}) if keep_current else api.save_cli_id(new_id)
    if backup:
        echo(f"note: {path} could not be read as a config: the new one holds only the new id; the old one "
             f"is kept in {backup}", err=True)
    if keep_current:
        echo(f"your current cli_id works on {base} and stays in use; the new one waits in {path}")
        echo("after the login, run `popkit register --confirm` to switch to it")
    else:
        echo(f"saved a new cli_id to {path} (readable by you only)")
    echo(f"to activate it, open this URL and log in with {provider} "
         "(the link carries your id: keep it private):")
    echo(api.authorize_url(provider, new_id, reset))


def working_id() -> bool:
    """Whether ~/.popcorn.yaml holds an id the server accepts."""
    try:
        client = connect()
    except PopkitError:
        return False
    return client.id_is_valid()


def confirm_pending_id() -> str:
    """Make the id waiting since `register` the one in use, once the server accepts it."""
    path = api.config_path()
    pending = api.read_config(path).get(api.PENDING_KEY)
    if not pending:
        raise PopkitError(f"no new cli_id waits in {path}: run `popkit register discord` (or `github`) first")
    if not api.is_valid_id(pending):     # it went out as a header: "the connection broke off: InvalidHeader"
        raise PopkitError(f"the new cli_id waiting in {path} is malformed (it must be one word of printable ASCII, as "
                          "`popkit register` writes it): run `popkit register discord` (or `github`) again; your "
                          "current id stays in use")
    if not api.Client(cli_id=str(pending), on_retry=note_retry).id_is_valid():
        raise PopkitError(f"{api.api_url()} does not accept the new cli_id yet: finish the login at the URL "
                          "`popkit register` printed; your current id stays in use")
    api.save_cli_id(str(pending), path)
    return f"the new cli_id is confirmed and now in use ({path})"


def require_result_file(output: Path | None) -> None:
    """-o names the text file for the printed result: a source file (the submission itself, say) or an evidence
    log there would be replaced by it once the run ends, so such a name is refused before anything is sent; so is
    a file that cannot be written (the run ended in that error, after the upload and the wait)."""
    if output is None:
        return
    if output.suffix.lower() in SUFFIXES + (".jsonl",):
        raise PopkitError(f"-o {output}: the result is a text table, and a {output.suffix} file is a source or an "
                          "evidence log that it would replace: name a text file (-o result.txt); nothing was sent")
    why = write_error(output)
    if why:
        raise PopkitError(f"-o {output}: cannot be written ({why}); nothing was sent")


def preflight_target(file: tuple[str, bytes], leaderboard: str | None, gpu: str | None) -> tuple[str, str]:
    """Preflight FILE (its name and bytes), refusing one that breaks a rule; the leaderboard and GPU to use.

    The server needs no directives, so --leaderboard and --gpu stand in for missing ones: the file is checked
    under them, so a .py file must define the functions of the board it goes to.
    """
    name, data = file
    refuse_mixed_case_board(name, data)
    options = {"leaderboard": leaderboard.lower() if leaderboard else None, "gpu": gpu}
    report = preflight_bytes(data, name, expect_leaderboard=options["leaderboard"],
                             stand_in={key: value for key, value in options.items() if value})
    missing = [key for key in options if key not in report.directives]
    # A directive neither the file nor an option gives: said below with the option that would stand in for it.
    errors = [e for e in report.errors if not any(f"'#!POPCORN {key} " in e for key in missing)]
    errors += [f"{name}: names no {key}: add '#!POPCORN {key} ...' to its leading comment block "
               f"or pass --{key}" for key in missing if not options[key]]
    for prefix, lines in (("note", report.notes), ("warning", report.warnings), ("preflight", errors)):
        for line in lines:
            echo(f"{prefix}: {line}", err=True)
    if errors:
        raise PopkitError(f"{name} breaks {len(errors)} leaderboard rule(s): not uploaded")
    if missing:
        used = ", ".join(f"--{key} {options[key]}" for key in missing)
        echo(f"note: {name} has no {' or '.join(missing)} directive: using {used}", err=True)
    return options["leaderboard"] or report.directives["leaderboard"], options["gpu"] or report.directives["gpu"]


def refuse_mixed_case_board(name: str, data: bytes) -> None:
    """The URL carries the board in lowercase and the server rejects a directive that differs from it."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return  # the preflight reports it
    board = leading_directives(text).get("leaderboard")
    if board and board != board.lower():
        raise PopkitError(f"{name}: '#!POPCORN leaderboard {board}' must be lowercase ({board.lower()!r}): "
                          "the server looks the board up in lowercase and rejects a directive that differs")


def upload(client: api.Client, file: tuple[str, bytes], leaderboard: str, gpu: str, mode: str) -> int:
    """Submit FILE (its name and bytes) for a background run; the submission id."""
    echo(f"submitting {file[0]} to {leaderboard} on {gpu} (mode {mode})", err=True)
    try:
        accepted = client.submit(leaderboard, gpu, mode, file)
    except KeyboardInterrupt:
        raise Interrupted("interrupted during the upload; it may have been accepted: "
                          f"see `popkit submissions list --leaderboard {leaderboard}`") from None
    submission_id = accepted["details"]["id"]
    echo(results.describe_progress({"id": submission_id, "job": {"status": accepted.get("status")},
                                    "runner_queue": accepted.get("runner_queue")}), err=True)
    return submission_id


class Progress:
    """Prints '[elapsed] status; queue' when it changes, and at least every PROGRESS_S; warns once
    when a running job's heartbeat stands still (a restarted server leaves such jobs behind)."""

    def __init__(self, submission_id: int):
        self.submission_id = submission_id
        self.last_text, self.last_s = None, -math.inf
        self.beat, self.beat_s, self.warned = None, 0.0, False

    def __call__(self, elapsed_s: float, submission: dict) -> None:
        text = results.describe_progress(submission)
        if text != self.last_text or elapsed_s - self.last_s >= PROGRESS_S:
            echo(f"[{elapsed_s:5.0f}s] {text}", err=True)
            self.last_text, self.last_s = text, elapsed_s
        self.watch_heartbeat(elapsed_s, submission.get("job") or {})

    def watch_heartbeat(self, elapsed_s: float, job: dict) -> None:
        # Timed on this machine's clock, from the first poll that saw the heartbeat: no clock skew.
        beat = job.get("last_heartbeat")
        if job.get("status") != "running" or beat != self.beat:
            self.beat, self.beat_s, self.warned = beat, elapsed_s, False
            return
        silent_s = elapsed_s - self.beat_s
        if not self.warned and silent_s >= MISSED_HEARTBEATS * RUNNER_HEARTBEAT_S:
            echo(f"warning: submission {self.submission_id} has had no heartbeat for {silent_s:.0f} s "
                 f"(a running job sends one every {RUNNER_HEARTBEAT_S:g} s): the server may have restarted "
                 "and the job may never finish. Ctrl-C stops following (not the job); "
                 f"`popkit submissions show {self.submission_id}` looks again later", err=True)
            self.warned = True


def follow(client: api.Client, submission_id: int, run_mode: str | None, interval_s: float,
           output: Path | None) -> bool:
    """Poll to the end, save the raw reply, log and print the result; True when all passed."""
    resume = f"popkit submissions wait {submission_id}"
    try:
        data, raw = client.wait(submission_id, interval_s=interval_s, on_poll=Progress(submission_id))
    except KeyboardInterrupt:
        echo(f"\ninterrupted; submission {submission_id} goes on on the server. Resume with: {resume}",
             err=True)
        sys.exit(130)
    except PopkitError as exc:
        if isinstance(exc, api.HTTPError) and exc.status == 401:     # mended by registering again
            raise PopkitError(f"{exc}; then resume with `{resume}`") from None
        if not api.is_transient(exc):         # a 403 or 404 would only come again
            raise
        raise PopkitError(f"{exc}; resume with `{resume}`") from None
    try:
        raw_path = results.save_raw(raw, f"{submission_id}.json")
        outcome = results.parse_submission(data)
        run_mode = run_mode or outcome.run_mode
        logged = results.log_outcome(outcome, run_mode, raw_path)
    except OSError as exc:       # the result itself is safe on the server: say how to get it
        where = f"{exc.filename}: " if exc.filename else ""
        raise PopkitError(f"{where}{exc.strerror or exc}: the finished result could not be saved; it stays on the "
                          f"server (`popkit submissions show {submission_id}` prints it, `{resume}` saves and logs "
                          "it)") from None
    except KeyboardInterrupt:    # the reply perhaps saved and not logged: waiting again mends both
        raise Interrupted(f"interrupted while saving the result of submission {submission_id}: it stays on the "
                          f"server; `{resume}` saves and logs it (once)") from None
    if logged is None:
        echo(f"submission {submission_id} is already in the evidence log: not logged again", err=True)
    elif outcome.problem.note:
        echo(f"note: {outcome.problem.note}", err=True)
    failures = outcome.failures(run_mode)
    verdict = "FAIL: " + "; ".join(failures) if failures else "PASS"
    emit(f"{results.render_outcome(outcome)}\n\n{verdict}", output)
    echo(f"raw result saved to {raw_path}", err=True)
    return not failures


def profile(client: api.Client, file: tuple[str, bytes], leaderboard: str, gpu: str, output: Path | None) -> bool:
    """Profile FILE (its name and bytes) over the event stream; save report and traces; True when every run passed."""
    echo(f"profiling {file[0]} on {leaderboard} on {gpu} (the connection stays open to the end)",
         err=True)

    def show_status(status: dict) -> None:
        elapsed = results.number(status.get("elapsed_time")) or 0.0
        echo(f"[{elapsed:5.0f}s] {status.get('status')}", err=True)

    try:
        raw = client.submit_profile(leaderboard, gpu, file, on_status=show_status)
    except KeyboardInterrupt:
        raise Interrupted("interrupted: nothing was saved; once uploaded, the profile run goes on at the server, "
                          "where it cannot be followed again") from None
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    code = file[1].decode("utf-8", errors="replace")     # the file's own problem reads its case specs
    result = results.save_profile(raw, results.log_dir() / "leaderboard" / f"profile-{stamp}",
                                  results.result_problem(leaderboard, code).record)
    emit(f"{results.render_profile(result)}\n\n{'PASS' if result.ok else 'FAIL'}", output)
    echo(f"profile result saved in {result.directory}", err=True)
    return result.ok


def confirm_deletion(submission_id: int) -> bool:
    """Ask before a deletion: yes only for 'y' or 'yes'. Read here, not by click.confirm, which turns Ctrl-C and
    closed input alike into "Aborted!" and exit 1: Ctrl-C ends as in every verb (exit 130), closed input refuses."""
    kept = f"submission {submission_id} was not deleted"
    try:
        answer = input("delete it? [y/N]: ")
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted: {kept}") from None
    except EOFError:
        echo()     # ends the prompt's line
        raise PopkitError(f"no answer (the input is closed): {kept}; --force deletes without asking") from None
    return answer.strip().lower() in ("y", "yes")


def my_user_id(client: api.Client, leaderboard: str) -> str | None:
    """The user's id, read from their latest submission on the board; None without one, or when the server does not
    tell (said in a note: the ranking itself is public, and is shown all the same)."""
    try:
        latest = client.user_submissions(leaderboard, limit=1)
        submission_id = latest[0].get("id") if latest else None
        if not isinstance(submission_id, int) or isinstance(submission_id, bool):
            return None
        user_id = client.submission(submission_id).get("user_id")
    except PopkitError as exc:
        echo(f"note: your own rank is not marked: {exc}", err=True)
        return None
    return None if user_id is None else str(user_id)


def emit(text: str, output: Path | None) -> None:
    """Print TEXT, and write what was printed to OUTPUT as UTF-8 (a server's text may hold any character, whatever
    the locale)."""
    text = printable(text)
    echo(text)
    if output:
        write_atomic(output, text + "\n")
