# Builds the sandbox's root filesystem inside the new mount namespace, then execs PID 1
# (holder.py). Run as `sh -c <text>` (never by path: sh reads scripts lazily and the
# host tree is gone after pivot_root). Args: T TMPFS_SIZE HOSTNAME FD HOLDER_SOURCE
# READ_ONLY_BINDS (host directories, one per line; may be empty).
set -eu
T=$1 TMPFS_SIZE=$2 HOST_NAME=$3 FD=$4 HOLDER=$5 READ_ONLY_BINDS=$6

fail() { echo "sandbox setup: $*" >&2; exit 1; }

mount -t tmpfs -o "size=$TMPFS_SIZE,mode=0755" tokenworth-sandbox "$T" || fail "tmpfs on $T"
R=$T/root
mkdir -p "$R" "$T/upper" "$T/work"
# pivot_root needs the new root to be a mount point of its own.
mount --bind "$R" "$R"

# Copy-on-write view of a host directory: reads fall through to the host, writes
# land in the private tmpfs.
overlay() {
  key=$(printf '%s' "$1" | tr / _)
  mkdir -p "$T/upper/$key" "$T/work/$key" "$R$1"
  mount -t overlay overlay -o "lowerdir=$1,upperdir=$T/upper/$key,workdir=$T/work/$key" "$R$1" \
    || fail "overlay of $1"
}

overlay /usr
overlay /etc
for top in bin sbin lib lib32 lib64 libx32; do
  if [ -L "/$top" ]; then ln -s "$(readlink "/$top")" "$R/$top"
  elif [ -d "/$top" ]; then overlay "/$top"
  fi
done

# Fresh, empty directories where an Ubuntu image has them.
mkdir -p "$R/root" "$R/home" "$R/tmp" "$R/mnt" "$R/opt" "$R/srv" "$R/media" "$R/boot" \
  "$R/proc" "$R/sys" "$R/dev" "$R/run/lock"
chmod 0700 "$R/root"
chmod 1777 "$R/tmp" "$R/run/lock"
for f in .bashrc .profile; do [ -f "/etc/skel/$f" ] && cp "/etc/skel/$f" "$R/root/$f"; done

# /var: an Ubuntu-like skeleton, empty except for the package databases, which are
# copy-on-write so dpkg/apt describe the tools that really exist here.
for d in backups cache lib local log mail opt spool tmp; do mkdir -p "$R/var/$d"; done
chmod 1777 "$R/var/tmp"
chmod 2775 "$R/var/mail"
chgrp mail "$R/var/mail" 2>/dev/null || true
ln -s /run "$R/var/run"
ln -s /run/lock "$R/var/lock"
mkdir -p "$R/var/log/apt" "$R/var/cache/debconf"
for d in /var/lib/dpkg /var/lib/apt /var/cache/apt; do [ -d "$d" ] && overlay "$d"; done

# Host directories the caller asked to show, at the same path and read-only (box.py checked
# each: absolute, canonical, an existing directory outside /proc, /sys and /dev). Not recursive:
# mounts below them stay out. The sandbox cannot remount them writable: it never holds
# CAP_SYS_ADMIN over this mount namespace, and seccomp refuses mount calls anyway.
printf '%s\n' "$READ_ONLY_BINDS" | while IFS= read -r dir; do
  [ -n "$dir" ] || continue
  mkdir -p "$R$dir"
  mount --bind "$dir" "$R$dir" || fail "bind of $dir"
  mount -o remount,bind,ro,nosuid,nodev "$R$dir" || fail "read-only remount of $dir"
done

# Secrets of the host never enter. The password databases are rebuilt from passwd and
# group with every password locked ('*'), as in a fresh Ubuntu image, so useradd,
# passwd and chage work on them. Every other item under /etc that is not readable by
# all (SSH host keys, /etc/ssl/private, backups like shadow-, ...) is emptied in the
# copy-on-write view: the path, owner and mode stay, the content does not.
find "$R/etc" -xdev -type d ! -perm -o=r -exec sh -c 'for d; do find "$d" -mindepth 1 -delete; done' sh {} + \
  || fail "masking unreadable directories under /etc"
