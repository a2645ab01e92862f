"""Packaging: the sdist builds a wheel outside the checkout (stubs from its own proto copy), and the
wheel carries the stubs and `py.typed`."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]


def test_sdist_builds_a_typed_wheel_outside_the_checkout(tmp_path):
    # A copy of the package alone: no ../../proto beside it.
    src = tmp_path / "src-copy"
    shutil.copytree(PACKAGE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "v1", "proto"))
    proto = PACKAGE.parents[1] / "proto"
    env_dist = tmp_path / "dist"
    build = [sys.executable, "-m", "build", "--outdir", str(env_dist)]
    done = subprocess.run(
        [*build, "--sdist", str(src)],
        capture_output=True,
        text=True,
        check=False,
        env={**_env(), "CODEGYM_PROTO_DIR": str(proto)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (sdist,) = env_dist.glob("codegym-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    assert any(n.endswith("proto/codegym/v1/env.proto") for n in names), names
    # The sdist, unpacked far from the repository, builds a wheel with no proto hint at all.
    unpacked = tmp_path / "elsewhere"
    with tarfile.open(sdist) as tar:
        tar.extractall(unpacked, filter="data")
    (root,) = unpacked.iterdir()
    done = subprocess.run([*build, "--wheel", str(root)], capture_output=True, text=True, check=False, env=_env())
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = env_dist.glob("codegym-*.whl")
    with zipfile.ZipFile(wheel) as z:
        files = set(z.namelist())
        metadata = z.read(next(n for n in files if n.endswith("METADATA"))).decode()
    assert "codegym_taskset/__init__.py" in files
    assert {
        "codegym/py.typed",
        "codegym/v1/env_pb2.py",
        "codegym/v1/env_pb2_grpc.py",
        "codegym/v1/env_pb2.pyi",
    } <= files
    assert "Provides-Extra: trl" in metadata and "Provides-Extra: verifiers" in metadata
    assert "Requires-Dist: gymnasium" in metadata


def test_editable_install_imports_generated_stubs():
    import codegym
    from codegym.v1 import env_pb2

    assert hasattr(env_pb2, "ListTasksRequest")
    assert (Path(codegym.__file__).parent / "py.typed").exists()


def _env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env.pop("CODEGYM_PROTO_DIR", None)
    return env
