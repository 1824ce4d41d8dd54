#!/usr/bin/env python3
"""Writes evals/catalogue.json, evals/apps.json and evals/turns.jsonl from
catalogue_src.py and turns_src.py. Deterministic: same sources, same bytes.

    python3 evals/tools/build.py && python3 evals/tools/check.py
"""
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from catalogue_src import APPS  # noqa: E402
from turns_src import TURNS  # noqa: E402

OUT = HERE.parent


def main():
    tools, apps = [], {}
    for kind, (_label, declared) in APPS.items():
        for t in declared:
            tools.append(t)
            apps[t["name"]] = kind
    # A tools/list result, one declaration per line: easy to diff and to grep by name.
    lines = ",\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    (OUT / "catalogue.json").write_text('{"tools": [\n' + lines + "\n]}\n")
    app_doc = {
        "apps": {kind: label for kind, (label, _) in APPS.items()},
        "tools": apps,
    }
    (OUT / "apps.json").write_text(json.dumps(app_doc, indent=1, ensure_ascii=False) + "\n")
    with open(OUT / "turns.jsonl", "w") as f:
        for n, (kind, utterance, query, expected) in enumerate(TURNS, 1):
            if isinstance(expected, str):
                expected = [expected]
            row = {"id": f"t{n:03d}", "utterance": utterance, "query": query, "expected": expected, "kind": kind}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(tools)} tools, {len(APPS)} apps, {len(TURNS)} turns written to {OUT}")


if __name__ == "__main__":
    main()
