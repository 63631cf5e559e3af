"""Makes sure the generated specdec.v1 protobuf/gRPC modules exist, generating them if needed.

The *_pb2.py / *_pb2_grpc.py modules are build outputs (not committed). They are produced either
by ``clients/python/generate_protos.sh`` or, lazily, by :func:`ensure_generated`, which ``import
specdec`` calls: when a module is missing, or older than its .proto, it runs
``grpc_tools.protoc`` in-process (the same command line as the script) and moves the results into
``specdec/v1/`` atomically, so concurrent first imports are safe.

The protos are looked up in ``$SPECDEC_PROTO_DIR`` or else ``<repo>/proto`` (this file lives in
``<repo>/clients/python/specdec/``). With neither present (an installed copy), existing generated
modules are used as they are.

Run ``python3 -m specdec._protos`` from clients/python to force regeneration.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_OUT_DIR = os.path.join(_PKG_DIR, "v1")
_PROTOS = ("common", "router")
_MODULES = ("common_pb2.py", "common_pb2_grpc.py", "router_pb2.py", "router_pb2_grpc.py")


def proto_dir() -> str:
    return os.environ.get("SPECDEC_PROTO_DIR") or os.path.normpath(
        os.path.join(_PKG_DIR, "..", "..", "..", "proto"))


def _stale() -> bool:
    outs = [os.path.join(_OUT_DIR, m) for m in _MODULES]
    if not all(os.path.exists(p) for p in outs):
        return True
    srcs = [os.path.join(proto_dir(), "specdec", "v1", p + ".proto") for p in _PROTOS]
    if not all(os.path.exists(s) for s in srcs):
        return False  # no sources here (installed copy): use what exists
    newest_src = max(os.path.getmtime(s) for s in srcs)
    return min(os.path.getmtime(p) for p in outs) < newest_src


def generate() -> None:
    """Runs grpc_tools.protoc on common.proto and router.proto into specdec/v1/."""
    src = proto_dir()
    files = [os.path.join(src, "specdec", "v1", p + ".proto") for p in _PROTOS]
    missing = [f for f in files if not os.path.exists(f)]
    if missing:
        raise ImportError(
            "specdec: the generated protobuf modules are missing and the protos were not found "
            f"({', '.join(missing)}); set SPECDEC_PROTO_DIR or run clients/python/generate_protos.sh")
    try:
        from grpc_tools import protoc
    except ImportError as e:  # pragma: no cover - depends on the host
        raise ImportError(
            "specdec: grpc_tools is needed to generate the protobuf modules "
            "(apt-get install python3-grpc-tools, and use /usr/bin/python3)") from e
    tmp = tempfile.mkdtemp(prefix="specdec-protos-")
    try:
        args = ["grpc_tools.protoc", f"-I{src}", f"--python_out={tmp}",
                f"--grpc_python_out={tmp}", *files]
        if protoc.main(args) != 0:
            raise ImportError(f"specdec: grpc_tools.protoc failed on {files}")
        for name in _MODULES:
            staged = os.path.join(_OUT_DIR, f".{name}.{os.getpid()}.tmp")
            shutil.copyfile(os.path.join(tmp, "specdec", "v1", name), staged)
            os.replace(staged, os.path.join(_OUT_DIR, name))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ensure_generated() -> None:
    if not _stale():
        return
    have_all = all(os.path.exists(os.path.join(_OUT_DIR, m)) for m in _MODULES)
    try:
        generate()
    except (OSError, ImportError) as e:
        if not have_all:
            raise
        # Only stale (e.g. a read-only install): keep the modules that exist.
        print(f"specdec: warning: could not regenerate protobuf modules ({e}); using existing ones",
              file=sys.stderr)


if __name__ == "__main__":
    generate()
    print(f"specdec: generated {', '.join(_MODULES)} in {_OUT_DIR}", file=sys.stderr)
