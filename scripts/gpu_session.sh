#!/usr/bin/env bash
# One device call that does a lot: build both problems, check them, bench what is asked.
# Usage (on the GPU machine, repo root): scripts/gpu_session.sh [STEP ...]
#   steps: check-qr check-eigh bench-qr bench-qr-baseline bench-eigh bench-eigh-baseline
# Logs go to $OUT/performance.jsonl (copy them into logs/ here afterwards) and $OUT/*.txt.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/popkit-out}
mkdir -p "$OUT"
LOG="$OUT/performance.jsonl"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -m popcorn build qr_v2 -o /tmp/qr_v2.py || exit 1
python3 -m popcorn build eigh -o /tmp/eigh.py || exit 1
for step in "$@"; do
  echo "=== $step"
  case "$step" in
    check-qr)            python3 -m popcorn check qr_v2 --submission /tmp/qr_v2.py --log "$LOG" ;;
    check-eigh)          python3 -m popcorn check eigh --submission /tmp/eigh.py --log "$LOG" ;;
    bench-qr)            python3 -m popcorn bench qr_v2 --submission /tmp/qr_v2.py --log "$LOG" ;;
    bench-qr-baseline)   python3 -m popcorn bench qr_v2 --submission /tmp/qr_v2.py --baseline --log "$LOG" ;;
    bench-eigh)          python3 -m popcorn bench eigh --submission /tmp/eigh.py --log "$LOG" ;;
    bench-eigh-baseline) python3 -m popcorn bench eigh --submission /tmp/eigh.py --baseline --log "$LOG" ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac 2>&1 | grep -v "^  \.\. " | tee "$OUT/$step.txt"
done
