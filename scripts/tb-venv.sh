#!/usr/bin/env bash
# Prints the python of a small cached virtual environment holding only the
# tensorboard package from PyPI, making it first if missing: its event file
# reader checks what ddp.SummaryWriter writes (tests/summary_writer_spec.lua,
# tests/golden/make_summary.py).  Kept apart from scripts/py-venv.sh (torch
# is a large install that these checks do not need).  Never installs into
# the system Python.  DDPLUA_TB_VENV names another place.
#   py=$(scripts/tb-venv.sh) && $py tests/golden/make_summary.py
set -euo pipefail
venv=${DDPLUA_TB_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ddplua/tb-venv}
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import tensorboard' 2>/dev/null; then
  echo "$venv/bin/python"; exit 0
fi
echo "tb-venv: making $venv with tensorboard from PyPI (once; a minute)" >&2
base=/usr/bin/python3
command -v "$base" >/dev/null || base=python3
"$base" -m venv "$venv" >&2 2>/dev/null || {
  # Debian's python3 needs python3-venv for ensurepip
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get install -y -qq python3-venv >&2
  "$base" -m venv "$venv" >&2
}
"$venv/bin/pip" install -q --disable-pip-version-check tensorboard >&2
echo "$venv/bin/python"
