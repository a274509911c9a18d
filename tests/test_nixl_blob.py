"""The metadata blob parser: real and synthetic blobs, malformed input, and a fuzz."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcheck.errors import InputError
from kvcheck.nixl.blob import MAX_BLOB_BYTES, BlobError, parse_metadata
from kvcheck.nixl.live import remote_regions
from tests.nixl_helpers import build_blob


def test_synthetic_blob_round_trip():
    blob = build_blob(b"kvcheck-decode-h-1", sections=((b"UCX", 0, ((0x1000, 4096, 7, b"rkey"), (0x3000, 8192, 0, b""))), (b"UCX", 1, ((0x9000, 64, 3, b"x"),))))
    m = parse_metadata(blob)
    assert m.name == "kvcheck-decode-h-1"
    assert m.backends == {"UCX": 4}
    assert m.kind_counts() == {"DRAM": 2, "VRAM": 1}
    r = m.regions("DRAM")[0]
    assert (r.addr, r.length, r.dev_id, r.key_len) == (0x1000, 4096, 7, 4)
    assert m.regions("VRAM")[0].dev_id == 3
    assert m.as_dict()["sections"][1]["kind"] == "VRAM"


def test_kvcheck_dev_ids_give_region_order():
    from kvcheck.nixl.agent import dram_dev_id

    # Blob lists by address; dev ids carry the index (and the VRAM stand-in bit).
    regs = ((0x1000, 64, dram_dev_id(2, False), b""), (0x2000, 64, dram_dev_id(0, True), b""), (0x3000, 64, dram_dev_id(1, True), b""))
    order = remote_regions(parse_metadata(build_blob(sections=((b"UCX", 0, regs),))))
    assert [(r.index, r.kind, r.addr) for r in order] == [(0, "VRAM", 0x2000), (1, "VRAM", 0x3000), (2, "DRAM", 0x1000)]


@pytest.mark.parametrize(
    "blob, words",
    [
        (b"", "not a NIXL metadata blob"),
        (b"garbage" * 20, "not a NIXL metadata blob"),
        (b"nixlSerDes|", "truncated"),
        (build_blob()[:-5], "remain"),
        (build_blob() + b"xx", "trailing"),
        (build_blob(name=b""), "empty agent name"),
        (build_blob(name=b"\xff\xfe"), "UTF-8"),
        (build_blob(sections=((b"UCX", 9, ((1, 2, 0, b""),)),)), "unknown memory kind 9"),
        (build_blob(sections=((b"UCX", 0, ((1, 2, 0, b""),)),)).replace(b"nixlSDList", b"nixlBDList"), "expected b'nixlSDList'"),
        (build_blob(sections=((b"UCX", 0, ((1, 2, 0, b""),)),)).replace(b"MemSection", b"MemSectioX"), "MemSection"),
    ],
)
def test_malformed_blobs_raise_blob_error(blob, words):
    with pytest.raises(BlobError, match=words):
        parse_metadata(blob)


def test_huge_counts_do_not_allocate():
    # A descriptor count of 2**60 with no bytes behind it: rejected before any loop.
    blob = build_blob(sections=((b"UCX", 0, ()),))
    huge = blob.replace(b"n" + struct.pack("<Q", 8) + struct.pack("<Q", 0), b"n" + struct.pack("<Q", 8) + struct.pack("<Q", 1 << 60))
    with pytest.raises(BlobError, match="more than the"):
        parse_metadata(huge)
    # A length field pointing 2**63 bytes ahead.
    bad = b"nixlSerDes|Agent" + struct.pack("<Q", 1 << 63) + b"x|"
    with pytest.raises(BlobError, match="declares"):
        parse_metadata(bad)


def test_oversized_blob_is_refused():
    with pytest.raises(BlobError, match="limit"):
        parse_metadata(b"nixlSerDes|" + b"\0" * 100, max_bytes=50)
    assert MAX_BLOB_BYTES == 64 * 1024 * 1024


def test_blob_error_is_input_error():
    assert issubclass(BlobError, InputError)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=600))
def test_fuzz_random_bytes(data):
    try:
        parse_metadata(b"nixlSerDes|" + data)
    except BlobError:
        pass


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_fuzz_mutated_valid_blob(data):
    blob = bytearray(build_blob(sections=((b"UCX", 0, ((0x1000, 4096, 7, b"rkey"), (0x3000, 8192, 0, b""))),)))
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        pos = data.draw(st.integers(0, len(blob) - 1))
        if op == "flip":
            blob[pos] = data.draw(st.integers(0, 255))
        elif op == "cut":
            del blob[pos:pos + data.draw(st.integers(1, 16))]
        else:
            blob[pos:pos] = data.draw(st.binary(min_size=1, max_size=16))
        if not blob:
            blob = bytearray(b"x")
    try:
        m = parse_metadata(bytes(blob))
        assert m.name
    except BlobError:
        pass
