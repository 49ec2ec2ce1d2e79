#!/usr/bin/env bash
# Prints the python of a cached virtual environment, making it first if
# missing; never installs into the system Python.  With no arguments: the
# current torch, torchvision, transformers, numpy and Pillow from PyPI, for the
# golden-value scripts (tests/golden/*) and the data benchmark, in
# ~/.cache/ddplua/venv (DDPLUA_VENV names another place).  Other
# environments give their place, the modules that must import, and their
# packages (scripts/tb-venv.sh):
#   py=$(scripts/py-venv.sh) && $py tests/golden/make_npy.py
#   scripts/py-venv.sh --venv DIR --imports tensorboard tensorboard
set -euo pipefail
venv=${DDPLUA_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ddplua/venv}
imports="numpy, PIL, torch, torchvision, transformers"
want=(numpy pillow torch torchvision safetensors transformers)
if [ "${1:-}" = --venv ]; then venv=$2; shift 2; fi
if [ "${1:-}" = --imports ]; then imports=$2; shift 2; fi
[ $# -gt 0 ] && want=("$@")
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import $imports" 2>/dev/null; then
  echo "$venv/bin/python"; exit 0
fi
echo "py-venv: making $venv with ${want[*]} from PyPI (once; a few minutes)" >&2
base=/usr/bin/python3
command -v "$base" >/dev/null || base=python3
"$base" -m venv "$venv" >&2 2>/dev/null || {
  # Debian's python3 needs python3-venv for ensurepip
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get install -y -qq python3-venv >&2
  "$base" -m venv "$venv" >&2
}
"$venv/bin/pip" install -q --disable-pip-version-check "${want[@]}" >&2
echo "$venv/bin/python"
