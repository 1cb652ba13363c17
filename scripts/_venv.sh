# Sourced by scripts/demo and scripts/test: make .venv hold this project and its test tools.
# Idempotent and quick when nothing changed: it reinstalls only when pyproject.toml changed.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$repo/.venv"
stamp="$venv/.tpelastic-installed"
want=$(sha256sum "$repo/pyproject.toml" | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  echo "setting up $venv (first run or pyproject.toml changed) ..." >&2
  # pip's notes about this machine's unused local package folders are noise: keep real errors.
  quiet() { "$@" 2>&1 | grep -vE "^WARNING: Location .* is ignored" >&2 || true; return "${PIPESTATUS[0]}"; }
  quiet "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  quiet "$venv/bin/python" -m pip install -q --disable-pip-version-check -e "$repo[test]"
  echo "$want" >"$stamp"
fi
export PATH="$venv/bin:$PATH"
cd "$repo"
