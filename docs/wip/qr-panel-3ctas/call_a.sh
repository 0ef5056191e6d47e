#!/usr/bin/env bash
# Call A (docs/priors.md, "Next session"): the gate of a qr_v2 candidate, run on the device from the repository
# root with the candidate's snapshot carried (default vendor/p3: scripts/snapshot.sh vendor/p3 qr/panel-3ctas,
# logs kept for the incumbent and the baselines) and gpu-mode/reference-kernels in vendor/reference-kernels.
# Device call: timeout 580, carry ["vendor/p3", "vendor/reference-kernels"]. Back here: popkit merge FILE.tgz.
set -u
snapshot=${1:-vendor/p3}
root=$PWD
rm -rf /tmp/s
cd "$snapshot" || exit 2
export POPKIT_COMMIT=$(cat COMMIT) POPKIT_REFERENCE_KERNELS=$root/vendor/reference-kernels
scripts/gpu_session.sh -o /tmp/s/gs -a "$OUT/gs.tgz" \
    "check qr_v2 --seeds 5 --robust" "diff qr_v2 --budget 200" "bench qr_v2 --baseline" \
    "check qr_v2 --harness official" "bench qr_v2 --harness official"
