"""specdec: Python client SDK of the specdec speculative-decoding router.

    from specdec import Client, GenerateOptions
    client = Client("127.0.0.1:50050")
    print(client.generate("Once upon a time", GenerateOptions(method="DRAFT_CHAIN")).text)

The protobuf/gRPC modules in ``specdec.v1`` are generated from ``<repo>/proto`` on first import
when missing or stale (see ``specdec._protos``), or ahead of time by ``generate_protos.sh``.
"""

from . import _protos

_protos.ensure_generated()

from .client import (  # noqa: E402  (after generation on purpose)
    API_KEY_ENV, METHODS, Chunk, Client, GenerateOptions, GenerateStream, Info, ModelInfo, Result,
    SpecdecError, StepStats, Summary,
)

__all__ = [
    "API_KEY_ENV", "METHODS", "Chunk", "Client", "GenerateOptions", "GenerateStream", "Info",
    "ModelInfo", "Result", "SpecdecError", "StepStats", "Summary",
]
__version__ = "0.1.0"
