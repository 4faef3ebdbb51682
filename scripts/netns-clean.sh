#!/usr/bin/env bash
# Removes by hand what clusters of machines on one host (internal/netns,
# docs/netns.md) left behind when their owner died: for each cluster id
# with remains, the processes in its namespaces (killed with -9), its
# host link chanosnetIDh, its namespaces chanosnet-ID-* (the bridge and
# the veths go with them) and its lock file /run/chanos-netns/ID.lock.
#
# A cluster whose owner still runs holds the lock on its id and is left
# alone, so this is safe while tests run. --force removes those too.
#
# usage: scripts/netns-clean.sh [--force]   (as root)
set -euo pipefail

prefix=chanosnet
lockdir=/run/chanos-netns
force=0
case "${1:-}" in
  "") ;;
  --force) force=1 ;;
  *) echo "usage: $0 [--force]" >&2; exit 2 ;;
esac
if [ "$(id -u)" -ne 0 ]; then
  echo "netns-clean: must run as root" >&2
  exit 1
fi

# The ids with remains: namespaces, host links, lock files.
ids=$( {
  ip netns list 2>/dev/null | awk '{print $1}' | sed -n "s/^$prefix-\([0-9]\+\)-.*/\1/p"
  ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed -n "s/^$prefix\([0-9]\+\)h\(@.*\)\?$/\1/p"
  ls "$lockdir" 2>/dev/null | sed -n 's/^\([0-9]\+\)\.lock$/\1/p'
} | sort -un)

remove() { # id
  local id=$1 ns pids
  for ns in $(ip netns list | awk '{print $1}' | grep "^$prefix-$id-" || true); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    while [ -n "$pids" ]; do
      echo "netns-clean: killing $(echo $pids) in $ns"
      kill -9 $pids 2>/dev/null || true
      sleep 0.05
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
    done
  done
  if ip link show "$prefix${id}h" >/dev/null 2>&1; then
    echo "netns-clean: removing link $prefix${id}h"
    ip link del "$prefix${id}h"
  fi
  for ns in $(ip netns list | awk '{print $1}' | grep "^$prefix-$id-" || true); do
    echo "netns-clean: removing namespace $ns"
    ip netns del "$ns"
  done
}

status=0
for id in $ids; do
  lock="$lockdir/$id.lock"
  mkdir -p -m 0700 "$lockdir"
  exec {fd}<>"$lock"
  # The lock counts only if the path still names the file locked: an
  # owner removes the file before it lets go.
  if flock -n "$fd"; then
    if [ "$(stat -c %d:%i "$lock" 2>/dev/null)" = "$(stat -L -c %d:%i "/proc/$$/fd/$fd")" ]; then
      remove "$id" || status=1
      rm -f "$lock"
    fi # else its owner closed it meanwhile
  elif [ $force -eq 1 ]; then
    echo "netns-clean: cluster $id is held by pid $(cat "$lock" 2>/dev/null || echo '?'); removing it (--force)"
    remove "$id" || status=1
  else
    echo "netns-clean: cluster $id is held by pid $(cat "$lock" 2>/dev/null || echo '?'); left alone"
  fi
  exec {fd}>&-
done
exit $status
