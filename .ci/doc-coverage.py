#!/usr/bin/env python3
"""Fails if a public symbol declared in Sources/ has no doc comment.

Reads the symbol graphs that `swift build -emit-symbol-graph` wrote, and
checks every public or open symbol whose declaration is in this package's
Sources/ (synthesized and inherited members are skipped: they have no
declaration here).
"""
import json
import pathlib
import sys

graph_dir = pathlib.Path(sys.argv[1])
sources = str(pathlib.Path("Sources").resolve())
missing = []
checked = 0
for graph in sorted(graph_dir.glob("TypedNotifications*.symbols.json")):
    for symbol in json.loads(graph.read_text())["symbols"]:
        if symbol.get("accessLevel") not in ("public", "open"):
            continue
        uri = symbol.get("location", {}).get("uri", "")
        if sources not in uri or "::SYNTHESIZED::" in symbol["identifier"]["precise"]:
            continue
        checked += 1
        if not symbol.get("docComment", {}).get("lines"):
            line = symbol["location"]["position"]["line"] + 1
            path = uri.split(sources, 1)[1]
            missing.append(f"Sources{path}:{line}: {'.'.join(symbol['pathComponents'])}")
print(f"doc coverage: {checked - len(missing)} of {checked} public symbols documented")
for entry in missing:
    print("  undocumented:", entry)
sys.exit(1 if missing or checked == 0 else 0)
