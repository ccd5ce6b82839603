#!/usr/bin/env bash
# Installs the host tools that the OS environment needs. The sandbox's root filesystem
# is an overlay of this machine's /usr, so the tools the tasks use (zsh, tree, ...)
# must exist on the host, and so must the tools that build the sandbox (unshare,
# setpriv, pivot_root, ip) and the python3 its init process runs on.
# The sandbox's seccomp filter is compiled by libseccomp (libseccomp2, loaded by the
# pyseccomp Python package), so that library is checked for too.
# Safe to re-run: it only installs what is missing.
set -euo pipefail
# tool:package pairs (Debian/Ubuntu package names)
wanted=(
  zsh:zsh tree:tree zip:zip unzip:unzip curl:curl wget:wget git:git vim:vim-tiny bwrap:bubblewrap
  unshare:util-linux setpriv:util-linux pivot_root:util-linux ip:iproute2 pgrep:procps ps:procps
  useradd:passwd chage:passwd adduser:adduser su:login python3:python3 gzip:gzip
)
pkgs=()
for pair in "${wanted[@]}"; do
  tool=${pair%%:*} pkg=${pair#*:}
  PATH="$PATH:/usr/sbin:/sbin" command -v "$tool" >/dev/null 2>&1 && continue
  [[ " ${pkgs[*]} " == *" $pkg "* ]] || pkgs+=("$pkg")
done
# Libraries (no tool to look for): soname:package pairs.
for pair in libseccomp.so.2:libseccomp2; do
  lib=${pair%%:*} pkg=${pair#*:}
  /sbin/ldconfig -p 2>/dev/null | grep -q "$lib" && continue
  [[ " ${pkgs[*]} " == *" $pkg "* ]] || pkgs+=("$pkg")
done
[ ${#pkgs[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "install-system-deps: missing packages ${pkgs[*]}; run as root (or install them) to use the OS environment" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
