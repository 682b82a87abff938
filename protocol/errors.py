"""The one Kafka error type, and the mapping from any exception to the code a client is answered with.

Every layer raises `KafkaError(code, message)` for an outcome a client must hear about, with kio's
`ErrorCode`; a handler catches it and puts `code` and `message` into its response. Subclasses only
add data a caller needs (the log bounds of an out-of-range offset, where a corrupt batch lies)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError", "error_code_for"]


class KafkaError(Exception):
    """An error a client is answered with: Kafka's error code and a message for it."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.name}, {self.message!r})"


def error_code_for(exc: BaseException) -> tuple[ErrorCode, str]:
    """The Kafka error code and message for an exception a handler did not expect: its own for a
    KafkaError, KAFKA_STORAGE_ERROR for an I/O error (a full disk, a failed fsync),
    UNKNOWN_SERVER_ERROR for anything else (a bug)."""
    if isinstance(exc, KafkaError):
        return exc.code, exc.message or str(exc)
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        return ErrorCode.kafka_storage_error, f"Disk error{where}: {exc.strerror or exc}"
    return ErrorCode.unknown_server_error, f"{type(exc).__name__}: {exc}"
