#!/usr/bin/env bash
# Installs the Debian packages ddplua needs, only those missing, so a second
# run costs one dpkg query.
# LuaJIT is OpenResty's maintained 2.1 branch (luajit2): Debian's `luajit`
# (2.1.0-beta3, a 2022 snapshot) loads `...` wrongly in some traces
# (docs/luajit.md).  luajit2 conflicts with luajit and libluajit-5.1-dev, so
# apt removes those; it keeps /usr/bin/luajit, the pkg-config name `luajit`
# and the soname libluajit-5.1.so.2, and lua-busted stays installed.
set -euo pipefail
pkgs=(build-essential pkg-config luajit2 libluajit2-5.1-dev lua-busted
      libopenblas-dev libdnnl-dev libgloo-dev libedit-dev zlib1g-dev libjpeg62-turbo-dev libpng-dev dataset-fashion-mnist
      python3 valgrind)
pkgs+=("$@")  # extra packages a target asks for (make fuzz: clang)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
