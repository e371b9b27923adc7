#!/bin/sh
# Generates ./configure from configure.ac (autoconf, automake; no libtool needed).
set -e
cd "$(dirname "$0")"
mkdir -p m4 build-aux
autoreconf --install --force "$@"
