# Shared by scripts/*: create .venv if missing and install the project (extras: $ALPSTORE_EXTRAS)
# at the versions pinned in requirements/ci.lock (a pip constraints file; scripts/lock refreshes
# it). pyproject.toml keeps ranges for users; the lock is what this clone's tests and CI run on.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
extras=${ALPSTORE_EXTRAS:-}
stamp=.venv/.alpstore-installed${extras:+-$extras}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
lock=requirements/ci.lock
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ "$lock" -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
  if ! .venv/bin/python -m pip install -q --disable-pip-version-check -c "$lock" \
    -e ".${extras:+[$extras]}" 2> >(grep -v "^WARNING: Location" >&2); then
    echo "scripts/_env.sh: installing alpstore${extras:+[$extras]} with $lock failed" >&2
    exit 1
  fi
  .venv/bin/python -c "import alpstore" # the install must have worked
  touch "$stamp"
fi
# Byte-compile the package (as a wheel install does; an editable install does not): with
# PYTHONDONTWRITEBYTECODE set, every `alpstore` command would otherwise compile each module it
# imports from source, every time (about 30-60 ms a command). Only what changed is compiled.
.venv/bin/python -m compileall -q alpstore >/dev/null 2>&1 || true
export PATH="$PWD/.venv/bin:$PATH"
