#!/usr/bin/env bash
# One device call that does a lot: build both problems, then run each quoted popkit command
# against the fresh build, logging to $OUT. Usage (on the GPU machine, repo root):
#   POPKIT_COMMIT=<sha> scripts/gpu_session.sh "check qr_v2 --robust" "bench eigh --baseline" "diff qr_v2 --case '...'"
# Each command gets --submission /tmp/PROBLEM.py and --log $OUT/performance.jsonl appended;
# its table goes to $OUT/NN-VERB-PROBLEM.txt. Merge the log into logs/ afterwards.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/popkit-out}
mkdir -p "$OUT"
LOG="$OUT/performance.jsonl"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
for problem in qr_v2 eigh; do
  python3 -m popcorn build "$problem" -o "/tmp/$problem.py" || exit 1
done
step=0
for command in "$@"; do
  step=$((step + 1))
  read -r verb problem _ <<< "$command"
  echo "=== $command"
  eval "python3 -m popcorn $command --submission /tmp/$problem.py --log $LOG" 2>&1 \
    | grep --line-buffered -v ": repeat " | tee "$OUT/$(printf %02d $step)-$verb-$problem.txt"
done
