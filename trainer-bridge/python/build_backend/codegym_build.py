"""PEP 517 backend: maturin (the `codegym` binary and the Python package in one platform wheel), plus
the codegym.v1 gRPC stubs generated from the repository's proto files.

The stubs are generated at build time, never committed, so the package always matches
`proto/codegym/v1/*.proto` of the checkout it was built from. maturin leaves out files that git
ignores (the stubs are), so a wheel gets them added after maturin wrote it (with their RECORD
lines); an editable install gets them in `src/codegym/v1/`, where its `.pth` file points.

The proto root is, in order: `CODEGYM_PROTO_DIR`; the first `proto/` holding `codegym/` in this
package's directory or above it (the repository's, or an sdist's copy of the workspace).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import maturin

PACKAGE = Path(__file__).resolve().parents[1]

# The hooks maturin has and this backend does not change.
get_requires_for_build_wheel = maturin.get_requires_for_build_wheel
get_requires_for_build_sdist = maturin.get_requires_for_build_sdist
prepare_metadata_for_build_wheel = maturin.prepare_metadata_for_build_wheel
build_sdist = maturin.build_sdist


def _proto_root() -> Path:
    if os.environ.get("CODEGYM_PROTO_DIR"):
        return Path(os.environ["CODEGYM_PROTO_DIR"]).resolve()
    for folder in (PACKAGE, *PACKAGE.parents):
        if (folder / "proto" / "codegym").is_dir():
            return folder / "proto"
    raise RuntimeError(f"no proto root: set CODEGYM_PROTO_DIR (looked for proto/codegym/ from {PACKAGE} up)")


def generate_stubs(out: Path) -> list[Path]:
    """`protoc` on every `.proto` under the proto root's `codegym/`: Python, gRPC and `.pyi` files
    into `out` (which then holds `codegym/v1/...`). Returns the files written."""
    from grpc_tools import protoc  # a build requirement

    root = _proto_root()
    protos = sorted(str(p.relative_to(root)) for p in (root / "codegym").rglob("*.proto"))
    if not protos:
        raise RuntimeError(f"no .proto files under {root / 'codegym'}")
    well_known = Path(protoc.__file__).parent / "_proto"
    out.mkdir(parents=True, exist_ok=True)
    args = ["grpc_tools.protoc", f"-I{root}", f"-I{well_known}", f"--python_out={out}", f"--pyi_out={out}"]
    if protoc.main([*args, f"--grpc_python_out={out}", *protos]) != 0:
        raise RuntimeError(f"protoc failed on {protos} (proto root {root})")
    # The stubs import each other as `codegym.v1.*`, which lands inside this very package.
    for folder in {(out / p).parent for p in protos}:
        init = folder / "__init__.py"
        if not init.exists():
            init.write_text('"""Generated gRPC stubs (codegym.v1)."""\n')
    return sorted(p for p in (out / "codegym").rglob("*") if p.is_file())


def _record_line(name: str, data: bytes) -> list[str]:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [name, f"sha256={digest}", str(len(data))]


def add_files_to_wheel(wheel: Path, files: dict[str, bytes]) -> None:
    """Rewrites `wheel` with `files` (archive name -> content) added and listed in its RECORD."""
    tmp = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        rows = [row for row in csv.reader(io.StringIO(src.read(record_name).decode())) if row]
        # Replaced, not doubled, should maturin have packed a stale copy of a generated file.
        rows = [row for row in rows if row[0] != record_name and row[0] not in files]
        for info in src.infolist():
            if info.filename != record_name and info.filename not in files:
                dst.writestr(info, src.read(info.filename))
        for name, data in sorted(files.items()):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(info, data)
            rows.append(_record_line(name, data))
        rows.append([record_name, "", ""])
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(rows)
        dst.writestr(record_name, text.getvalue())
    tmp.replace(wheel)


def build_wheel(
    wheel_directory: str, config_settings: dict[str, Any] | None = None, metadata_directory: str | None = None
) -> str:
    name = maturin.build_wheel(wheel_directory, config_settings, metadata_directory)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        files = {p.relative_to(out).as_posix(): p.read_bytes() for p in generate_stubs(out)}
    add_files_to_wheel(Path(wheel_directory) / name, files)
    return name


def build_editable(
    wheel_directory: str, config_settings: dict[str, Any] | None = None, metadata_directory: str | None = None
) -> str:
    # An editable install imports from src/: the stubs go there (git ignores them).
    stubs = PACKAGE / "src" / "codegym" / "v1"
    shutil.rmtree(stubs, ignore_errors=True)
    generate_stubs(PACKAGE / "src")
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)
