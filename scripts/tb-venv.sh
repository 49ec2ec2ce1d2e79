#!/usr/bin/env bash
# Prints the python of a small cached virtual environment holding only the
# tensorboard package from PyPI, making it first if missing: its event file
# reader checks what ddp.SummaryWriter writes (tests/summary_writer_spec.lua,
# tests/golden/make_summary.py).  Kept apart from scripts/py-venv.sh's
# default one (torch is a large install that these checks do not need).
# DDPLUA_TB_VENV names another place.
#   py=$(scripts/tb-venv.sh) && $py tests/golden/make_summary.py
set -euo pipefail
venv=${DDPLUA_TB_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ddplua/tb-venv}
exec bash "$(dirname "$0")/py-venv.sh" --venv "$venv" --imports tensorboard tensorboard
