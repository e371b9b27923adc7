#!/bin/sh
# examples/installcheck.sh — what `make installcheck` runs: uses the INSTALLED shmddp the way a
# user does. Finds shmddp.pc under the installed libdir, builds SOURCE with the pkg-config flags
# against the shared library and against the static one (pkg-config --static), runs both, and
# checks the installed files: the shared library's SONAME, that it exports shmddp_* symbols and
# nothing else, the headers, the programs (prefixed names, each one starts, and loads no CUDA
# math library to do so), and in a CUDA build the CUDA ops module (installed in pkglibdir,
# exporting its entry point alone, and found there by the installed programs).
#
# usage: examples/installcheck.sh SOURCE OUTDIR
# Environment (Makefile.am's installcheck-local passes them): prefix, libdir, includedir, bindir,
# pkglibdir (configure's values, expanded), DESTDIR (may be empty), bin_programs (the installed
# programs' names), ops_module (non-empty in a build with the CUDA ops module), CC, PKG_CONFIG,
# NM; READELF (default readelf).
set -eu
src=$1
out=$2
: "${DESTDIR:=}" "${CC:=cc}" "${PKG_CONFIG:=pkg-config}" "${NM:=nm}" "${READELF:=readelf}"
: "${bin_programs:=}" "${ops_module:=}" "${pkglibdir:=$libdir/shmddp}"
fail() { echo "installcheck: FAIL: $*" >&2; exit 1; }
say() { echo "installcheck: $*"; }

ilib=$DESTDIR$libdir
iinc=$DESTDIR$includedir
ibin=$DESTDIR$bindir
mkdir -p "$out"
name=$(basename "$src" .c)

# ---- installed files ----
for f in libshmddp.so.0 libshmddp.so libshmddp.a pkgconfig/shmddp.pc pkgconfig/shmddp-static.pc; do
  test -e "$ilib/$f" || fail "$ilib/$f was not installed"
done
test -f "$iinc/shmddp.h" || fail "$iinc/shmddp.h was not installed"
soname=$($READELF -d "$ilib/libshmddp.so.0" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
test "$soname" = libshmddp.so.0 || fail "libshmddp.so.0 has SONAME '$soname', not libshmddp.so.0"

# ---- only shmddp_* is exported ----
exported=$($NM -D --defined-only "$ilib/libshmddp.so.0" | awk 'NF >= 2 { print $NF }' | sed 's/@.*//')
echo "$exported" | grep -q '^shmddp_all_reduce$' ||
  fail "libshmddp.so.0 does not export shmddp_all_reduce (nm -D found: $(echo $exported))"
others=$(echo "$exported" | grep -v '^shmddp_' || true)
test -z "$others" || fail "libshmddp.so.0 exports symbols outside shmddp_*: $(echo $others)"
say "libshmddp.so.0 (SONAME $soname) exports $(echo "$exported" | wc -l) symbols, all shmddp_*"

# ---- pkg-config: the installed shmddp.pc must point at the installed files ----
PKG_CONFIG_PATH=$ilib/pkgconfig
export PKG_CONFIG_PATH
if [ -n "$DESTDIR" ]; then
  # A staged install: the .pc file names the final prefix; --define-prefix (pkgconf, and
  # pkg-config 0.29+) takes the prefix from where the .pc file lies, as docs/library.md says.
  set -- --define-prefix
else
  set --
fi
pc_libdir=$($PKG_CONFIG "$@" --variable=libdir shmddp) || fail "pkg-config does not find shmddp.pc in $ilib/pkgconfig"
pc_incdir=$($PKG_CONFIG "$@" --variable=includedir shmddp)
test "$pc_libdir" = "$ilib" || fail "shmddp.pc gives libdir $pc_libdir, the library is in $ilib"
test "$pc_incdir" = "$iinc" || fail "shmddp.pc gives includedir $pc_incdir, the headers are in $iinc"
cflags=$($PKG_CONFIG "$@" --cflags shmddp)
libs=$($PKG_CONFIG "$@" --libs shmddp)
slibs=$($PKG_CONFIG "$@" --static --libs shmddp)
say "pkg-config --cflags --libs shmddp: $cflags $libs"
say "pkg-config --static --libs shmddp: $slibs"

# ---- the CUDA build's header compiles with the pkg-config flags alone ----
if [ -f "$iinc/shmddp_cuda.h" ]; then
  printf '#include <shmddp.h>\n#include <shmddp_cuda.h>\nint main(void) { return 0; }\n' \
    > "$out/cuda_header.c"
  # shellcheck disable=SC2086
  $CC -Wall -Wextra -Werror $cflags -c "$out/cuda_header.c" -o "$out/cuda_header.o" ||
    fail "shmddp_cuda.h does not compile with pkg-config --cflags shmddp"
  say "shmddp_cuda.h compiles with pkg-config --cflags shmddp"
fi

# ---- build the example both ways, run both ----
# shellcheck disable=SC2086
$CC -Wall -Wextra -Werror -pthread $cflags "$src" -o "$out/$name" $libs ||
  fail "$src does not build against the installed shared library"
# The static build, as docs/library.md says: shmddp-static names libshmddp.a itself, and --static
# adds the archive's own dependencies (Libs.private); no linker tricks here.
static_libs=$($PKG_CONFIG "$@" --static --libs shmddp-static)
say "pkg-config --static --libs shmddp-static: $static_libs"
case " $static_libs " in *"/libshmddp.a "*) ;; *) fail "shmddp-static does not name libshmddp.a" ;; esac
for dep in -lpthread -lm; do
  case " $slibs " in *" $dep "*) ;; *) fail "pkg-config --static --libs shmddp lacks $dep (Libs.private)" ;; esac
