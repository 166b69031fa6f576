#!/usr/bin/env bash
# How this folder was made (issue 27), for the record: a real MLflow store written by the code before issue 27
# renamed the run record's parameters and added the label tags (commit d476b0a), and what that code's analysis printed
# from it. tests/unit/analysis/test_legacy_store.py checks that today's analysis prints the same from the same store.
#
#   bash tests/data/store-before-issue27/make.sh      (from the repository root; about 4 minutes on 2 CPU cores)
#
# It leaves the main checkout as it is: the old code runs from a temporary git worktree, removed at the end.
set -euo pipefail
ROOT=$(git rev-parse --show-toplevel)
HERE="$ROOT/tests/data/store-before-issue27"
PY="$ROOT/.venv/bin/python"
TMP=$(mktemp -d)
OLD="$TMP/old"
git -C "$ROOT" worktree add --detach "$OLD" d476b0a
trap 'git -C "$ROOT" worktree remove --force "$OLD"; rm -rf "$TMP"' EXIT
export RAY_AUTH_MODE=disabled SSAT_TEACHER_DIR="$TMP/teachers" PYTHONPATH="$OLD"
STORE="sqlite:///$TMP/work/mlflow.db"
cd "$OLD"
"$PY" -m sweeps run "$HERE/spec.yaml" --workdir "$TMP/work" --tracking-uri "$STORE"

# what the old analysis printed (stdout only), one file per command
old() { local out=$1; shift; "$PY" -m analysis."$@" --experiment before-issue27 --tracking-uri "$STORE" > "$HERE/expected/$out"; }
mkdir -p "$HERE/expected"
for fmt in md latex csv; do
  ext=${fmt/latex/tex}
  old "ablation.$ext" tables --table ablation --allow-subset --format "$fmt"
  old "main.any-tag.$ext" tables --table main --allow-subset --any-tag --format "$fmt"
  old "schedules.any-tag.$ext" tables --table schedules --allow-subset --any-tag --format "$fmt"
done
old ablation.compare-paper.md tables --table ablation --allow-subset --compare-paper
old main.md tables --table main --allow-subset
old beta-sensitivity.any-tag.md tables --table beta-sensitivity --allow-subset --any-tag
old rho-sensitivity.any-tag.md tables --table rho-sensitivity --allow-subset --any-tag
old convergence.md convergence

# the store, compacted and compressed (1.2 MB of mostly empty MLflow tables -> about 65 kB)
"$PY" -c "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('vacuum'); c.close()" "$TMP/work/mlflow.db"
gzip -9 -n -c "$TMP/work/mlflow.db" > "$HERE/mlflow.db.gz"
