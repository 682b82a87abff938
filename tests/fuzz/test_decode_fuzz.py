"""Mutation fuzzing of the request decoder (issue 11): any bytes either decode or raise the
project's own FrameError, never another exception, a huge allocation or a crash. The seed corpus
is real requests of the APIs clients send most; mutations overwrite, insert, delete and truncate.
`make fuzz` runs the same property with FUZZ_EXAMPLES (default there: 1,000,000)."""

from __future__ import annotations

import os
import resource
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharebroker.protocol.codec import FrameError, decode_request
from sharebroker.protocol.record_batch import encode_batch
from tests.integration import rawkafka as rk

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "1000"))


def corpus_requests() -> list[Any]:
    """Well-formed requests of the commonest APIs and versions, as kio entities."""
    batch = bytes(encode_batch([(b"k", b"job-1"), (None, b"job-2")], timestamp_ms=1))
    return [
        rk.produce_request("jobs", 0, batch, version=9),
        rk.produce_request("jobs", 3, batch, version=3),
        rk.metadata_request(["a", "b"], version=12),
        rk.metadata_request(None, version=4),
        rk.fetch_request("jobs", 0, 5),
        rk.api_versions_request(3),
        rk.init_producer_id_request(),
    ]


def _corpus() -> list[bytes]:
    frames = [rk.encode_request(r, 7)[4:] for r in corpus_requests()]
    frames.append(bytes.fromhex("000000170003000d00000002000772646b61666b6100ffffffff0f")[4:])
    return frames


CORPUS = _corpus()


@st.composite
def mutated(draw) -> bytes:
    frame = bytearray(draw(st.sampled_from(CORPUS)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(("set", "insert", "delete", "truncate", "max")))
        pos = draw(st.integers(0, max(len(frame) - 1, 0)))
        if op == "set" and frame:
            frame[pos] = draw(st.integers(0, 255))
        elif op == "insert":
            frame[pos:pos] = draw(st.binary(min_size=1, max_size=6))
        elif op == "delete" and frame:
            del frame[pos:pos + draw(st.integers(1, 8))]
        elif op == "truncate":
            del frame[pos:]
        elif op == "max" and len(frame) >= pos + 4:
            frame[pos:pos + 4] = b"\xff\xff\xff\x7f"
    return bytes(frame)


def test_corpus_decodes():
    for frame in CORPUS[:-1]:
        decode_request(frame)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 3000,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(frame=mutated())
def test_mutated_frames_decode_or_raise_frame_error(frame):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        decode_request(frame)
    except FrameError:
        pass
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kb < 64 * 1024, f"decoding {len(frame)} bytes grew the process by {grown_kb} KB"


@settings(max_examples=EXAMPLES // 3, deadline=None, derandomize=EXAMPLES <= 3000)
@given(frame=st.binary(max_size=200))
def test_random_bytes_decode_or_raise_frame_error(frame):
    try:
        decode_request(frame)
    except FrameError:
        pass
