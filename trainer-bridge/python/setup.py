"""Build step: generate the codegym.v1 gRPC stubs from the repository's proto files.

The stubs are generated at build time, never committed, so the Python package always matches
`proto/codegym/v1/*.proto` of the checkout (or sdist) it was built from. The proto root is, in order:
`CODEGYM_PROTO_DIR`; `proto/` beside this file (an sdist ships its copy there); the repository's
`proto/`. Wheels get the stubs in the build directory; editable installs (`pip install -e`) get them
in `src/codegym/v1/` (ignored by git), since an editable install imports from `src/`.
"""

import importlib.metadata
import os
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent


def _proto_root() -> Path:
    if os.environ.get("CODEGYM_PROTO_DIR"):
        return Path(os.environ["CODEGYM_PROTO_DIR"]).resolve()
    for candidate in (HERE / "proto", HERE.parent.parent / "proto"):
        if (candidate / "codegym").is_dir():
            return candidate.resolve()
    raise RuntimeError(
        f"no proto root: set CODEGYM_PROTO_DIR (looked in {HERE / 'proto'} and {HERE.parent.parent / 'proto'})"
    )


def generate_stubs(out: Path) -> None:
    """`protoc` on every `.proto` under the proto root's `codegym/`, Python + gRPC + `.pyi` into `out`."""
    from grpc_tools import protoc  # a build requirement, imported only when building

    root = _proto_root()
    protos = sorted(str(p.relative_to(root)) for p in (root / "codegym").rglob("*.proto"))
    if not protos:
        raise RuntimeError(f"no .proto files under {root / 'codegym'}")
    well_known = Path(protoc.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{root}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {protos} (proto root {root})")
    # The stubs import each other as `codegym.v1.*`, which lands inside this very package.
    for folder in {(out / p).parent for p in protos}:
        init = folder / "__init__.py"
        if not init.exists():
            init.write_text('"""Generated gRPC stubs (codegym.v1)."""\n')


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
    return [
        f"grpcio>={grpc_floor},<2",
        f"protobuf>={proto_floor}",
        "numpy>=1.26,<3",
        "gymnasium>=1.0,<2",
        # grpc.health.v1 stubs for codegym.pool's health checks.
        "grpcio-health-checking>=1.66,<2",
    ]


class BuildWithStubs(build_py):
    """`build_py` plus the generated stubs (in the build directory, or `src/` when editable)."""

    def run(self) -> None:
        super().run()
        editable = bool(getattr(self, "editable_mode", False))
        generate_stubs(HERE / "src" if editable else Path(self.build_lib))


class SdistWithProto(sdist):
    """`sdist` that ships the proto files in `proto/`, so the sdist builds outside the checkout."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        root = _proto_root()
        target = Path(base_dir) / "proto"
        for proto in (root / "codegym").rglob("*.proto"):
            dest = target / proto.relative_to(root)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(proto, dest)


setup(cmdclass={"build_py": BuildWithStubs, "sdist": SdistWithProto}, install_requires=_runtime_requirements())
