#!/usr/bin/env bash
# Installs the host tools that the OS environment needs. The sandbox's root filesystem
# is an overlay of this machine's /usr, so the tools the tasks use (zsh, tree, ...)
# must exist on the host, and so must the tools that build the sandbox (unshare,
# setpriv, pivot_root, ip) and the python3 its init process runs on.
# The sandbox's seccomp filter is compiled by libseccomp (libseccomp2, loaded by the
# pyseccomp Python package), so that library is checked for too.
# The KG tests (tests/test_kg_virtuoso.py) and `tokenworth kg serve` run Debian's Virtuoso 7.2.5
# (virtuoso-opensource, the version AgentBench's Freebase uses); its package would start a system-wide
# server on ports 1111/8890, so that service is kept from starting and left stopped and disabled.
# The viewer's browser test (tests/test_inspect_browser.py) opens Inspect View's static site in Debian's
# Chromium (/usr/bin/chromium), driven by Playwright; no browser build is ever downloaded.
# Safe to re-run: it only installs what is missing.
set -euo pipefail
# tool:package pairs (Debian/Ubuntu package names)
wanted=(
  zsh:zsh tree:tree zip:zip unzip:unzip curl:curl wget:wget git:git vim:vim-tiny bwrap:bubblewrap
  unshare:util-linux setpriv:util-linux pivot_root:util-linux ip:iproute2 pgrep:procps ps:procps
  useradd:passwd chage:passwd adduser:adduser su:login python3:python3 gzip:gzip
  virtuoso-t:virtuoso-opensource isql-vt:virtuoso-opensource chromium:chromium
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
  echo "install-system-deps: missing packages ${pkgs[*]}; run as root (or install them) to use the OS and KG environments" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
virtuoso=0
[[ " ${pkgs[*]} " == *" virtuoso-opensource "* ]] && virtuoso=1
# No service may start while packages install (Docker images ship this policy already): a temporary
# policy-rc.d, removed on exit. The blank DBA password debconf asks for keeps the packaged daemon disabled.
if [ $virtuoso = 1 ] && [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
if [ $virtuoso = 1 ] && [ -x /etc/init.d/virtuoso-opensource-7 ]; then
  if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    systemctl disable --now virtuoso-opensource-7 >/dev/null 2>&1 || true
  fi
  /etc/init.d/virtuoso-opensource-7 stop >/dev/null 2>&1 || true
  update-rc.d virtuoso-opensource-7 disable >/dev/null 2>&1 || true
fi
