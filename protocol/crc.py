"""CRC-32C (Castagnoli), the checksum of Kafka record batches, from the `crc32c` package's C extension.

The package's `__init__` reads its own version through `importlib.metadata`, which costs about 60 ms
of start-up; the extension module alone is loaded here instead, falling back to the package."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from collections.abc import Callable
from pathlib import Path

__all__ = ["crc32c"]


def _load() -> Callable[..., int]:
    spec = importlib.util.find_spec("crc32c")  # finds the package without running its __init__
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = Path(folder) / f"_crc32c{suffix}"
            if path.exists():
                loader = importlib.machinery.ExtensionFileLoader("crc32c._crc32c", str(path))
                ext_spec = importlib.util.spec_from_loader("crc32c._crc32c", loader)
                if ext_spec is None:
                    continue
                module = importlib.util.module_from_spec(ext_spec)
                loader.exec_module(module)
                native: Callable[..., int] = module.crc32c
                return native
    from crc32c import crc32c as packaged

    return packaged


crc32c = _load()
