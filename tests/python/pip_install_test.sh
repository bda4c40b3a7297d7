#!/usr/bin/env bash
# `pip install ./client/python` works offline on Debian: into a virtual
# environment over the system's grpcio, protobuf and numpy, with the
# system's setuptools (--no-build-isolation: nothing is downloaded), the
# stubs generated from proto/ by the package's own build.
# usage: pip_install_test.sh PYTHON SOURCE_DIR
set -euo pipefail
python="$1"
source_dir="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# A copy, so the in-tree build leaves nothing in the source tree.
cp -r "$source_dir/client/python" "$work/package"
rm -rf "$work/package/tally/v1" "$work/package/build"
"$python" -m venv --system-site-packages "$work/venv"
TALLY_PROTO_ROOT="$source_dir/proto" "$work/venv/bin/pip" install --quiet --no-build-isolation --no-deps \
  --no-index "$work/package"
cd "$work"
"$work/venv/bin/python" - <<'PY'
import tally, tally.v1.tally_pb2 as pb, tally.v1.tally_pb2_grpc as stubs
assert "site-packages" in tally.__file__, tally.__file__
assert hasattr(stubs, "AggregatorStub") and hasattr(pb, "PartialStates")
print("installed", tally.__file__)
PY
