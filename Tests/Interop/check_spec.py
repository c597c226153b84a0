#!/usr/bin/env python3
"""Fails when tn_interop.py knows more than the articles say.

1. Every value in its SPEC appears in DocC.docc/Formats.md or WireFormat.md,
   as the articles spell it: text as it is, a number in decimal (with or
   without thousands separators), in hex (`0x82F63B78`) or as a mode
   (`0700`), a wait in milliseconds (`1 ms`).
2. Outside SPEC, the program has no number but 0 to 8, -1, 10 and 16 (bit and
   byte counts, radixes), no bytes literal but b"", and every Redis command word it sends
   (a string of capitals) appears in the articles.

    check_spec.py            (from the repository's root or anywhere)
"""
import ast
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ARTICLES = [os.path.join(ROOT, "DocC.docc", name) for name in ("Formats.md", "WireFormat.md")]


def spellings(key, value):
    if isinstance(value, bytes):
        return [value.decode("ascii")]
    if isinstance(value, str):
        return [value]
    if isinstance(value, float):
        return ["%g ms" % (value * 1000)]
    spelled = [str(value), "{:,}".format(value), "0x%X" % value, "0x%08X" % value]
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value and value % size == 0:
            spelled.append("%d %s" % (value // size, unit))
    if key.endswith("_mode"):
        spelled.append("0%o" % value)
    return spelled


def main():
    text = "\n".join(open(path, encoding="utf-8").read() for path in ARTICLES)
    source = open(os.path.join(HERE, "tn_interop.py"), encoding="utf-8").read()
    tree = ast.parse(source)
    problems = []
    spec_node = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SPEC" for t in node.targets):
            spec_node = node.value
    if not isinstance(spec_node, ast.Dict):
        print("check_spec: tn_interop.py has no SPEC dictionary", file=sys.stderr)
        return 1
    spec = ast.literal_eval(spec_node)
    for key, value in spec.items():
        if not any(spelling in text for spelling in spellings(key, value)):
            problems.append("SPEC[%r] = %r is in neither article (looked for %s)"
                            % (key, value, ", ".join(repr(s) for s in spellings(key, value))))
    # SPEC itself, and the Redis client: RESP is Redis's protocol, not ours.
    inside = {id(node) for node in ast.walk(spec_node)}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Redis":
            inside |= {id(inner) for inner in ast.walk(node)}
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or id(node) in inside or id(node) in docstrings:
            continue
        value = node.value
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, (int, float)) and value not in [*range(-1, 9), 10, 16]:
            problems.append("line %d: the number %r is not in SPEC" % (node.lineno, value))
        elif isinstance(value, bytes) and value:
            problems.append("line %d: the bytes %r are not in SPEC" % (node.lineno, value))
        elif isinstance(value, str) and len(value) >= 3 and value.isupper() and value.isalpha() \
                and value not in text:
            problems.append("line %d: the command %r is in neither article" % (node.lineno, value))
    for problem in problems:
        print("check_spec: " + problem, file=sys.stderr)
    if problems:
        return 1
    print("check_spec: all %d constants of tn_interop.py are in the articles" % len(spec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
