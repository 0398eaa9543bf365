"""Label and field selectors in the query-string syntax of the Kubernetes API.

Label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a`` (exists),
``!a`` (does not exist), joined by commas (AND). Field selectors: ``path=value``,
``path==value``, ``path!=value`` over a per-kind allow-list of fields, as the real server only
supports a few fields per kind and answers 400 for the others. Parsing errors are
:class:`~tidegate.sim.errors.ApiError` 400s naming the offending text. Matching does not copy
objects.
"""

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from tidegate.sim.errors import JsonObject, bad_request

_KEY: Final = re.compile(
    r"^([A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_VALUE: Final = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_SET_TERM: Final = re.compile(r"^\s*(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^)]*)\)\s*$")


@dataclass(frozen=True)
class Requirement:
    """One term of a label selector."""

    key: str
    operator: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, object]) -> bool:
        """Whether ``labels`` satisfy this term."""
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator in ("=", "in"):
            return present and value in self.values
        if self.operator in ("!=", "notin"):
            return not present or value not in self.values
        if self.operator == "exists":
            return present
        return not present


def _split_terms(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    terms: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    return [t for t in (term.strip() for term in terms) if t]


def _check_key(key: str, selector: str) -> str:
    if not _KEY.match(key) or len(key.rsplit("/", 1)[-1]) > 63:
        raise bad_request(f'unable to parse requirement: invalid label key "{key}" in "{selector}"')
    return key


def _check_value(value: str, selector: str) -> str:
    if len(value) > 63 or not _VALUE.match(value):
        raise bad_request(
            f'unable to parse requirement: invalid label value "{value}" in "{selector}"'
        )
    return value


def parse_label_selector(text: str) -> list[Requirement]:
    """Parse a label selector; an empty string selects everything."""
    requirements: list[Requirement] = []
    for term in _split_terms(text):
        set_match = _SET_TERM.match(term)
        if set_match:
            values = [v.strip() for v in set_match["values"].split(",") if v.strip()]
            requirements.append(
                Requirement(
                    _check_key(set_match["key"], text),
                    set_match["op"],
                    frozenset(_check_value(v, text) for v in values),
                )
            )
            continue
        for op in ("!=", "==", "="):
            if op in term:
                key, _, value = term.partition(op)
                requirements.append(
                    Requirement(
                        _check_key(key.strip(), text),
                        "!=" if op == "!=" else "=",
                        frozenset({_check_value(value.strip(), text)}),
                    )
                )
                break
        else:
            if term.startswith("!"):
                requirements.append(Requirement(_check_key(term[1:].strip(), text), "!exists"))
            elif " " in term or "(" in term:
                raise bad_request(f'unable to parse requirement: "{term}" in "{text}"')
            else:
                requirements.append(Requirement(_check_key(term, text), "exists"))
    return requirements


def labels_match(requirements: list[Requirement], obj: JsonObject) -> bool:
    """Whether the object's ``metadata.labels`` satisfy every requirement."""
    if not requirements:
        return True
    metadata = obj.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    if not isinstance(labels, dict):
        labels = {}
    return all(r.matches(labels) for r in requirements)


def match_label_selector_object(selector: object, labels: Mapping[str, object]) -> bool:
    """Match a structured ``LabelSelector`` (matchLabels / matchExpressions) against labels."""
    if not isinstance(selector, dict):
        return False
    match_labels = selector.get("matchLabels") or {}
    if isinstance(match_labels, dict):
        for key, value in match_labels.items():
            if labels.get(key) != value:
                return False
    expressions = selector.get("matchExpressions") or []
    if isinstance(expressions, list):
        for expr in expressions:
            if not isinstance(expr, dict):
                return False
            op = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}.get(
                str(expr.get("operator"))
            )
            if op is None:
                return False
            values = expr.get("values") or []
            requirement = Requirement(
                str(expr.get("key")),
                op,
                frozenset(str(v) for v in values) if isinstance(values, list) else frozenset(),
            )
            if not requirement.matches(labels):
                return False
    return True


# --- field selectors ---------------------------------------------------------------------

FieldGetter = Callable[[JsonObject], str]


def _path_getter(path: str) -> FieldGetter:
    parts = path.split(".")

    def get(obj: JsonObject) -> str:
        current: object = obj
        for part in parts:
            if not isinstance(current, dict):
                return ""
            current = current.get(part)
        if current is None:
            return ""
        if isinstance(current, bool):
            return "true" if current else "false"
        return str(current)

    return get


_COMMON_FIELDS: Final = ("metadata.name", "metadata.namespace")
_FIELDS_BY_KIND: Final[dict[str, tuple[str, ...]]] = {
    "Pod": (
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    "Node": ("spec.unschedulable",),
    "Namespace": ("status.phase",),
    "Event": (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    "Job": ("status.successful",),
    "ReplicaSet": ("status.replicas",),
}


@dataclass(frozen=True)
class FieldRequirement:
    """One ``path=value`` or ``path!=value`` term of a field selector."""

    path: str
    equal: bool
    value: str
    getter: FieldGetter

    def matches(self, obj: JsonObject) -> bool:
        """Whether the object satisfies this term."""
        return (self.getter(obj) == self.value) == self.equal


def parse_field_selector(text: str, kind: str) -> list[FieldRequirement]:
    """Parse a field selector for objects of ``kind``; unsupported fields are a 400."""
    allowed = set(_COMMON_FIELDS) | set(_FIELDS_BY_KIND.get(kind, ()))
    requirements: list[FieldRequirement] = []
    for term in _split_terms(text):
        for op in ("!=", "==", "="):
            if op in term:
                path, _, value = term.partition(op)
                path = path.strip()
                break
        else:
            raise bad_request(f'invalid selector: "{text}"; can\'t understand "{term}"')
        if path not in allowed:
            raise bad_request(f'field label not supported: "{path}"')
        requirements.append(FieldRequirement(path, op != "!=", value.strip(), _path_getter(path)))
    return requirements


def fields_match(requirements: list[FieldRequirement], obj: JsonObject) -> bool:
    """Whether the object satisfies every field requirement."""
    return all(r.matches(obj) for r in requirements)


@dataclass(frozen=True)
class Selector:
    """A parsed label selector and field selector together."""

    labels: list[Requirement]
    fields: list[FieldRequirement]

    @classmethod
    def parse(cls, label_selector: str, field_selector: str, kind: str) -> "Selector":
        """Parse both query parameters (either may be empty)."""
        return cls(parse_label_selector(label_selector), parse_field_selector(field_selector, kind))

    @property
    def everything(self) -> bool:
        """True when the selector selects every object."""
        return not self.labels and not self.fields

    def matches(self, obj: JsonObject) -> bool:
        """Whether the object is selected."""
        return labels_match(self.labels, obj) and fields_match(self.fields, obj)


__all__ = [
    "FieldRequirement",
    "Requirement",
    "Selector",
    "labels_match",
    "match_label_selector_object",
    "parse_field_selector",
    "parse_label_selector",
]
