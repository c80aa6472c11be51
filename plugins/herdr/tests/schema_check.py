"""A small JSON-schema checker (standard library only) for the keywords herdr's API schema uses.

``errors(document, schema_path, instance)`` checks ``instance`` against the schema at JSON pointer
``schema_path`` of ``document`` (``"#/schemas/request"``) and returns every violation as
``"<where>: <what>"`` (empty: valid). Keywords: ``$ref`` (JSON pointers into the same document),
``oneOf``, ``anyOf``, ``type`` (one or a list), ``const``, ``enum``, ``properties``, ``required``,
``additionalProperties`` (a schema or a boolean), ``items``, ``minimum``, ``maximum``, ``pattern``,
``maxProperties``, ``propertyNames``, and boolean schemas. Annotations (``title``, ``description``,
``default``, ``format``, ``$schema``, ``$defs``) are ignored. A keyword it does not know is an error
of the schema, never silently skipped.
"""

from __future__ import annotations

import re
from typing import Any

ANNOTATIONS = frozenset({"title", "description", "default", "format", "$schema", "$defs", "examples"})
KEYWORDS = frozenset({"$ref", "oneOf", "anyOf", "type", "const", "enum", "properties", "required",
                      "additionalProperties", "items", "minimum", "maximum", "pattern", "maxProperties",
                      "propertyNames"}) | ANNOTATIONS


class SchemaError(Exception):
    """The schema itself uses something this checker does not implement."""


def resolve(document: Any, pointer: str) -> Any:
    """The value at ``pointer`` (``#/a/b``, RFC 6901 escapes) of ``document``."""
    if not pointer.startswith("#"):
        raise SchemaError(f"only references into the same document are supported, not {pointer!r}")
    node = document
    for part in filter(None, pointer[1:].split("/")):
        part = part.replace("~1", "/").replace("~0", "~")
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError):
            raise SchemaError(f"unresolvable reference {pointer!r}") from None
    return node


def _is_type(value: Any, name: str) -> bool:
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool) or isinstance(value, float) and value.is_integer()
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "string":
        return isinstance(value, str)
    if name == "array":
        return isinstance(value, list)
    if name == "object":
        return isinstance(value, dict)
    raise SchemaError(f"unknown type {name!r}")


def _equal(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but True is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b or isinstance(a, (int, float)) and isinstance(b, (int, float)) and a == b


class Checker:
    def __init__(self, document: Any):
        self.document = document
        self._patterns: dict[str, re.Pattern] = {}

    def errors(self, schema: Any, instance: Any, where: str = "$") -> list[str]:
        if schema is True:
            return []
        if schema is False:
            return [f"{where}: no value is allowed here"]
        if not isinstance(schema, dict):
            raise SchemaError(f"a schema must be an object or a boolean, not {schema!r}")
        unknown = set(schema) - KEYWORDS
        if unknown:
            raise SchemaError(f"keywords {sorted(unknown)} are not implemented")
        out: list[str] = []
        if "$ref" in schema:
            out += self.errors(resolve(self.document, schema["$ref"]), instance, where)
        if "type" in schema:
            types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            if not any(_is_type(instance, t) for t in types):
                return out + [f"{where}: {_show(instance)} is not of type {' or '.join(types)}"]
        if "const" in schema and not _equal(instance, schema["const"]):
            out.append(f"{where}: {_show(instance)} is not {_show(schema['const'])}")
        if "enum" in schema and not any(_equal(instance, e) for e in schema["enum"]):
            out.append(f"{where}: {_show(instance)} is not one of {schema['enum']}")
        if isinstance(instance, (int, float)) and not isinstance(instance, bool):
            if "minimum" in schema and instance < schema["minimum"]:
                out.append(f"{where}: {instance} is less than {schema['minimum']}")
            if "maximum" in schema and instance > schema["maximum"]:
                out.append(f"{where}: {instance} is more than {schema['maximum']}")
        if isinstance(instance, str) and "pattern" in schema and not self._pattern(schema["pattern"]).search(instance):
            out.append(f"{where}: {instance!r} does not match {schema['pattern']!r}")
        if isinstance(instance, dict):
            out += self._object(schema, instance, where)
        if isinstance(instance, list) and "items" in schema:
            for i, item in enumerate(instance):
                out += self.errors(schema["items"], item, f"{where}[{i}]")
        if "anyOf" in schema:
            branches = [self.errors(s, instance, where) for s in schema["anyOf"]]
            if all(branches):
                out += [f"{where}: matches no branch of anyOf"] + self._closest(schema["anyOf"], branches, instance)
        if "oneOf" in schema:
            branches = [self.errors(s, instance, where) for s in schema["oneOf"]]
            ok = sum(1 for b in branches if not b)
            if ok == 0:
                out += [f"{where}: matches no branch of oneOf"] + self._closest(schema["oneOf"], branches, instance)
            elif ok > 1:
                out.append(f"{where}: matches {ok} branches of oneOf, not exactly one")
        return out

    @staticmethod
    def _closest(schemas: list, branches: list[list[str]], instance: Any) -> list[str]:
        """The errors of the branch the instance meant: one whose ``const`` properties (``method``,
        ``type``) it has, else the branch with the fewest errors."""
        def meant(s: Any) -> bool:
            props = s.get("properties", {}) if isinstance(s, dict) else {}
            consts = {k: v["const"] for k, v in props.items() if isinstance(v, dict) and "const" in v}
            return bool(consts) and isinstance(instance, dict) and all(_equal(instance.get(k), v) for k, v in consts.items())

        chosen = [b for s, b in zip(schemas, branches) if meant(s)] or branches
        return min(chosen, key=len)

    def _object(self, schema: dict, instance: dict, where: str) -> list[str]:
        out = [f"{where}: {name!r} is required" for name in schema.get("required", ()) if name not in instance]
        props = schema.get("properties", {})
        for name, value in instance.items():
            if name in props:
                out += self.errors(props[name], value, f"{where}.{name}")
            elif "additionalProperties" in schema:
                out += self.errors(schema["additionalProperties"], value, f"{where}.{name}")
        if "maxProperties" in schema and len(instance) > schema["maxProperties"]:
            out.append(f"{where}: {len(instance)} properties, at most {schema['maxProperties']} allowed")
        if "propertyNames" in schema:
            for name in instance:
                out += self.errors(schema["propertyNames"], name, f"{where} (name {name!r})")
        return out

    def _pattern(self, text: str) -> re.Pattern:
        if text not in self._patterns:
            self._patterns[text] = re.compile(text)
        return self._patterns[text]


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def errors(document: Any, schema_path: str, instance: Any) -> list[str]:
    """Every violation of the schema at ``schema_path`` of ``document`` by ``instance``."""
    return Checker(document).errors(resolve(document, schema_path), instance)
