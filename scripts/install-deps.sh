#!/usr/bin/env bash
# Installs everything tally needs to build, test and run, from Debian 12 /
# Ubuntu packages only. Used by the README, .ci/run and the Dockerfile.
# Usage: scripts/install-deps.sh            (build + test dependencies)
#        TALLY_RUNTIME_ONLY=1 scripts/install-deps.sh   (runtime libraries only)
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive

runtime_pkgs=(libgrpc++1.51 libprotobuf32 libspdlog1.10 libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0)
build_pkgs=(
  build-essential cmake pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-grpcio python3-numpy python3-protobuf
  prometheus
)

$SUDO apt-get update -qq
if [ "${TALLY_RUNTIME_ONLY:-0}" = "1" ]; then
  $SUDO apt-get install -y -qq --no-install-recommends "${runtime_pkgs[@]}"
else
  $SUDO apt-get install -y -qq --no-install-recommends "${build_pkgs[@]}"
  # npm runs the offline Kubernetes schema checks. Machines that already have
  # a Node.js with npm (e.g. from NodeSource) keep it: Debian's npm conflicts.
  if ! command -v npm >/dev/null 2>&1; then
    $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
  fi
fi
