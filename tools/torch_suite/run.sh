#!/bin/bash
# Run PyTorch's autograd tests with torch -> jitgrad (issue 20's measurement).
#
#   tools/torch_suite/run.sh [--pytorch-src DIR] [--out DIR] [--tag TAG] [-- extra pytest args]
#
# DIR: a PyTorch source tree (DIR/test/test_autograd.py, DIR/test/autograd/test_functional.py, DIR/test/expect/);
#      default $JITGRAD_TORCH_SUITE_SRC.
# --out: where everything goes (rewritten test copies in OUT/run, OUT/scope.json, OUT/TAG.xml junit, OUT/TAG.log,
#      OUT/TAG.txt summary); default tools/torch_suite/results (git-ignored).
# Uses the python on PATH ($PYTHON overrides) and the jitgrad of the repo this script lives in.
set -u -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
OUT=$HERE/results
TAG=run
SRC=${JITGRAD_TORCH_SUITE_SRC:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --pytorch-src) SRC=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --tag) TAG=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-python}
if [ -z "$SRC" ]; then
  echo "run.sh: give --pytorch-src DIR or set JITGRAD_TORCH_SUITE_SRC (see tools/torch_suite/README.md)" >&2
  exit 2
fi
SRC=$(cd "$SRC" && pwd) || exit 2
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
export JITGRAD_TORCH_SUITE_SRC=$SRC
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
export NUMBA_NUM_THREADS=${NUMBA_NUM_THREADS:-1}
export JITGRAD_CACHE_DIR=${JITGRAD_CACHE_DIR:-$OUT/.jgcache}

"$PY" "$HERE/prepare.py" --work "$OUT" > "$OUT/prepare.log" 2>&1 || { cat "$OUT/prepare.log"; exit 1; }
"$PY" "$HERE/scope.py" --work "$OUT" | tee "$OUT/scope.txt" || exit 1
OPTS=()   # plugins the run uses when installed: xdist off (-n0), a per-test time limit
if "$PY" -c "import xdist" 2>/dev/null; then OPTS+=(-n0); fi
if "$PY" -c "import pytest_timeout" 2>/dev/null; then OPTS+=(--timeout=300); fi
cd "$OUT/run"
"$PY" -m pytest -p no:cacheprovider --assert=plain -q "${OPTS[@]}" -rN --tb=short \
  --junitxml="$OUT/$TAG.xml" -o junit_family=xunit1 test_functional.py test_autograd.py "$@" \
  > "$OUT/$TAG.log" 2>&1
tail -1 "$OUT/$TAG.log"
"$PY" "$HERE/analyze.py" "$OUT/$TAG.xml" | tee "$OUT/$TAG.txt"
