#!/usr/bin/env bash
# CMake's compiler launcher in the Makefile's builds: ccache where it is installed (the
# Makefile's Debian packages), so that a rebuild, and a fresh clone on the same machine,
# compile only what changed; the compiler itself elsewhere.
if command -v ccache >/dev/null 2>&1; then exec ccache "$@"; fi
exec "$@"
