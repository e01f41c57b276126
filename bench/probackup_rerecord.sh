#!/usr/bin/env bash
# Rebuild pg_probackup from its source and record the replay fixtures again
# (tests/golden/probackup/*.rec.gz, tests/test_probackup_replay.py), for a new
# version of pg_probackup or of the server:
#
#   bench/probackup_rerecord.sh [VERSION] [--src DIR] [--gb 1.3] [--eta] [-- RECORD-ARGS]
#
# VERSION: a tag of github.com/postgrespro/pg_probackup (default 2.5.15, the
# version of the recordings in the repository). --src: a checkout to build
# instead of cloning. --gb: the cluster's size (1.3 gives a backup of about
# 1 GB). --eta: also run bench/backup_eta.py with it (ETA at 25/50/75% of a
# FULL backup, followed by `attach`, into docs/bench/backup_eta_probackup.json).
# RECORD-ARGS go to bench/probackup_record.py (e.g. --out DIR --results FILE
# to record elsewhere than the repository's fixtures).
#
# Needs root (apt-get) or the build dependencies already there:
# postgresql-server-dev-MAJOR at exactly the installed server's version (the
# plain package may pull a newer server along: it is pinned here), the
# server's source package (`apt-get source`, a deb-src line for the same
# suite), libkrb5-dev liblz4-dev libzstd-dev libselinux1-dev libpam0g-dev
# (what `pg_config --libs` links). It builds outside the repository, in
# $PGPARMON_BUILD (default /tmp/pgparmon-build-probackup); nothing of
# pg_probackup's code enters it. About 1 minute to build, 6 to record on 2
# cores. Review the new recordings with the replay tests:
#   ./run test tests/test_probackup_replay.py -q
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
version=2.5.15
src=""
gb=1.3
eta=0
record_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; record_args=("$@"); break ;;
    --src) src="$2"; shift 2 ;;
    --gb) gb="$2"; shift 2 ;;
    --eta) eta=1; shift ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    *) version="$1"; shift ;;
  esac
done
build="${PGPARMON_BUILD:-/tmp/pgparmon-build-probackup}"
pg_config="${PG_CONFIG:-$(ls -d /usr/lib/postgresql/*/bin/pg_config 2>/dev/null | sort -V | tail -1)}"
[ -x "$pg_config" ] || { echo "no pg_config: install postgresql-server-dev-MAJOR" >&2; exit 2; }
major="$("$pg_config" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')"
# the Debian version of the installed server: its headers and source must match
server_deb="$(dpkg-query -W -f='${Version}' "postgresql-$major" 2>/dev/null || true)"
mkdir -p "$build"

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  if [ -n "$server_deb" ]; then
    deps=("postgresql-server-dev-$major=$server_deb")
  else
    deps=("postgresql-server-dev-$major")
  fi
  deps+=(libkrb5-dev liblz4-dev libzstd-dev libselinux1-dev libpam0g-dev dpkg-dev)
  if [ -z "$(apt-cache showsrc "postgresql-$major" 2>/dev/null)" ] \
      && [ -f /etc/apt/sources.list.d/debian.sources ]; then
    # a deb-src line for the suites the deb lines name
    sed -e 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
      > /etc/apt/sources.list.d/pgparmon-deb-src.sources
    apt-get update -qq
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${deps[@]}" >/dev/null
fi

# the server's source tree (pg_probackup compiles a few of its files)
srcdir="$(ls -d "$build"/postgresql-"$major".*/ 2>/dev/null | sort -V | tail -1 || true)"
if [ -z "$srcdir" ]; then
  (cd "$build" && apt-get source -qq --download-only \
     "postgresql-$major${server_deb:+=$server_deb}" >/dev/null)
  tar -C "$build" -xjf "$(ls "$build"/postgresql-"$major"_*.orig.tar.bz2 | sort -V | tail -1)"
  srcdir="$(ls -d "$build"/postgresql-"$major".*/ | sort -V | tail -1)"
fi

if [ -z "$src" ]; then
  src="$build/pg_probackup-$version"
  [ -d "$src" ] || git clone -q --depth 1 --branch "$version" \
    https://github.com/postgrespro/pg_probackup "$src"
fi
# not `make -j`: its Makefile links the server's files into src/ in rules
# that race with the compiles that include them
make -s -C "$src" USE_PGXS=1 PG_CONFIG="$pg_config" top_srcdir="$srcdir" >/dev/null
pb="$src/pg_probackup"
"$pb" --version

cd "$here"
[ -x .venv/bin/python ] || ./run test --version >/dev/null
.venv/bin/python bench/probackup_record.py --pg-probackup "$pb" --gb "$gb" "${record_args[@]}"
if [ "$eta" = 1 ]; then
  .venv/bin/python bench/backup_eta.py --gb "$gb" --runs 2 --pg-probackup "$pb" \
    --tools pg_probackup --out docs/bench/backup_eta_probackup.json
fi
