#!/usr/bin/env bash
# Run a batch of popkit verbs on a GPU host and write their records and tables to one folder.
#
#   scripts/gpu_session.sh [-o DIR] [-a FILE.tgz] "check qr_v2 --seeds 2" "bench qr_v2 --baseline" "diff eigh ..."
#
# Each quoted command is a check, bench or diff verb with its options. The problems the commands name are
# built first (DIR/builds/PROBLEM.py); each command then runs with --submission DIR/builds/PROBLEM.py and
# --log DIR/performance.jsonl, and its table goes to DIR/NN-VERB-PROBLEM.txt. DIR/gpu.txt names the GPU
# (from nvidia-smi; on a host without nvidia-smi, a warning and no gpu.txt).
# The CUDA builds go to a fresh extension cache (outside DIR, removed at the end), so each problem's first
# record holds its cold compile time. DIR defaults to a new folder under ${TMPDIR:-/tmp}; a DIR that holds
# another run is refused. -a FILE.tgz keeps one archive of DIR, written anew after the builds and after each
# verb: for a transport that returns a few files a call (a device tool's output folder), where DIR's dozen
# files would lose some, performance.jsonl among them, and where a call killed at its limit keeps the verbs
# that finished. Ctrl-C stops the verb running (which logs nothing) and the batch, exit 130; the verbs before it
# keep their records and tables in DIR. Bring DIR back to your working copy and run
#   popkit merge DIR/performance.jsonl --tables DIR
# to add the records to logs/performance.jsonl and the tables to logs/device/ (or bring FILE.tgz back and run
# `popkit merge FILE.tgz`: the same, and the builds unpacked to .popkit/builds/, each with its promote command).
# Run it from the repository root; a copy without .git records the commit from POPKIT_COMMIT (commit first,
# pass its sha).
# PYTHON picks the interpreter (default: .venv/bin/python when present, else python3).
set -u -o pipefail
export PYTHONUNBUFFERED=1

# -h/--help: the comment above, from any folder.
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac

# The verbs run as `python -m popcorn` from here: elsewhere they fail, or run another copy's popcorn.
root=$(cd "$(dirname "$0")/.." && pwd -P)
[ "$(pwd -P)" = "$root" ] || { echo "error: run scripts/gpu_session.sh from the repository root: cd $root" >&2; exit 2; }

out="${TMPDIR:-/tmp}/popkit-run-$(date -u +%Y%m%dT%H%M%SZ)"
archive=""
while [ "${1:-}" = "-o" ] || [ "${1:-}" = "-a" ]; do
  [ $# -ge 2 ] || { echo "error: $1 needs a $([ "$1" = -o ] && echo folder || echo file)" >&2; exit 2; }
  if [ "$1" = "-o" ]; then out=$2; else archive=$2; fi
  shift 2
done
case "$archive" in
  ""|*.tgz|*.tar.gz) ;;
  *) echo "error: -a $archive: name the archive FILE.tgz (or .tar.gz)" >&2; exit 2 ;;
esac
[ $# -ge 1 ] || { echo "error: name at least one verb, e.g. \"check qr_v2\" (scripts/gpu_session.sh --help)" >&2; exit 2; }
if [ -x .venv/bin/python ]; then PYTHON=${PYTHON:-.venv/bin/python}; else PYTHON=${PYTHON:-python3}; fi

problems=()
for command in "$@"; do
  read -r verb problem _ <<< "$command"
  case "$verb" in
    check|bench|diff) ;;
    *) echo "error: \"$command\": only check, bench and diff write records (got '${verb:-nothing}')" >&2; exit 2 ;;
  esac
  [ -n "${problem:-}" ] || { echo "error: \"$command\" names no problem" >&2; exit 2; }
  # The second word is the problem the batch builds: an option there was built as one (`popkit build --seeds`).
  [[ $problem != -* ]] || { echo "error: \"$command\": put the problem right after the verb ($verb PROBLEM" \
                                 "$problem ...)" >&2; exit 2; }
  [[ " ${problems[*]} " == *" $problem "* ]] || problems+=("$problem")
  # The verb runs through eval: an unclosed quote failed it there, after every problem had been built.
  bash -n <<< ": $command" 2>/dev/null || { echo "error: \"$command\": a quote is not closed" >&2; exit 2; }
done
if ! git rev-parse --git-dir >/dev/null 2>&1 && [ -z "${POPKIT_COMMIT:-}" ]; then
  echo "warning: no git repository and no POPKIT_COMMIT: the records will name no commit" >&2
