#!/usr/bin/env python3
"""Runs the embedding test vectors through the policy-only component with wasmtime-py.

Usage: python run_vectors.py <component.wasm> <vectors.json> <out.json>

The vector format, the JSON value encoding and the pattern semantics are in ../README.md.
Exit status: 0 when every vector matches, 1 on a mismatch, 2 when the run itself fails (bad
vector, unsupported type, trap).
"""

import json
import sys

import wasmtime
from wasmtime import component as wc

HOST = "wasmtime-py"
REFERENCES = {"$round": "rounds", "$record": "records"}


class VectorError(Exception):
    """A vector that cannot be run (as opposed to a result that does not match)."""


def resolve(value, named):
    """Replaces every `$round` / `$record` reference in `value`, applying its `$patch`."""
    if isinstance(value, list):
        return [resolve(v, named) for v in value]
    if not isinstance(value, dict):
        return value
    if "$string" in value:
        return long_string(value)
    refs = [k for k in REFERENCES if k in value]
    if not refs:
        return {k: resolve(v, named) for k, v in value.items()}
    if len(refs) > 1 or set(value) - {refs[0], "$patch"}:
        raise VectorError(f"malformed reference {json.dumps(value)}")
    table, name = REFERENCES[refs[0]], value[refs[0]]
    if name not in named[table]:
        raise VectorError(f"no {table} entry named {name!r}")
    target = resolve(named[table][name], named)
    if "$patch" in value:
        target = merge_patch(target, resolve(value["$patch"], named))
    return target


def long_string(value):
    """`{"$string": {"prefix", "repeat", "times", "suffix"}}`: prefix + repeat * times + suffix."""
    spec = value["$string"]
    if set(value) != {"$string"} or set(spec) != {"prefix", "repeat", "times", "suffix"}:
        raise VectorError(f"malformed $string {json.dumps(value)[:200]}")
    return spec["prefix"] + spec["repeat"] * spec["times"] + spec["suffix"]


