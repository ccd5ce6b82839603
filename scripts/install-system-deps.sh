#!/usr/bin/env bash
# Installs the host tools that the OS environment's tasks use inside the sandbox.
# The sandbox's root filesystem is an overlay of this machine's /usr, so the tools
# must exist on the host. Safe to re-run: it only installs what is missing.
set -euo pipefail
need=()
for tool in zsh tree zip unzip curl wget git vim bwrap; do
  command -v "$tool" >/dev/null 2>&1 || need+=("$tool")
done
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "install-system-deps: missing ${need[*]}; run as root (or install them) to use the OS environment" >&2
  exit 0
fi
pkgs=()
for tool in "${need[@]}"; do
  case "$tool" in
    bwrap) pkgs+=(bubblewrap) ;;
    vim) pkgs+=(vim-tiny) ;;
    *) pkgs+=("$tool") ;;
  esac
done
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
