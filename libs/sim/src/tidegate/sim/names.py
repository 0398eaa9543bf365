"""Object names, label syntax, generated names, uids and timestamps, as the API server does them.

Validation rules follow Kubernetes' apimachinery validators (DNS-1123 subdomain and label
names, qualified label keys, 63-character label values); generated names append five
characters from the same alphabet the real server uses. Nothing here touches the store.
"""

import random
import re
import time
import uuid
from datetime import UTC, datetime
from typing import Final

_DNS1123_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN: Final = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_QUALIFIED_NAME: Final = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE: Final = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_GENERATED_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
_RANDOM: Final = random.Random()


def subdomain_problem(name: str) -> str | None:
    """Why ``name`` is not a DNS-1123 subdomain, or None when it is one."""
    if len(name) > 253:
        return "must be no more than 253 characters"
    if not _DNS1123_SUBDOMAIN.match(name):
        return (
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
            "'-' or '.', and must start and end with an alphanumeric character"
        )
    return None


def path_segment_problem(name: str) -> str | None:
    """Why ``name`` cannot be a path segment (the rule for RBAC objects' names, which may
    hold colons: ``system:discovery``), or None."""
    if name in (".", ".."):
        return f"may not be '{name}'"
    for forbidden in ("/", "%"):
        if forbidden in name:
            return f"may not contain '{forbidden}'"
    return None


def label_name_problem(name: str) -> str | None:
    """Why ``name`` is not a DNS-1123 label (namespace names), or None."""
    if len(name) > 63:
        return "must be no more than 63 characters"
    if not _DNS1123_LABEL.match(name):
        return (
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
            "'-', and must start and end with an alphanumeric character"
        )
    return None


def qualified_name_problem(key: str) -> str | None:
    """Why ``key`` is not a qualified name (label/annotation key, gate name), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or subdomain_problem(prefix) is not None):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
            "and end with an alphanumeric character, at most 63 characters"
        )
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a valid label value, or None."""
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _LABEL_VALUE.match(value):
        return (
            "a valid label must be an empty string or consist of alphanumeric characters, '-', "
            "'_' or '.', and must start and end with an alphanumeric character"
        )
    return None


def generate_name(prefix: str) -> str:
    """``prefix`` plus five random characters, like the real server's name generator."""
    return prefix[:58] + "".join(_RANDOM.choice(_GENERATED_ALPHABET) for _ in range(5))


def new_uid() -> str:
    """A fresh object uid."""
    return str(uuid.uuid4())


_LAST_STAMP: list[tuple[int, str]] = [(-1, "")]


def rfc3339(seconds: float | None = None) -> str:
    """A timestamp in the API's format (second precision, UTC, ``Z``)."""
    whole = int(time.time() if seconds is None else seconds)
    cached_second, cached_text = _LAST_STAMP[0]
    if whole == cached_second:
        return cached_text
    text = datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    _LAST_STAMP[0] = (whole, text)
    return text


def rfc3339_micro(seconds: float | None = None) -> str:
    """A MicroTime timestamp (``eventTime`` of events.k8s.io Events)."""
    moment = datetime.fromtimestamp(time.time() if seconds is None else seconds, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(text: str) -> float:
    """Seconds since the epoch of an API timestamp; ValueError if malformed."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
