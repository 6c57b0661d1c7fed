#!/usr/bin/env bash
# Packs what building the CUDA extension needs beyond Python, torch, cmake and nvcc into
# .gpu/ of this checkout, for a GPU machine that has no protobuf compiler, protobuf headers
# or flatbuffers and reaches no package registry: Debian's protobuf and flatbuffers packages
# (unpacked there into a prefix, not installed) and the protobuf source of the same version
# trimmed to what the static protobuf-lite runtime compiles (about 9 MB).
# tools/gpu_check.sh, run on the GPU machine with .gpu beside it, builds and checks there.
# Use (on a Debian machine with the build's packages, after `make build`): tools/gpu_bundle.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE=.gpu
PACKAGES="protobuf-compiler libprotoc32 libprotobuf32 libprotobuf-dev libprotobuf-lite32 \
libflatbuffers-dev flatbuffers-compiler libflatbuffers2"

src=$(python3 tools/fetch_protobuf_source.py)
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/debs"
# (apt's note that root downloads unsandboxed is left out of the output)
(cd "$BUNDLE/debs" && apt-get download $PACKAGES >/dev/null 2> >(grep -v unsandboxed >&2))
name=$(basename "$src")
mkdir -p "$BUNDLE/$name/cmake"
cp "$src/cmake/libprotobuf-lite.cmake" "$BUNDLE/$name/cmake/"
# The runtime's sources and headers, without the test suites and their data.
(cd "$src" && find src \( -name '*.h' -o -name '*.cc' -o -name '*.inc' \) \
  ! -name '*unittest*' ! -name '*_test.*' ! -name 'test_*' ! -path '*/testdata/*' \
  ! -path '*/testing/*' -print0) | (cd "$src" && xargs -0 tar -cf -) | tar -xf - -C "$BUNDLE/$name"
grep -qxF "/$BUNDLE/" .git/info/exclude 2>/dev/null || echo "/$BUNDLE/" >> .git/info/exclude
echo "$BUNDLE: $(du -sh "$BUNDLE" | cut -f1) ($(ls "$BUNDLE/debs" | wc -l) packages, $name)"
