#!/usr/bin/env bash
# Installs everything tally needs to build, test and run, from Debian 12 /
# Ubuntu packages only. Used by the README, .ci/run and the Dockerfile.
# Usage: scripts/install-deps.sh            (build + test dependencies)
#        TALLY_RUNTIME_ONLY=1 scripts/install-deps.sh   (runtime libraries only)
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive

# Runtime libraries, as name patterns: their package names carry the library
# version and, on Ubuntu 24.04, the t64 suffix (Debian 12: libgrpc++1.51,
# libspdlog1.10; Ubuntu 24.04: libgrpc++1.51t64, libspdlog1.12).
runtime_patterns=('libgrpc\+\+1\.[0-9]+(t64)?' 'libprotobuf[0-9]+(t64)?' 'libspdlog1\.[0-9]+(t64)?'
                  'libabsl[0-9]+(t64)?' 'libprometheus-cpp-core1\.[0-9]+(t64)?'
                  'libprometheus-cpp-pull1\.[0-9]+(t64)?' 'libjemalloc2(t64)?' 'libssl3(t64)?')
build_pkgs=(
  build-essential cmake pkg-config git
  # A compiler cache: a rebuild takes a hit for every unchanged file; Ninja
  # keeps both cores busy while the kernels build (scripts/build.sh).
  ccache ninja-build
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev prometheus-cpp-dev libjemalloc-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  # The tally tool's command-line parser (header-only); zlib reads .npz
  # files' deflated members.
  libcli11-dev zlib1g-dev
  # TLS and bearer tokens: libcrypto's headers (SHA-256, key checks); the
  # openssl tool makes the tests' throwaway certificates.
  libssl-dev openssl
  # clang: tests/sanitize checks the histogram binner under -fsanitize=undefined
  clang-14
  python3 python3-grpcio python3-numpy python3-protobuf python3-dev pybind11-dev
  # The Python package (client/python): its stubs come from protoc and
  # grpc_python_plugin (protobuf-compiler-grpc, above); its install test
  # builds a virtual environment; tally.dask runs on Dask; Client.agg is
  # tested against pandas.
  python3-venv python3-dask python3-distributed python3-pandas
  # Prometheus scrapes a running server in the integration tests; its
  # promtool checks and unit-tests the alerts in deploy/ (ctest -L deploy).
  prometheus
  # The fuzzers (scripts/fuzz.sh): clang with libFuzzer and the sanitizer
  # runtimes, and llvm-cov for their coverage reports.
  clang-14 libclang-rt-14-dev libfuzzer-14-dev llvm-14
)

# The highest-versioned package apt knows whose whole name matches $1 (the
# t64 name sorts after the old one, so it wins where both are listed).
pick_package() {
  local name
  name="$(apt-cache pkgnames | grep -E "^($1)\$" | sort -V | tail -n1)"
  if [ -z "$name" ]; then
    echo "install-deps.sh: no package matches ^($1)\$" >&2
    exit 1
  fi
  echo "$name"
}

$SUDO apt-get update -qq
if [ "${TALLY_RUNTIME_ONLY:-0}" = "1" ]; then
  runtime_pkgs=()
  for pattern in "${runtime_patterns[@]}"; do runtime_pkgs+=("$(pick_package "$pattern")"); done
  echo "install-deps.sh: runtime packages: ${runtime_pkgs[*]}"
  $SUDO apt-get install -y -qq --no-install-recommends "${runtime_pkgs[@]}"
else
  $SUDO apt-get install -y -qq --no-install-recommends "${build_pkgs[@]}"
  # npm runs the offline Kubernetes schema checks. Machines that already have
  # a Node.js with npm (e.g. from NodeSource) keep it: Debian's npm conflicts.
  if ! command -v npm >/dev/null 2>&1; then
    $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
  fi
fi