fi

# A folder that already holds a run's records would mix two runs: the records of both in one log, and this
# run's tables over the other's NN-VERB names (a warm GPU host keeps /tmp between calls).
if [ -e "$out/performance.jsonl" ] || [ -e "$out/builds" ]; then
  echo "error: $out already holds a run (performance.jsonl or builds/): give -o a new folder" >&2
  exit 2
fi
[ ! -e "$out" ] || [ -d "$out" ] || { echo "error: -o $out: a file; give -o a folder" >&2; exit 2; }
[ -e "$out" ] && made_out=0 || made_out=1
mkdir -p "$out/builds" || exit 1
if [ -n "$archive" ]; then
  mkdir -p "$(dirname "$archive")" && archive="$(cd "$(dirname "$archive")" && pwd -P)/$(basename "$archive")" || exit 1
fi
# DIR as one archive, replaced whole (tar into a temporary name, then mv) so that a kill leaves the last one.
save_archive() {
  [ -z "$archive" ] && return 0
  tar -czf "$archive.partial" -C "$(dirname "$out")" "$(basename "$out")" && mv -f "$archive.partial" "$archive" \
    || echo "warning: could not write the archive $archive" >&2
}
log="$out/performance.jsonl"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$out/gpu.txt"
else
  echo "warning: no nvidia-smi on this host" >&2
fi
# Ctrl-C reaches every process of the batch: the verb running ends with its one line (exit 130), and the batch
# stops there (bash runs the trap once that verb has ended; without it, bash went on with the next verb).
interrupted=0
trap 'interrupted=1' INT
for problem in "${problems[@]}"; do
  if ! "$PYTHON" -m popcorn build "$problem" -o "$out/builds/$problem.py"; then
    # Nothing ran: DIR goes back to how it was found, or the same -o was refused as holding another run.
    rm -rf "$out/builds" "$out/gpu.txt"
    [ "$made_out" -eq 0 ] || rmdir "$out" 2>/dev/null
    exit $((interrupted ? 130 : 1))
  fi
done
save_archive

# A fresh extension cache: the first command of each problem compiles its CUDA cold, so its record's
# compile_s is the cold import the grader's pre-run pays (a warm machine would otherwise reuse a build).
TORCH_EXTENSIONS_DIR=$(mktemp -d "${TMPDIR:-/tmp}/popkit-extensions.XXXXXX") || exit 1
export TORCH_EXTENSIONS_DIR
# It serves this batch only: left behind, every batch kept its compiled libraries in /tmp.
trap 'rm -rf "$TORCH_EXTENSIONS_DIR"' EXIT

step=0
failed=0
for command in "$@"; do
  step=$((step + 1))
  read -r verb problem _ <<< "$command"
  echo "=== $command"
  started=$SECONDS
  # eval keeps the quoting inside a command (--case 'batch: 4; n: 64; ...')
  # grep and tee ignore Ctrl-C, so the verb's last line (what stopped) still reaches the screen and the table.
  eval "\"\$PYTHON\" -m popcorn $command --submission \"\$out/builds/$problem.py\" --log \"\$log\"" 2>&1 \
    | (trap '' INT; exec grep --line-buffered -v ": repeat ") \
    | (trap '' INT; exec tee "$out/$(printf %02d $step)-$verb-$problem.txt")
  status=${PIPESTATUS[0]}
  [ "$status" -eq 0 ] || failed=$((failed + 1))
  # each verb's seconds: what the next device call's limit (or a verb's --budget) has to allow for
  echo "=== $command: $([ "$status" -eq 0 ] && echo ok || echo "failed (exit $status)") in $((SECONDS - started)) s"
  save_archive
  if [ "$interrupted" -eq 1 ]; then
    echo "interrupted during \"$command\": $((step - 1)) of $# commands finished; the records and tables so far" \
         "are in $out" >&2
    exit 130
  fi
done
echo "=== $step command$([ "$step" = 1 ] || echo s), $failed failed, $SECONDS s in all; records and tables in $out${archive:+ (archive: $archive)}"
if [ -s "$out/performance.jsonl" ]; then
  merge="popkit merge $out/performance.jsonl --tables $out"
  echo "merge them where you keep logs/: $merge${archive:+ (or: popkit merge $archive)}"
else    # the merge it named would be refused: a verb refused before it ran (a bad --case) logs nothing
  echo "no verb logged a record (each one's table in $out says why): nothing to merge"
fi
[ "$failed" -eq 0 ]
