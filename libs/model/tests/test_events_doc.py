"""docs/events.md is the public contract: every field of every message must be documented."""

import re
import typing
from pathlib import Path

import msgspec
import pytest

from tidegate.model import events

DOC = Path(__file__).resolve().parents[3] / "docs" / "events.md"


def section(tag: str) -> str:
    text = DOC.read_text()
    match = re.search(rf"^### {re.escape(tag)}\n(.*?)(?=^#{{2,3}} |\Z)", text, re.M | re.S)
    assert match is not None, f"docs/events.md has no section '### {tag}'"
    return match.group(1)


BODIES = typing.get_args(events.Message)


@pytest.mark.parametrize("body", BODIES, ids=lambda t: t.__name__)
def test_every_field_is_documented(body: type[msgspec.Struct]) -> None:
    info = msgspec.inspect.type_info(body)
    assert isinstance(info, msgspec.inspect.StructType)
    tag = info.tag
    assert isinstance(tag, str)
    text = section(tag)
    missing = [f.name for f in msgspec.structs.fields(body) if f"`{f.name}`" not in text]
    assert not missing, f"fields of {tag} missing from docs/events.md: {missing}"


def test_podset_and_envelope_fields_are_documented() -> None:
    text = DOC.read_text()
    for struct in (events.Envelope, events.PodSetSpec, events.TopologyRequest):
        missing = [f.name for f in msgspec.structs.fields(struct) if f"`{f.name}`" not in text]
        assert not missing, f"fields of {struct.__name__} missing from docs/events.md: {missing}"