find "$R/etc" -xdev -type f ! -perm -o=r -exec sh -c 'for f; do : > "$f"; done' sh {} + \
  || fail "masking unreadable files under /etc"
DAYS=$(( $(date +%s) / 86400 ))
awk -F: -v d="$DAYS" '{ print $1 ":*:" d ":0:99999:7:::" }' "$R/etc/passwd" > "$R/etc/shadow"
awk -F: '{ print $1 ":*::" $4 }' "$R/etc/group" > "$R/etc/gshadow"
for f in shadow gshadow; do
  chown 0:0 "$R/etc/$f"; chgrp shadow "$R/etc/$f" 2>/dev/null || true; chmod 0640 "$R/etc/$f"
done

# Identity of the sandbox's own UTS namespace.
hostname "$HOST_NAME"
printf '%s\n' "$HOST_NAME" > "$R/etc/hostname"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t%s\n' \
  "$HOST_NAME" > "$R/etc/hosts"
# The only interface of the new network namespace.
ip link set lo up || fail "bringing up lo"

# A minimal /dev: the harmless character devices, private ptys and shm. No disks.
mount -t tmpfs -o mode=0755,size=1m,nosuid,noexec tokenworth-dev "$R/dev"
for n in null zero full random urandom tty; do
  : > "$R/dev/$n"
  mount --bind "/dev/$n" "$R/dev/$n"
done
mkdir -p "$R/dev/pts" "$R/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$R/dev/pts"
ln -s pts/ptmx "$R/dev/ptmx"
mount -t tmpfs -o mode=1777,size=64m,nosuid,nodev tokenworth-shm "$R/dev/shm"
ln -s /proc/self/fd "$R/dev/fd"
ln -s /proc/self/fd/0 "$R/dev/stdin"
ln -s /proc/self/fd/1 "$R/dev/stdout"
ln -s /proc/self/fd/2 "$R/dev/stderr"

# /proc of the new PID namespace. Real root could still write kernel-wide knobs
# through it (core_pattern, sysrq), so those parts are read-only or hidden, as in
# Docker's default profile; without CAP_SYS_ADMIN the sandbox cannot undo this.
mount -t proc -o nosuid,nodev,noexec proc "$R/proc"
for p in sys sysrq-trigger irq bus fs; do
  if [ -e "$R/proc/$p" ]; then
    mount --bind "$R/proc/$p" "$R/proc/$p"
    mount -o remount,bind,ro "$R/proc/$p"
  fi
done
for p in kcore keys latency_stats timer_list timer_stats sched_debug; do
  [ -f "$R/proc/$p" ] && mount --bind /dev/null "$R/proc/$p"
done
for p in acpi asound scsi; do
  [ -d "$R/proc/$p" ] && mount -t tmpfs -o ro,size=4k tokenworth-mask "$R/proc/$p"
done
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$R/sys"
[ -d "$R/sys/firmware" ] && mount -t tmpfs -o ro,size=4k tokenworth-mask "$R/sys/firmware"

# The holder's program goes in the private tmpfs, outside the new root: the sandbox
# never sees it, and an open descriptor keeps it readable after the switch.
printf '%s' "$HOLDER" > "$T/holder.py"
if [ "$FD" = 9 ]; then P=8; else P=9; fi  # a descriptor the socket does not use
eval "exec $P<\"\$T/holder.py\""

cd "$R"
mkdir .oldroot
pivot_root . .oldroot
cd /
umount -l /.oldroot
rmdir /.oldroot

# PID 1 takes it from here: a user namespace owned by an unused host uid, the seccomp
# filter, the capability bounding set (see holder.py).
exec /usr/bin/python3 -I -S "/dev/fd/$P" "$FD" "$P" enter
