#!/usr/bin/env bash
# Call B (docs/priors.md, "Next session"): qr/update-resident against its base and its own ring reference, run
# on the device from the repository root (main, for today's scripts) with two snapshots carried:
#   scripts/snapshot.sh --without-logs vendor/res qr/update-resident
#   scripts/snapshot.sh --without-logs vendor/resbase "$(git merge-base main qr/update-resident)"
# Device call: timeout 540, carry ["vendor/res", "vendor/resbase"]. Every step writes its own file under $OUT.
set -u
root=$PWD
(cd vendor/res && python3 -m popcorn build qr_v2 -o /tmp/res.py) || exit 2
(cd vendor/resbase && python3 -m popcorn build qr_v2 -o /tmp/base.py) || exit 2
on4='{"UPDATE_RESIDENT": [[1073741824, 1, 4]]}'
ring4='{"UPDATE_RESIDENT": [[1073741824, 1, -4]]}'
on8='{"UPDATE_RESIDENT": [[1073741824, 1, 8]]}'
ring8='{"UPDATE_RESIDENT": [[1073741824, 1, -8]]}'
step() { local name=$1; shift; echo "== $name: $*"; timeout 200 "$@" 2>&1 | tee "$OUT/$name.txt"; }
# 1. Off by default, the branch's other kernels moved (shared-memory layout): its outputs must stay bitwise.
step same_base python3 scripts/same_outputs.py /tmp/base.py /tmp/res.py qr_v2
# 2. Resident against the ring at the same splits: bitwise by construction.
step same_res4 python3 scripts/same_outputs.py /tmp/res.py /tmp/res.py qr_v2 --set-a "$ring4" --set-b "$on4"
step same_res8 python3 scripts/same_outputs.py /tmp/res.py /tmp/res.py qr_v2 --set-a "$ring8" --set-b "$on8"
# 3. The time, as a diff judges it, on the cases a resident split reaches.
echo "{\"off\": {}, \"res4\": $on4, \"res8\": $on8}" > /tmp/resident.json
step sweep python3 scripts/sweep_route.py /tmp/res.py qr_v2 /tmp/resident.json --reps 3 --json "$OUT/sweep.json" \
    --case 'batch: 640; n: 512; cond: 2; seed: 1029; case: dense' \
    --case 'batch: 60; n: 1024; cond: 2; seed: 75342; case: dense' \
    --case 'batch: 40; n: 352; cond: 1; seed: 123456; case: dense'
# 4. Look-ahead's cost when each call's buffers move (the 2x4096 question).
step lookahead python3 scripts/qr_lookahead_probe.py /tmp/base.py
cd "$root"
