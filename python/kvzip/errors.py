"""Exceptions of the kvzip package: one class per error code of the C++ library (common/error.h).

Every error the library raises is a KvzipError subclass carrying `code` (the library's Errc
number) and `exit_status` (what the `kvzip` command exits with for it), so Python code can catch
exactly the classes the CLI distinguishes by exit status.
"""


class KvzipError(Exception):
    """Base class: `code` is the library's error code, `exit_status` the CLI's exit status."""

    code = 1
    name = "unknown"
    exit_status = 1


def _make(name, code, exit_status, *bases, doc):
    cls = type(name, (KvzipError, *bases), {"code": code, "name": "", "exit_status": exit_status, "__doc__": doc})
    return cls


IoError = _make("IoError", 10, 4, OSError, doc="open/read/write/rename failed")
TruncatedError = _make("TruncatedError", 11, 5, doc="file shorter than its structures say")
BadMagicError = _make("BadMagicError", 12, 6, doc="not a file of the expected kind")
VersionUnsupportedError = _make("VersionUnsupportedError", 13, 7, doc="newer major version than this build reads")
CorruptError = _make("CorruptError", 14, 8, doc="a field holds an impossible value")
ChecksumMismatchError = _make("ChecksumMismatchError", 15, 9, doc="stored checksum differs from the data")
ModelMismatchError = _make("ModelMismatchError", 16, 10, doc="cache written by another model")
InvalidArgumentError = _make("InvalidArgumentError", 20, 2, ValueError, doc="bad user input (ratio, document, option)")
NotFoundError = _make("NotFoundError", 21, 3, FileNotFoundError, doc="a required file (model, cache) does not exist")
UnsupportedError = _make("UnsupportedError", 22, 11, doc="dtype/arch/device this build cannot handle")
OutOfMemoryError = _make("OutOfMemoryError", 30, 12, MemoryError, doc="not enough memory")
CudaError = _make("CudaError", 31, 13, doc="a CUDA call failed")
InternalError = _make("InternalError", 40, 70, doc="a bug in kvzip (programmer error)")

_NAMES = {
    IoError: "io", TruncatedError: "truncated", BadMagicError: "bad_magic",
    VersionUnsupportedError: "version_unsupported", CorruptError: "corrupt",
    ChecksumMismatchError: "checksum_mismatch", ModelMismatchError: "model_mismatch",
    InvalidArgumentError: "invalid_argument", NotFoundError: "not_found", UnsupportedError: "unsupported",
    OutOfMemoryError: "out_of_memory", CudaError: "cuda", InternalError: "internal",
}
for _cls, _name in _NAMES.items():
    _cls.name = _name

ERROR_CLASSES = {cls.code: cls for cls in _NAMES}


def error_class(code):
    """The exception class of a library error code (KvzipError for an unknown one)."""
    return ERROR_CLASSES.get(code, KvzipError)


__all__ = ["KvzipError", "error_class", "ERROR_CLASSES"] + [cls.__name__ for cls in _NAMES]