def merge_patch(target, patch):
    """RFC 7386, without mutating either argument."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, v in patch.items():
        if v is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), v)
    return out


# wasmtime-py represents a variant, option or result as `wc.Variant(tag, payload)` only when two of
# its cases could be confused by their Python classes (`ty._tagged()`); otherwise it passes and
# returns the bare payload (`None` for a case without one) and tells the cases apart by class.


def cases(ty):
    if isinstance(ty, wc.VariantType):
        return ty.cases
    if isinstance(ty, wc.OptionType):
        return [("none", None), ("some", ty.payload)]
    return [("ok", ty.ok), ("err", ty.err)]


def classes(ty):
    """The Python classes wasmtime-py uses for a case; `object` stands for `None`."""
    if ty is None:
        return {object}
    found = set()
    ty.add_classes(found)
    return found


def untagged_case(ty, value):
    """The case wasmtime-py gives a bare `value` of the untagged type `ty`."""
    for name, case_ty in cases(ty):
        found = classes(case_ty)
        if value is None:
            if object in found:
                return name
        elif isinstance(value, tuple(found - {object})):
            return name
    raise TypeError(f"{value!r} matches no case of {type(ty).__name__}")


def check(json_type, value, what):
    if not isinstance(value, json_type) or (json_type is not bool and isinstance(value, bool)):
        raise VectorError(f"expected {what}, got {json.dumps(value)}")
    return value


INTEGERS = (wc.S8, wc.S16, wc.S32, wc.S64, wc.U8, wc.U16, wc.U32, wc.U64)


def lower(ty, value):
    """JSON value -> wasmtime-py value of WIT type `ty`."""
    if isinstance(ty, wc.RecordType):
        check(dict, value, "an object")
        fields = ty.fields
        unknown = set(value) - {name for name, _ in fields}
        if unknown:
            raise VectorError(f"unknown record fields {sorted(unknown)}")
        record = wc.Record()
        for name, field_ty in fields:
            if name not in value and not isinstance(field_ty, wc.OptionType):
                raise VectorError(f"missing record field {name!r}")
            setattr(record, name, lower(field_ty, value.get(name)))
        return record
    if isinstance(ty, wc.ListType):
        items = [lower(ty.element, v) for v in check(list, value, "an array")]
        return bytes(items) if isinstance(ty.element, wc.U8) else items
    if isinstance(ty, wc.TupleType):
        elements = ty.elements
        if len(check(list, value, "an array")) != len(elements):
            raise VectorError(f"expected a {len(elements)}-tuple, got {json.dumps(value)}")
        return tuple(lower(t, v) for t, v in zip(elements, value))
    if isinstance(ty, (wc.VariantType, wc.OptionType, wc.ResultType)):
        if isinstance(ty, wc.OptionType):
            tag, payload = ("none", None) if value is None else ("some", value)
        elif isinstance(ty, wc.VariantType):
            tag, payload = check(dict, value, "a variant")["tag"], value.get("val")
        elif isinstance(value, dict) and len(value) == 1:
            [(tag, payload)] = value.items()
        else:
            raise VectorError(f"expected a result object, got {json.dumps(value)}")
        by_tag = dict(cases(ty))
        if tag not in by_tag:
            raise VectorError(f"unknown case {tag!r}")
        if by_tag[tag] is None:
            if payload is not None:
                raise VectorError(f"case {tag!r} has no payload")
            lowered = None
        else:
            lowered = lower(by_tag[tag], payload)
        if ty._tagged():
            return wc.Variant(tag, lowered)
        # wasmtime-py picks the case of a bare value by its class: make sure it is this one.
        if untagged_case(ty, lowered) != tag:
            raise VectorError(f"wasmtime-py cannot tell case {tag!r} of {json.dumps(value)} apart")
        return lowered
    if isinstance(ty, wc.EnumType):
        if value not in ty.names:
            raise VectorError(f"{json.dumps(value)} is not one of {ty.names}")
        return value
    if isinstance(ty, INTEGERS):
        return check(int, value, "an integer")
    if isinstance(ty, (wc.F32, wc.F64)):
        return float(check((int, float), value, "a number"))
    if isinstance(ty, (wc.String, wc.Char)):
        return check(str, value, "a string")
    if isinstance(ty, wc.Bool):
        return check(bool, value, "a boolean")
    raise VectorError(f"no JSON encoding for WIT type {type(ty).__name__}")


def lift(ty, value):
    """wasmtime-py value of WIT type `ty` -> JSON value."""
    if isinstance(ty, wc.RecordType):
        return {name: lift(field_ty, getattr(value, name)) for name, field_ty in ty.fields}
    if isinstance(ty, wc.ListType):
        return [lift(ty.element, v) for v in value]
    if isinstance(ty, wc.TupleType):
        return [lift(t, v) for t, v in zip(ty.elements, value)]
    if isinstance(ty, (wc.VariantType, wc.OptionType, wc.ResultType)):
        if ty._tagged():
            tag, payload = value.tag, value.payload
        else:
            tag, payload = untagged_case(ty, value), value
        case_ty = dict(cases(ty))[tag]
        val = None if case_ty is None else lift(case_ty, payload)
        if isinstance(ty, wc.OptionType):
            return val
        if isinstance(ty, wc.ResultType):
            return {tag: val}
        return {"tag": tag} if case_ty is None else {"tag": tag, "val": val}
    if isinstance(ty, (wc.EnumType, wc.String, wc.Char, wc.Bool, wc.F32, wc.F64) + INTEGERS):
        return value
    raise TypeError(f"no JSON encoding for WIT type {type(ty).__name__}")


def matches(pattern, value):
    if isinstance(pattern, dict):
        return isinstance(value, dict) and all(
            k in value and matches(p, value[k]) for k, p in pattern.items()
        )
    if isinstance(pattern, list):
        return (
            isinstance(value, list)
            and len(pattern) == len(value)
            and all(matches(p, v) for p, v in zip(pattern, value))
        )
    return pattern == value and isinstance(pattern, bool) == isinstance(value, bool)


class Component:
    """One instance of the component, reused by every vector: a trap ends the run."""

    def __init__(self, path):
        engine = wasmtime.Engine()
        component = wc.Component.from_file(engine, path)
        self.exports = list(component.type.exports(engine))
        linker = wc.Linker(engine)
        # `wasi:random` (lease tokens), and any other `wasi:*@0.2` import a build may carry.
        linker.add_wasip2()
        self.store = wasmtime.Store(engine)
        # Without a WASI context, the first WASI call panics inside wasmtime's C API. The default
        # context grants no environment, no stdio and no preopened directory.
        self.store.set_wasi(wasmtime.WasiConfig())
        self.instance = linker.instantiate(self.store, component)
        self.funcs = {}

    def func(self, call):
        if call not in self.funcs:
            interface, _, name = call.partition(".")
            # Exports are named `<package>/<interface>@<version>`.
            found = [e for e in self.exports if e.rpartition("/")[2].partition("@")[0] == interface]
            if len(found) != 1:
                raise VectorError(f"the component exports no interface {interface!r}")
            index = self.instance.get_export_index(self.store, found[0])
            index = index and self.instance.get_export_index(self.store, name, index)
            func = index and self.instance.get_func(self.store, index)
            if func is None:
                raise VectorError(f"{found[0]} exports no function {name!r}")
            self.funcs[call] = func, func.type(self.store)
        return self.funcs[call]

    def call(self, call, args):
        func, ty = self.func(call)
        params = ty.params
        if len(args) != len(params):
            raise VectorError(f"{call} takes {len(params)} arguments, got {len(args)}")
        result = func(self.store, *(lower(t, a) for (_, t), a in zip(params, args)))
        # A `result` comes back as a value (its `err` case too); traps raise.
        return None if ty.result is None else lift(ty.result, result)


def run(component_path, vectors_path, out_path):
    with open(vectors_path, encoding="utf-8") as f:
        doc = json.load(f)
    if doc.get("format") != 1:
        raise VectorError(f"unsupported vector format {doc.get('format')!r}")
    named = {table: doc.get(table, {}) for table in REFERENCES.values()}
    component = Component(component_path)
    results, mismatches, seen = [], 0, set()
    for vector in doc["vectors"]:
        vid = vector["id"]
        if vid in seen:
            raise VectorError(f"duplicate vector id {vid!r}")
        seen.add(vid)
        try:
            result = component.call(vector["call"], resolve(vector["args"], named))
        except Exception as e:
            kind = "" if isinstance(e, VectorError) else f"{type(e).__name__}: "
            raise VectorError(f"vector {vid} ({vector['call']}): {kind}{e}") from e
        results.append({"id": vid, "result": result})
        if not matches(vector["expect"], result):
            mismatches += 1
            print(
                f"MISMATCH {vid}: expected {json.dumps(vector['expect'])} got {json.dumps(result)}",
                file=sys.stderr,
            )
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"host": HOST, "results": results}, f, indent=1)
        f.write("\n")
    matched = len(results) - mismatches
    print(f"{HOST}: {len(results)} vectors, {matched} matched, {mismatches} mismatched")
    return 1 if mismatches else 0


def main(argv):
    if len(argv) != 4:
        print(f"usage: {argv[0]} <component.wasm> <vectors.json> <out.json>", file=sys.stderr)
        return 2
    try:
        return run(*argv[1:])
    except Exception as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
