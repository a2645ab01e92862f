"""Build step: generate the codegym.v1 gRPC stubs from the repository's proto files.

The stubs are generated into the build directory, never committed, so the Python package always
matches `proto/codegym/v1/*.proto` of the checkout it was built from. Set CODEGYM_PROTO_DIR to build
from another proto root.
"""

import importlib.metadata
import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
PROTO_ROOT = Path(os.environ.get("CODEGYM_PROTO_DIR", HERE.parent.parent / "proto")).resolve()


def _release(dist: str) -> str:
    """`major.minor.patch` of an installed distribution (drops pre/post-release tags)."""
    parts = importlib.metadata.version(dist).split(".")[:3]
    return ".".join(p.split("rc")[0].split("b")[0] for p in parts)


def _runtime_requirements() -> list[str]:
    # Generated code refuses to import with an older protobuf/grpcio runtime than the generator.
    try:
        grpc_floor = _release("grpcio-tools")
        proto_floor = _release("protobuf")
    except importlib.metadata.PackageNotFoundError:
        grpc_floor, proto_floor = "1.66.0", "5.27.0"
    return [f"grpcio>={grpc_floor},<2", f"protobuf>={proto_floor}", "numpy>=1.26,<3", "gymnasium>=1.0,<2"]


class BuildWithStubs(build_py):
    """`build_py` plus `protoc` on every `.proto` under the proto root's `codegym/` folder."""

    def run(self) -> None:
        super().run()
        from grpc_tools import protoc  # a build requirement, imported only when building

        protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / "codegym").rglob("*.proto"))
        if not protos:
            raise RuntimeError(f"no .proto files under {PROTO_ROOT / 'codegym'}")
        out = Path(self.build_lib)
        well_known = Path(protoc.__file__).parent / "_proto"
        args = [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{well_known}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            *protos,
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {protos} (proto root {PROTO_ROOT})")
        # The stubs import each other as `codegym.v1.*`, which lands inside this very package.
        for folder in {(out / p).parent for p in protos}:
            init = folder / "__init__.py"
            if not init.exists():
                init.write_text('"""Generated gRPC stubs (codegym.v1)."""\n')


setup(cmdclass={"build_py": BuildWithStubs}, install_requires=_runtime_requirements())
