#!/bin/sh
# Installs the Debian/Ubuntu packages shmddp builds and tests with.
# The CUDA toolkit (nvcc, cuBLAS) and cuDNN are not installed here: they come from NVIDIA's
# packages or the machine's image; without them configure builds the CPU-only variant.
set -eu
# openmpi-bin and libopenmpi-dev: the trainer across machines (configure finds mpicc; the MPI tests
# run 4 ranks on this machine as 2 simulated nodes).
pkgs="build-essential autoconf automake libtool pkg-config check libnuma-dev libpng-dev zlib1g-dev
  openmpi-bin libopenmpi-dev"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "install-deps: run as root or install sudo" >&2; exit 1; }
  sudo=sudo
fi
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "install-deps: installing$missing"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  # shellcheck disable=SC2086
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
else
  echo "install-deps: all packages present"
fi

# A real browser for tests/report_browser.sh, which opens the report's page: Debian's
# chromium-headless-shell (Debian 12 and later), else chromium. Best effort: where neither can be
# installed (no such package, no network), that test reports SKIP; nothing else needs it.
if ! command -v chromium-headless-shell >/dev/null 2>&1 && ! command -v chromium >/dev/null 2>&1; then
  apt_browser() {
    for b in chromium-headless-shell chromium; do
      $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$b" \
        >/dev/null 2>&1 && { echo "install-deps: installed $b"; return 0; }
    done
    return 1
  }
  apt_browser || { $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 &&
                   apt_browser; } ||
    echo "install-deps: no headless browser could be installed; tests/report_browser.sh will SKIP"
fi
