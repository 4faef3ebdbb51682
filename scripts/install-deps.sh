#!/usr/bin/env bash
# Installs the tools chanos builds and tests with, when they are missing:
# Go (>= 1.26), a C11 compiler with AddressSanitizer and UBSan (gcc), g++
# (the generated C headers are checked as C++), CMake (>= 3.20), make,
# pkg-config, OpenSSL's development files (libssl-dev) and etcd's server
# (pinned). Go modules (staticcheck, ...) are fetched by the go command
# itself. Safe to run repeatedly.
set -euo pipefail

need=()
command -v cc >/dev/null || need+=(gcc libc6-dev)
command -v g++ >/dev/null || need+=(g++)
command -v cmake >/dev/null || need+=(cmake)
command -v make >/dev/null || need+=(make)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v python3 >/dev/null || need+=(python3)
command -v ip >/dev/null || need+=(iproute2)
# nsenter runs a machine's programs in its network namespace alone
# (docs/netns.md); ip netns exec would hide the cgroups from them.
command -v nsenter >/dev/null || need+=(util-linux)
# OpenSSL's headers and pkg-config file, for libchanos_net's TLS (c/net)
[ -e /usr/include/openssl/ssl.h ] || need+=(libssl-dev)
# oneTBB, a baseline of `chanos bench tasks` (c/tasks/bench/tbb_bench.cpp)
[ -e /usr/include/tbb/task_group.h ] || [ -e /usr/include/oneapi/tbb/task_group.h ] || need+=(libtbb-dev)
if ! echo 'int main(void){return 0;}' | cc -x c -fsanitize=address,undefined -o /dev/null - 2>/dev/null; then
  need+=(libasan8 libubsan1)
fi

if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing ${need[*]}; run this script as root or install them" >&2
    exit 1
  fi
  echo "install-deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

if ! command -v go >/dev/null; then
  echo "install-deps: Go 1.26 or later is required (https://go.dev/dl/)" >&2
  exit 1
fi
go_minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
if [ "${go_minor:-0}" -lt 26 ]; then
  echo "install-deps: Go 1.26 or later is required, found $(go env GOVERSION)" >&2
  exit 1
fi

# etcd, for cluster mode's names and machines (cluster/etcd and its tests
# start real etcd processes). The server comes pinned from Debian's
# packages. The package's postinst may start a system etcd on :2379; it is
# stopped and disabled here, since chanos starts its own members (and its
# tests always pick their own free ports).
ETCD_DEB_VERSION=3.4.23-4+b4
if ! command -v etcd >/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing etcd; run this script as root or install etcd-server=$ETCD_DEB_VERSION" >&2
    exit 1
  fi
  echo "install-deps: installing etcd-server=$ETCD_DEB_VERSION"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # A policy-rc.d that answers 101 keeps the package from starting its
  # service at all; one already there is left alone.
  policy=/usr/sbin/policy-rc.d
  made_policy=
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod 0755 "$policy"
    made_policy=1
  fi
  status=0
  apt-get install -y -qq --no-install-recommends "etcd-server=$ETCD_DEB_VERSION" || status=$?
  if [ -n "$made_policy" ]; then rm -f "$policy"; fi
  if [ "$status" -ne 0 ]; then exit "$status"; fi
  # Where systemd runs, the unit is enabled for the next boot: disable it.
  if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    systemctl disable --now etcd >/dev/null 2>&1 || true
  fi
fi
etcd --version | sed -n 1p  # sed reads it all: head would leave etcd a SIGPIPE, fatal under pipefail
