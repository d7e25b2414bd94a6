#!/usr/bin/env bash
# A device call carries the working tree and its carry paths in 64 MiB; benchmarks/data (earlier
# runs' files, 37 MB in 2026-11) and the packed wheels (.whl_gpu, 26 MB) no longer fit side by
# side, and the call is refused. Move benchmarks/data's tracked files out of the tree for the
# call, all but those it reads, then put them back (commit nothing in between: git sees them
# deleted).
#   benchmarks/device_slim.sh out [KEEP...]   KEEP: paths under benchmarks/data the call reads
#   benchmarks/device_slim.sh back
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
stash=${STASH:-/tmp/octune-data-stash}
case ${1:-} in
out)
    shift
    if [[ -d $stash ]] && [[ -n $(ls -A "$stash") ]]; then
        echo "device_slim: $stash holds files already; run 'benchmarks/device_slim.sh back' first" >&2
        exit 1
    fi
    moved=0
    while IFS= read -r -d '' path; do
        keep=0
        for wanted in "$@"; do [[ $path == "$wanted"* ]] && keep=1; done
        if (( !keep )) && [[ -f $path ]]; then
            mkdir -p "$stash/$(dirname "$path")"
            mv "$path" "$stash/$path"
            moved=$((moved + 1))
        fi
    done < <(git ls-files -z benchmarks/data)
    echo "device_slim: $moved files moved to $stash; 'benchmarks/device_slim.sh back' after the call"
    ;;
back)
    [[ -d $stash ]] || { echo "device_slim: nothing in $stash" >&2; exit 1; }
    (cd "$stash" && find . -type f -print0) | while IFS= read -r -d '' path; do
        mkdir -p "$(dirname "$path")"
        mv "$stash/$path" "$path"
    done
    rm -rf "$stash"
    git status --short -- benchmarks/data
    ;;
*)
    echo "usage: benchmarks/device_slim.sh out [KEEP...] | back" >&2
    exit 2
    ;;
esac
