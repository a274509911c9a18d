"""Mooncake's "Failed to get segment descriptor for segment ... address A--B" (a range no
buffer of the peer covers) against "Local segment descriptor not found" (the engine's own
metadata lost): two kinds, two first causes (issue 20, r11-06). Excerpts written here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from kvcheck.explain import explain_text


def _first(text: str):
    rep = explain_text(text, source="log").report
    assert rep is not None and rep.first_cause is not None
    return rep.first_cause


RANGE = (
    "I0803 10:00:01.000001  311 transfer_metadata_dump.cpp:51] Failed to get segment descriptor for segment "
    "10.1.0.7:15001 address 0x7f00a0000000--0x7f00a0010000\n"
    "[2026-08-03 10:00:01 TP0] KVTransferError: Failed due to an unknown reason from another rank\n"
)
LOCAL = "E0803 10:00:00.500000  311 transfer_metadata.cpp:877] Local segment descriptor not found\n"


def test_sglang_sizes_the_metadata_hidden_states_from_the_draft_only_with_speculative_decoding():
    # the fact the cause rests on, in the installed release's scheduler
    spec = importlib.util.find_spec("sglang")  # the package only: its subpackages import torch
    assert spec is not None and spec.origin
    src = Path(spec.origin).parent.joinpath("srt", "managers", "scheduler.py").read_text(encoding="utf-8")
    assert "carries_draft_hidden_states()" in src
    assert "disagg_hidden_size = 16" in src and "disagg_hidden_states_dtype = torch.float32" in src


def test_an_address_range_in_no_registered_buffer_is_a_layout_mismatch_first():
    f = _first(RANGE)
    assert f.id == "mooncake-segment-range-unregistered"
    assert f.phase == "first-transfer"
    assert "speculative" in f.cause and "#33877" in f.cause
    assert f.cause.index("speculative") < f.cause.index("Mooncake#2177")
    assert "speculative" in f.fix


def test_a_lost_local_segment_descriptor_stays_the_version_kind():
    f = _first(LOCAL + RANGE)
    assert f.id == "mooncake-te-version-incompatible"
