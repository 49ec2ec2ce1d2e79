#!/usr/bin/env bash
# Prints the python of ddplua's cached virtual environment, making it first
# if missing: the current torch, torchvision, numpy and Pillow from PyPI,
# for the golden-value scripts (tests/golden/*) and the data benchmark.
# Never installs into the system Python.  DDPLUA_VENV names another place.
#   py=$(scripts/py-venv.sh) && $py tests/golden/make_npy.py
set -euo pipefail
venv=${DDPLUA_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ddplua/venv}
want=(numpy pillow torch torchvision safetensors)
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import numpy, PIL, torch, torchvision' 2>/dev/null; then
  echo "$venv/bin/python"; exit 0
fi
echo "py-venv: making $venv with ${want[*]} from PyPI (once; several minutes)" >&2
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