done
# shellcheck disable=SC2086
$CC -Wall -Wextra -Werror -pthread $cflags "$src" -o "$out/$name-static" $static_libs ||
  fail "$src does not build against the installed static library"
$READELF -d "$out/$name" | grep -q 'NEEDED.*\[libshmddp\.so\.0\]' ||
  fail "$out/$name does not load libshmddp.so.0"
if $READELF -d "$out/$name-static" | grep -q 'NEEDED.*libshmddp'; then
  fail "$out/$name-static loads libshmddp.so instead of holding libshmddp.a's code"
fi
LD_LIBRARY_PATH=$ilib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
LD_DEBUG=files "$out/$name" 2> "$out/$name-ld.txt" || fail "$out/$name (shared) failed"
# a library user loads the CUDA runtime at most: the math libraries are the trainer's
if grep -E -q 'file=[^ ]*lib(cublas|cudnn)' "$out/$name-ld.txt"; then
  fail "$out/$name loads a CUDA math library with libshmddp: $(grep -E -o 'file=[^ ]*lib(cublas|cudnn)[^ ]*' "$out/$name-ld.txt" | sort -u | tr '\n' ' ')"
fi
"$out/$name-static" || fail "$out/$name-static failed"

# ---- programs: prefixed names only, each one starts ----
test -n "$bin_programs" || fail "no programs named (bin_programs)"
for p in $bin_programs; do
  case $p in shmddp-*) ;; *) fail "program '$p' is installed without the shmddp- prefix" ;; esac
  test -x "$ibin/$p" || fail "$ibin/$p was not installed"
  if [ "$p" = shmddp-report ] && ! command -v python3 > /dev/null 2>&1; then
    say "no python3: shmddp-report not started"
    continue
  fi
  "$ibin/$p" --help > "$out/$p-help.txt" 2>&1 || fail "$ibin/$p --help failed"
  LD_DEBUG=files "$ibin/$p" --version > "$out/$p-version.txt" 2> "$out/$p-ld.txt" ||
    fail "$ibin/$p --version failed: $(grep -v '^ *[0-9]*:' "$out/$p-ld.txt")"
  if grep -E -q 'file=[^ ]*lib(cublas|cudnn)' "$out/$p-ld.txt"; then
    fail "$ibin/$p --version loads a CUDA math library: $(grep -E -o 'file=[^ ]*lib(cublas|cudnn)[^ ]*' "$out/$p-ld.txt" | sort -u | tr '\n' ' ')"
  fi
  grep -q "^$p [0-9]" "$out/$p-version.txt" || fail "$ibin/$p --version: $(cat "$out/$p-version.txt")"
  # installed programs' advice names installed programs, never the build tree's
  if grep -E -q "(^|[ (])(\./train|tools/(report|doctor|compare|allreduce_bench))( |$|,|;|\))" "$out/$p-help.txt"; then
    grep -E "\./train|tools/" "$out/$p-help.txt" | sed 1q
    fail "$p --help names a program of the build tree"
  fi
done
say "programs installed and starting: $(echo $bin_programs)"

# ---- the CUDA ops module: in pkglibdir, its entry point alone exported, found from bindir ----
if [ -n "$ops_module" ]; then
  mod=$DESTDIR$pkglibdir/shmddp-ops-cuda.so
  test -f "$mod" || fail "$mod was not installed"
  exported=$($NM -D --defined-only "$mod" | awk 'NF >= 2 { print $NF }')
  test "$(echo $exported)" = ops_cuda_module ||
    fail "$mod exports more than ops_cuda_module: $(echo $exported)"
  # The doctor loads it as a GPU run does (no GPU needed), from the installed prefix.
  "$ibin/shmddp-doctor" > "$out/doctor.txt" 2>&1
  want=$(cd "$(dirname "$mod")" && pwd -P)/shmddp-ops-cuda.so
  grep -q "GPU ops *$want (cuDNN" "$out/doctor.txt" ||
    fail "the installed shmddp-doctor does not load $want: $(grep 'GPU ops' "$out/doctor.txt")"
  say "the CUDA ops module: $want, loaded by the installed programs"
fi
say "PASS"
