"""ShareGroupHeartbeat (76) v1: join, heartbeat and leave a share group; the answer carries the
member's assignment as topic ids.

The answer is encoded here rather than through kio: a 1,000-member group sends 200 of them a
second, most of them the same few fields, and kio's generic writer was a fifth of a heartbeat's
CPU."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from sharebroker.broker.apis import api
from sharebroker.broker.apis.authorization import refuse_heartbeat
from sharebroker.broker.metrics import error_name
from sharebroker.broker.structured_log import get_logger
from sharebroker.protocol.codec import DecodedRequest
from sharebroker.protocol.errors import KafkaError
from sharebroker.protocol.primitives import write_compact_str, write_uvarint

if TYPE_CHECKING:
    from sharebroker.broker.connection import Connection
    from sharebroker.broker.server import Broker

log = get_logger("sharebroker.groups")

_EPOCH_INTERVAL = struct.Struct(">ii")
_I32 = struct.Struct(">i")


def encode_response(correlation_id: int, error_code: int, error_message: str | None, member_id: str | None,
                    member_epoch: int, heartbeat_interval_ms: int,
                    assignment: Iterable[tuple[uuid.UUID, Iterable[int]]] | None) -> bytearray:
    """The size-prefixed ShareGroupHeartbeatResponse v1 frame (flexible: response header v1, compact
    strings, Assignment a nullable struct of TopicPartitions, empty tagged fields), with a zero
    throttle time that the connection's quota check may overwrite in place (so: a bytearray)."""
    out = bytearray(b"\0\0\0\0")
    out += _I32.pack(correlation_id)
    out.append(0)  # response header tagged fields
    out += _I32.pack(0)  # throttle_time_ms
    out += struct.pack(">h", error_code)
    write_compact_str(out, error_message)
    write_compact_str(out, member_id)
    out += _EPOCH_INTERVAL.pack(member_epoch, heartbeat_interval_ms)
    if assignment is None:
        out.append(0xFF)  # -1: null struct
    else:
        out.append(1)
        topics = list(assignment)
        write_uvarint(out, len(topics) + 1)
        for topic_id, partitions in topics:
            out += topic_id.bytes
            parts = list(partitions)
            write_uvarint(out, len(parts) + 1)
            out += struct.pack(f">{len(parts)}i", *parts)
            out.append(0)  # TopicPartitions tagged fields
        out.append(0)  # Assignment tagged fields
    out.append(0)  # body tagged fields
    _I32.pack_into(out, 0, len(out) - 4)
    return out


@api(76)
async def handle(broker: Broker, conn: Connection, req: DecodedRequest) -> Any:
    body = req.body
    if (denied := refuse_heartbeat(broker, conn, req)) is not None:
        return denied
    try:
        result = await broker.share_groups.heartbeat(body, conn)
    except KafkaError as exc:
        log.warning("share group heartbeat refused", conn=conn.id, group=body.group_id, member=body.member_id,
                    epoch=body.member_epoch, error=exc.code.name, message=exc.message)
        conn.response_errors = {error_name(exc.code): 1}
        return [encode_response(req.correlation_id, int(exc.code), exc.message, None, 0, 0, None)]
    return [encode_response(req.correlation_id, ErrorCode.none.value, None, result.member_id, result.member_epoch,
                            result.heartbeat_interval_ms, result.assignment)]
