#!/usr/bin/env bash
# Build the self-contained bundle that sweep.py runs from on a bare host.
#
#   bash bench/bighost/make_bundle.sh CHECKOUT OUTDIR
#
# Runs on a Debian 12 (bookworm) x86-64 machine with the postgresql-15
# server package, git, tar, gzip, ldd and python3 >= 3.11 with pip and access
# to a package index. Writes OUTDIR/bundle/ (README.md in this folder says
# what each piece is); OUTDIR/bundle is replaced only when the whole build
# worked. Anything missing stops it with one line on stderr and exit 1.
#
# Knob: PYVERSIONS, the CPython versions to fetch wheels for ("3.11 3.12").
set -euo pipefail
umask 022

die() { echo "make_bundle.sh: $*" >&2; exit 1; }
say() { echo "make_bundle.sh: $*"; }

[ $# -eq 2 ] || die "usage: make_bundle.sh CHECKOUT OUTDIR"
CHECKOUT=$1
OUTDIR=$2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYVERSIONS=${PYVERSIONS:-"3.11 3.12"}

PGBIN=/usr/lib/postgresql/15/bin
PGLIB=/usr/lib/postgresql/15/lib
PGSHARE=/usr/share/postgresql/15
PROGRAMS="postgres initdb pg_ctl psql pg_dump pg_restore"
# Server modules initdb and a plain server load: PL/pgSQL, the snowball text
# search dictionaries, the encoding conversions (*_and_*.so), and the two
# replication modules. Contrib stays out (and llvmjit: the server runs with
# jit = off).
CORE_MODULES="plpgsql.so dict_snowball.so libpqwalreceiver.so pgoutput.so"
# glibc's own libraries come from the host (glibc >= 2.36 there)
GLIBC_RE='^(libc|libm|libmvec|libpthread|libdl|librt|libutil|libresolv|libanl|libnsl|libcrypt|libBrokenLocale|libthread_db|libnss_[a-z0-9_]+|ld-linux-x86-64|ld-linux)\.so(\.[0-9]+)*$'

# ------------------------------------------------------------------ checks
for t in git tar gzip ldd python3 awk sed; do
  command -v "$t" >/dev/null 2>&1 || die "missing program: $t"
done
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || die "python3 is $(python3 -V 2>&1); 3.11 or newer is needed here"
python3 -m pip --version >/dev/null 2>&1 || die "missing: python3 -m pip"
[ -d "$CHECKOUT" ] || die "no such directory: $CHECKOUT"
git -C "$CHECKOUT" rev-parse --verify -q HEAD >/dev/null 2>&1 \
  || die "not a git checkout with a commit: $CHECKOUT"
git -C "$CHECKOUT" cat-file -e HEAD:pyproject.toml 2>/dev/null \
  || die "$CHECKOUT has no pyproject.toml at HEAD: not a pgparmon checkout"
for f in sweep.py summary.py README.md ../copysplit.py; do
  [ -f "$HERE/$f" ] || die "missing $HERE/$f"
done
for p in $PROGRAMS; do
  [ -x "$PGBIN/$p" ] || die "missing $PGBIN/$p (apt-get install postgresql-15)"
done
for m in $CORE_MODULES; do
  [ -f "$PGLIB/$m" ] || die "missing $PGLIB/$m (apt-get install postgresql-15)"
done
compgen -G "$PGLIB/*_and_*.so" >/dev/null || die "missing $PGLIB/*_and_*.so (encoding conversions)"
[ -f "$PGSHARE/postgres.bki" ] || die "missing $PGSHARE/postgres.bki (apt-get install postgresql-15)"
for v in $PYVERSIONS; do
  [[ "$v" =~ ^3\.[0-9]+$ ]] || die "PYVERSIONS: '$v' is not a version like 3.12"
done

mkdir -p "$OUTDIR" || die "cannot create $OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
DEST=$OUTDIR/bundle
PART=$OUTDIR/.bundle.partial.$$
trap 'rm -rf "$PART"' EXIT
rm -rf "$PART"
mkdir -p "$PART/wheels" "$PART/stage" "$PART/tmp"

# ------------------------------------------------------------------ the project
COMMIT=$(git -C "$CHECKOUT" rev-parse HEAD)
say "pgparmon.tar.gz: git archive of $CHECKOUT at $COMMIT"
git -C "$CHECKOUT" archive --format=tar.gz --prefix=pgparmon/ -o "$PART/pgparmon.tar.gz" HEAD \
  || die "git archive failed in $CHECKOUT"
echo "$COMMIT" > "$PART/pgparmon.commit"
if [ -n "$(git -C "$CHECKOUT" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  say "note: $CHECKOUT has uncommitted changes; the bundle holds HEAD only"
fi

# pgparmon is pure Python: one wheel, built from the archive (HEAD exactly),
# so the host needs no build tools
tar -xzf "$PART/pgparmon.tar.gz" -C "$PART/tmp" || die "cannot unpack the archive"
python3 -m pip wheel -q --no-deps -w "$PART/tmp/own" "$PART/tmp/pgparmon" >"$PART/tmp/wheel.log" 2>&1 \
  || die "pip wheel of pgparmon failed: $(grep -m1 -iE 'error' "$PART/tmp/wheel.log" | cut -c1-200)"
OWN=$(find "$PART/tmp/own" -name 'pgparmon-*-py3-none-any.whl' | head -1)
[ -n "$OWN" ] || die "pip wheel did not make a pgparmon py3-none-any wheel"
cp "$OWN" "$PART/wheels/"
OWN_NAME=$(basename "$OWN")

# ------------------------------------------------------------------ wheels
# pgparmon's runtime dependencies, resolved from its wheel's metadata, for
# each CPython version: manylinux wheels a glibc 2.36 host can load.
PLATFORMS=()
for m in $(seq 36 -1 5); do PLATFORMS+=(--platform "manylinux_2_${m}_x86_64"); done
PLATFORMS+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
for v in $PYVERSIONS; do
  tag=cp${v/./}
  # markers (python_version) are evaluated by the interpreter pip runs in:
  # that version's own python when this machine has it
  py=python3
  if command -v "python$v" >/dev/null 2>&1 && "python$v" -m pip --version >/dev/null 2>&1; then
    py=python$v
  fi
  say "wheels for $tag (pip download with $py)"
  d=$PART/tmp/$tag
  mkdir -p "$d"
  "$py" -m pip download -q --disable-pip-version-check --only-binary=:all: \
    --python-version "$v" --implementation cp --abi "$tag" --abi abi3 --abi none \
    "${PLATFORMS[@]}" -d "$d" "pgparmon @ file://$PART/wheels/$OWN_NAME" >"$d.log" 2>&1 \
    || die "pip download for $tag failed: $({ grep -m1 -E 'No matching distribution|requires a different Python' "$d.log" || grep -m1 -E 'ERROR|error' "$d.log" || tail -1 "$d.log"; } | cut -c1-200)"
  rm -f "$d/$OWN_NAME"
  n=$(find "$d" -name '*.whl' | wc -l)
  [ "$n" -gt 0 ] || die "pip download for $tag brought no wheels"
  # every wheel must load on the host: pure, abi3, or this version's ABI
  for w in "$d"/*.whl; do
    case $(basename "$w") in
      *-none-any.whl|*-abi3-*.whl|*-"$tag"-"$tag"-*.whl) ;;
      *) die "wheel $(basename "$w") does not fit $tag" ;;
    esac
  done
  (cd "$d" && ls ./*.whl | sed 's|^\./||' | sort) > "$PART/wheels/$tag.txt"
  echo "$OWN_NAME" >> "$PART/wheels/$tag.txt"
  cp -n "$d"/*.whl "$PART/wheels/"
  say "  $tag: $n wheels: $(sed 's/-py.*//;s/-cp.*//' "$PART/wheels/$tag.txt" | tr '\n' ' ')"
done
# pip itself: the host may have python3 without ensurepip or pip; a pip
# wheel runs as `python3 pip-*.whl/pip install ...`
python3 -m pip download -q --disable-pip-version-check --only-binary=:all: --no-deps \
  -d "$PART/tmp/pip" pip >"$PART/tmp/pip.log" 2>&1 \
  || die "pip download of pip failed: $(tail -1 "$PART/tmp/pip.log" | cut -c1-200)"
PIPWHL=$(find "$PART/tmp/pip" -name 'pip-*.whl' | head -1)
[ -n "$PIPWHL" ] || die "no pip wheel downloaded"
cp "$PIPWHL" "$PART/wheels/"
basename "$PIPWHL" > "$PART/wheels/pip.txt"

# ------------------------------------------------------------------ PostgreSQL
# The Debian binaries find their share and module directories relative to
# their own path: PREFIX/lib/postgresql/15/bin -> PREFIX/share/postgresql/15
# and PREFIX/lib/postgresql/15/lib (configure's --datadir and bindir share
# the /usr prefix). With another layout they fall back to the compiled-in
# /usr/share/postgresql/15, which a bare host lacks. So the tree keeps that
# layout under pg15/, adds libs/ (shared libraries beyond glibc) and bin/
# (wrappers that set LD_LIBRARY_PATH for the PostgreSQL programs only).
P=$PART/stage/pg15
mkdir -p "$P/bin" "$P/libs" "$P/lib/postgresql/15/bin" "$P/lib/postgresql/15/lib" "$P/share/postgresql"
say "PostgreSQL programs: $PROGRAMS"
objs=()
for p in $PROGRAMS; do
  cp -L "$PGBIN/$p" "$P/lib/postgresql/15/bin/$p"
  objs+=("$PGBIN/$p")
  cat > "$P/bin/$p" <<EOF
#!/bin/sh
# the bundled $p with the bundled shared libraries (for PostgreSQL programs
# only: Python and the host's tools keep their own libraries)
case \$0 in */*) here=\${0%/*} ;; *) here=. ;; esac
top=\$(cd "\$here/.." && pwd -P) || exit 127
LD_LIBRARY_PATH="\$top/libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "\$top/lib/postgresql/15/bin/$p" "\$@"
EOF
  chmod 755 "$P/bin/$p"
done
for m in $CORE_MODULES "$PGLIB"/*_and_*.so; do
  m=$(basename "$m")
  cp -L "$PGLIB/$m" "$P/lib/postgresql/15/lib/$m"
  objs+=("$PGLIB/$m")
done
say "share files ($PGSHARE, less man pages)"
cp -rL "$PGSHARE" "$P/share/postgresql/15" || die "cannot copy $PGSHARE"
rm -rf "$P/share/postgresql/15/man"

say "shared libraries (ldd closure, less glibc)"
lddout=$(for o in "${objs[@]}"; do ldd "$o" || die "ldd failed on $o"; done)
if grep -q 'not found' <<<"$lddout"; then
  die "unresolved library: $(grep -m1 'not found' <<<"$lddout" | sed 's/^[[:space:]]*//')"
fi
nlibs=0
while read -r name path; do
  [[ "$name" =~ $GLIBC_RE ]] && continue
  [ -f "$path" ] || die "library $name resolves to a missing file: $path"
  cp -L "$path" "$P/libs/$name"
  nlibs=$((nlibs + 1))
done < <(awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' <<<"$lddout" | sort -u)
[ "$nlibs" -gt 0 ] || die "ldd found no shared libraries"
# the closure is complete: each bundled library resolves with the others
for l in "$P"/libs/*; do
  miss=$(LD_LIBRARY_PATH="$P/libs" ldd "$l" 2>/dev/null | grep 'not found' || true)
  [ -z "$miss" ] || die "$(basename "$l") needs a library the bundle lacks: $(echo "$miss" | head -1 | sed 's/^[[:space:]]*//')"
done

say "checking the relocated tree"
# the wrappers start the programs without the system's PostgreSQL: a clean
# environment, and the compiled-in paths checked to be the bundle's own
for p in $PROGRAMS; do
  v=$(env -i PATH=/usr/bin:/bin "$P/bin/$p" --version 2>&1) || die "bundled $p does not start: $v"
  case $v in *" 15."*) ;; *) die "bundled $p is not PostgreSQL 15: $v" ;; esac
done
for p in $PROGRAMS; do
  for lib in $(env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$P/libs" ldd "$P/lib/postgresql/15/bin/$p" \
                 | awk '$2 == "=>" && $3 ~ /^\// {print $3}'); do
    case $lib in
      "$P"/libs/*) ;;
      *) [[ "$(basename "$lib")" =~ $GLIBC_RE ]] \
           || die "bundled $p would load $lib from the system, not the bundle" ;;
    esac
  done
done
# a throwaway cluster from the tree copied elsewhere (relocation), as an
# unprivileged user when we are root
RELOC=$(mktemp -d /tmp/pgbundle-reloc.XXXXXX) || die "mktemp failed"
trap 'rm -rf "$PART" "$RELOC"' EXIT
chmod 755 "$RELOC"
cp -a "$P" "$RELOC/pg15moved"
pgdata=$RELOC/data
runas=()
if [ "$(id -u)" = 0 ]; then
  command -v setpriv >/dev/null 2>&1 || die "missing program: setpriv (to test initdb as nobody)"
  mkdir -p "$pgdata"; chown nobody "$pgdata"
  runas=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups --)
fi
show=$(cd "$RELOC" && env -i PATH=/usr/bin:/bin "${runas[@]}" "$RELOC/pg15moved/bin/initdb" --show \
       -D "$RELOC/none" 2>&1) || die "initdb --show failed: $(tail -1 <<<"$show")"
share=$(sed -n 's/^share_path=//p' <<<"$show")
[ "$share" = "$(cd "$RELOC/pg15moved/share/postgresql/15" && pwd -P)" ] \
  || die "the relocated initdb uses share_path '$share', not its own tree's"
(cd "$RELOC" && env -i PATH=/usr/bin:/bin TZ=UTC "${runas[@]}" "$RELOC/pg15moved/bin/initdb" -D "$pgdata" -A trust \
  -E UTF8 --locale=C -U bundletest -N) >"$RELOC/initdb.log" 2>&1 \
  || die "initdb of the relocated tree failed: $(grep -m1 -iE 'error|fatal' "$RELOC/initdb.log" | cut -c1-200)"
single=$(cd "$RELOC" && env -i PATH=/usr/bin:/bin "${runas[@]}" "$RELOC/pg15moved/bin/postgres" --single -D "$pgdata" \
  -c timezone=UTC postgres <<<"SELECT rolname FROM pg_roles WHERE rolname = 'bundletest';" 2>&1) || true
grep -q 'rolname = "bundletest"' <<<"$single" \
  || die "the relocated server did not answer a query in single-user mode: $(tail -1 <<<"$single")"
rm -rf "$RELOC"
trap 'rm -rf "$PART"' EXIT
say "$(env -i PATH=/usr/bin:/bin "$P/bin/postgres" --version), $nlibs libraries, relocated initdb ok"

say "pg15.tar.gz"
tar -C "$PART/stage" --sort=name --owner=root --group=root --numeric-owner -czf "$PART/pg15.tar.gz" pg15 \
  || die "tar of pg15 failed"

# ------------------------------------------------------------------ scripts
# sweep.py imports copysplit.py (bench/, shared with bench/advise_copy_accuracy.py)
cp "$HERE/sweep.py" "$HERE/summary.py" "$HERE/README.md" "$HERE/../copysplit.py" "$PART/"
{
  echo "pgparmon_commit=$COMMIT"
  echo "built_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "built_on=$(. /etc/os-release && echo "$PRETTY_NAME") $(uname -m)"
  echo "postgres=$(env -i "$P/bin/postgres" --version)"
  echo "python_versions=$PYVERSIONS"
  echo "pgparmon_wheel=$OWN_NAME"
  echo "scripts=sweep.py summary.py copysplit.py"
} > "$PART/MANIFEST"

rm -rf "$PART/stage" "$PART/tmp"
rm -rf "$DEST"
mv "$PART" "$DEST"
trap - EXIT
say "done: $DEST ($(du -sh "$DEST" | cut -f1))"
ls -l "$DEST"
