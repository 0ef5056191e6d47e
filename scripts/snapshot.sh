#!/usr/bin/env bash
# Write a copy of the repository's tracked files at a commit into a folder, for a device call to carry.
#
# Usage: scripts/snapshot.sh [--without-logs] DEST [REV]
#   DEST  the folder to write, inside a git-ignored folder such as vendor/; an earlier snapshot there is
#         replaced, any other non-empty folder is refused
#   REV   the commit, branch or tag to copy (default HEAD)
#   --without-logs  leave logs/ out (~15 MB): a candidate timed beside another needs neither the incumbent
#         nor the logged baselines, and a device call carries 64 MiB in all
# The copy has no .git; DEST/COMMIT holds REV's short hash: export it as POPKIT_COMMIT on the device so
# that the records name the code that ran while the working tree moves on (AGENTS.md).
set -euo pipefail
logs=yes
if [[ ${1:-} == --without-logs ]]; then
    logs=no
    shift
fi
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi
if [[ $# -lt 1 || $# -gt 2 ]]; then
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
dest=$1
# A misspelt option was taken for DEST: rm and mkdir then failed on it as an option of their own.
if [[ $dest == -* ]]; then
    echo "error: $dest: not an option (snapshot.sh takes --without-logs and --help); a DEST may not begin with -" >&2
    exit 2
fi
rev=${2:-HEAD}
if ! git rev-parse --show-toplevel > /dev/null 2>&1; then
    echo "error: run it inside the repository (here: $(pwd))" >&2
    exit 2
fi
if ! commit=$(git rev-parse --verify --quiet "$rev^{commit}"); then
    echo "error: $rev is not a commit of $(git rev-parse --show-toplevel)" >&2
    exit 2
fi
if [[ -e $dest && ! -f $dest/COMMIT && -n $(ls -A "$dest" 2>/dev/null) ]] || [[ -e $dest && ! -d $dest ]]; then
    echo "error: $dest exists and is not an earlier snapshot (no COMMIT file): not replacing it" >&2
    exit 2
fi
rm -rf "$dest"
mkdir -p "$dest"
if [[ $logs == yes ]]; then
    git archive "$commit" | tar -x -C "$dest"
else
    git archive "$commit" | tar -x -C "$dest" --anchored --exclude=logs     # the top-level logs/ only
fi
git rev-parse --short "$commit" > "$dest/COMMIT"
echo "$dest: $(cat "$dest/COMMIT") $(git log -1 --format=%s "$commit" | cut -c1-70)"
