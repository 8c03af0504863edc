"""Where model bytes come from. A source has ``name``, ``size`` and ``read(offset, n) -> bytes``.

GPU backends may recognise a source and upload from it more directly (the browser backend's ArrayBufferSource)."""
from __future__ import annotations

import os
import stat

from .errors import GGUFFormatError, InputError


def check_regular_file(path) -> None:
    """InputError unless `path` is a regular file (opening a FIFO blocks until a writer comes; devices and
    directories are no model files either). Missing files are left to open(), whose message is the usual one."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "not a regular file")
        raise InputError(f"{os.fspath(path)!r} is {kind}, not a model file; give the path of a .gguf file")


class FileSource:
    """A local file, read on demand (the header first; tensors straight into GPU buffers)."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.name = os.path.basename(self.path)
        check_regular_file(self.path)
        try:
            self._f = open(self.path, "rb")
        except OSError as e:
            raise GGUFFormatError(f"cannot open model file {self.path!r}: {e.strerror}; check the path") from None
        self.size = os.fstat(self._f.fileno()).st_size

    def read(self, offset: int, n: int) -> bytes:
        self._f.seek(offset)
        return self._f.read(n)

    def close(self):
        self._f.close()


class BytesSource:
    """Model bytes already in memory (tests, small files)."""

    def __init__(self, data, name: str = "model.gguf"):
        self.data = memoryview(data).cast("B")
        self.name = name
        self.size = len(self.data)

    def read(self, offset: int, n: int) -> bytes:
        return bytes(self.data[offset:offset + n])

    def close(self):
        pass
