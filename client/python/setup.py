"""Builds the tally package: the gRPC stubs in tally/v1 are generated here,
from proto/tally/v1/tally.proto, with protoc and grpc_python_plugin (Debian:
protobuf-compiler, protobuf-compiler-grpc). They are never edited by hand.

Where to look for the tools: $TALLY_PROTOC and $TALLY_GRPC_PYTHON_PLUGIN,
else `protoc` and `grpc_python_plugin` on PATH; when neither is there but
grpcio-tools is installed (pip's route), its bundled protoc is used.
"""
import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.environ.get("TALLY_PROTO_ROOT", os.path.join(HERE, "..", "..", "proto"))
PROTO = "tally/v1/tally.proto"


def generate(out_dir: str) -> None:
    """Writes tally/v1/tally_pb2.py, tally_pb2_grpc.py and __init__.py under out_dir."""
    os.makedirs(os.path.join(out_dir, "tally", "v1"), exist_ok=True)
    protoc = os.environ.get("TALLY_PROTOC") or shutil.which("protoc")
    plugin = os.environ.get("TALLY_GRPC_PYTHON_PLUGIN") or shutil.which("grpc_python_plugin")
    if protoc and plugin:
        command = [protoc, f"--plugin=protoc-gen-grpc_python={plugin}", f"--grpc_python_out={out_dir}"]
    else:
        try:
            import grpc_tools  # noqa: F401
        except ImportError:
            sys.exit("tally: building needs protoc and grpc_python_plugin (Debian: protobuf-compiler "
                     "protobuf-compiler-grpc) or the grpcio-tools package")
        command = [sys.executable, "-m", "grpc_tools.protoc", f"--grpc_python_out={out_dir}"]
    subprocess.run(command + [f"--proto_path={PROTO_ROOT}", f"--python_out={out_dir}", PROTO], check=True)
    with open(os.path.join(out_dir, "tally", "v1", "__init__.py"), "w") as f:
        f.write('"""Generated from proto/tally/v1/tally.proto by the build; not edited by hand."""\n')


class BuildWithStubs(build_py):
    def run(self) -> None:
        super().run()
        generate(self.build_lib)


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "generate":
    generate(sys.argv[2])  # the CMake build: python3 setup.py generate OUT_DIR
else:
    setup(cmdclass={"build_py": BuildWithStubs})
