"""Packaging: the PEP 517 backend (maturin + the generated gRPC stubs) builds one platform wheel with
the Python package, its stubs, `py.typed` and the `codegym` binary; the sdist carries the proto files
and the Rust workspace the binary is built from. (tests/wheel/check.sh installs such a wheel alone
into a fresh venv and runs the quick start from it.)"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]


def _build(kind: str, out: Path) -> Path:
    # The debug binary (the one the tests run) unless the caller asked for another profile.
    env = {**os.environ, "MATURIN_PEP517_ARGS": os.environ.get("MATURIN_PEP517_ARGS", "--profile dev")}
    env.pop("CODEGYM_PROTO_DIR", None)
    done = subprocess.run(
        [sys.executable, "-m", "build", f"--{kind}", "--outdir", str(out), str(PACKAGE)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    (built,) = out.glob("codegym-*.whl" if kind == "wheel" else "codegym-*.tar.gz")
    return built


def test_the_wheel_holds_the_package_its_stubs_and_the_binary(tmp_path):
    wheel = _build("wheel", tmp_path)
    assert "-py3-none-" in wheel.name, "one wheel per platform, for every Python 3"
    with zipfile.ZipFile(wheel) as z:
        files = set(z.namelist())
        metadata = z.read(next(n for n in files if n.endswith("METADATA"))).decode()
        record = z.read(next(n for n in files if n.endswith("RECORD"))).decode()
        binary = z.getinfo("codegym-0.1.0.data/scripts/codegym")
    assert {
        "codegym/py.typed",
        "codegym/local.py",
        "codegym/v1/__init__.py",
        "codegym/v1/env_pb2.py",
        "codegym/v1/env_pb2_grpc.py",
        "codegym/v1/env_pb2.pyi",
        "codegym_taskset/__init__.py",
    } <= files
    assert binary.external_attr >> 16 & 0o111, "the binary is executable"
    # Every file is in RECORD once, with its hash.
    listed = [line.split(",")[0] for line in record.splitlines() if line]
    assert sorted(listed) == sorted(files) and len(listed) == len(set(listed))
    assert "codegym/v1/env_pb2.py,sha256=" in record
    assert "Provides-Extra: trl" in metadata and "Provides-Extra: verifiers" in metadata
    assert "Requires-Dist: gymnasium" in metadata and "Requires-Dist: protobuf" in metadata


def test_the_sdist_carries_the_proto_files_and_the_workspace(tmp_path):
    sdist = _build("sdist", tmp_path)
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    assert any(n.endswith("proto/codegym/v1/env.proto") for n in names), names
    # maturin's sdist is the workspace with pyproject.toml at its root: the backend must be there.
    root = names[0].split("/")[0]
    assert f"{root}/pyproject.toml" in names and f"{root}/build_backend/codegym_build.py" in names
    assert any(n.endswith("src/main.rs") for n in names), "the binary's sources"
    assert any(n.endswith("src/codegym/local.py") for n in names)


def test_installed_package_imports_generated_stubs():
    from codegym.v1 import env_pb2

    import codegym

    assert hasattr(env_pb2, "ListTasksRequest")
    assert (Path(codegym.__file__).parent / "py.typed").exists()
