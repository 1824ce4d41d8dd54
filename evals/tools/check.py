#!/usr/bin/env python3
"""Checks evals/catalogue.json and evals/turns.jsonl and reports on them.

Reads only the data files (and apps.json for the per-app counts), so it also
checks a catalogue or turn file edited by hand. Exits non-zero on a hard
failure; prints the soft targets (kind mix, paraphrase overlap) either way.

    python3 evals/tools/check.py [--samples N] [--overlap]
"""
import collections
import json
import pathlib
import random
import re
import sys

EVALS = pathlib.Path(__file__).resolve().parent.parent
KINDS = ("direct", "paraphrase", "indirect", "disambiguation", "multi")
NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# The edge's namespaced names: client__ + slug; these slugs are taken by core meta-tools.
RESERVED_SLUGS = {"context", "refresh_tools"}

# A common English stop-word list (the NLTK one), plus bare digits via the tokenizer.
STOP = set("""
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers herself it its itself
they them their theirs themselves what which who whom this that these those am is are was were be been being have has had
having do does did doing a an the and but if or because as until while of at by for with about against between into through
during before after above below to from up down in out on off over under again further then once here there when where why
how all any both each few more most other some such no nor not only own same so than too very s t can will just don should
now d ll m o re ve y ain aren couldn didn doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn weren won wouldn
""".split())


def words(text):
    return [w for w in re.split(r"[^a-z0-9]+", text.lower()) if w]


def name_words(name):
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)
    return words(spaced)


def content(ws):
    return {w for w in ws if w not in STOP}


def slug(name):
    """The edge's slug (crates/edge/src/names.rs), ASCII names only."""
    out, prev = "", None
    for c in name:
        if c.isupper() and prev is not None and (prev.islower() or prev.isdigit()):
            if out and not out.endswith("_"):
                out += "_"
        if c.isascii() and c.isalnum():
            out += c.lower()
        elif out and not out.endswith("_"):
            out += "_"
        prev = c
    return out[:56].rstrip("_")


def main():
    args = sys.argv[1:]
    n_samples = int(args[args.index("--samples") + 1]) if "--samples" in args else 10
    show_overlap = "--overlap" in args
    errors = []

    catalogue = json.loads((EVALS / "catalogue.json").read_text())
    tools = catalogue["tools"]
    by_name = {}
    for t in tools:
        n = t.get("name", "")
        if not NAME_RE.match(n):
            errors.append(f"invalid tool name {n!r}")
        if n in by_name:
            errors.append(f"duplicate tool name {n!r}")
        by_name[n] = t
        if set(t) - {"name", "title", "description", "inputSchema", "outputSchema", "annotations"}:
            errors.append(f"{n}: non-MCP field(s) {sorted(set(t) - {'name', 'title', 'description', 'inputSchema', 'annotations'})}")
        if not t.get("description"):
            errors.append(f"{n}: no description")
        elif len(t["description"]) > 512:
            errors.append(f"{n}: description over 512 characters")
        s = t.get("inputSchema")
        if not isinstance(s, dict) or s.get("type") != "object" or not isinstance(s.get("properties", {}), dict):
            errors.append(f"{n}: inputSchema is not an object schema")
        else:
            for r in s.get("required", []):
                if r not in s.get("properties", {}):
                    errors.append(f"{n}: required {r!r} is not a property")
        size = len(json.dumps(t, ensure_ascii=False).encode())
        if size > 1536:
            errors.append(f"{n}: declaration is {size} bytes (> 1.5 KB)")
        if slug(n) in RESERVED_SLUGS:
            errors.append(f"{n}: its slug shadows a reserved meta-tool")

    apps_path = EVALS / "apps.json"
    app_of = json.loads(apps_path.read_text())["tools"] if apps_path.exists() else {}
    missing_app = [n for n in by_name if n not in app_of]
    if missing_app:
        errors.append(f"{len(missing_app)} tools have no app kind in apps.json, e.g. {missing_app[:3]}")
    per_app = collections.Counter(app_of.get(n, "?") for n in by_name)

    slugs = collections.defaultdict(list)
    for n in by_name:
        slugs[slug(n)].append(n)
    collisions = {s: ns for s, ns in slugs.items() if len(ns) > 1}

    styles = collections.Counter()
    for n in by_name:
        if "." in n:
            styles["dotted"] += 1
        elif "-" in n:
            styles["kebab-case"] += 1
        elif n.isupper() and "_" in n:
            styles["SCREAMING_SNAKE"] += 1
        elif "_" in n:
            styles["snake_case"] += 1
        elif n[:1].isupper():
            styles["PascalCase"] += 1
        elif any(c.isupper() for c in n):
            styles["camelCase"] += 1
        else:
            styles["one lowercase word"] += 1

    turns = []
    ids = set()
    for i, line in enumerate((EVALS / "turns.jsonl").read_text().splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        turns.append(row)
        for field in ("id", "utterance", "query", "expected", "kind"):
            if field not in row:
                errors.append(f"line {i}: no {field}")
        if row.get("id") in ids:
            errors.append(f"line {i}: duplicate id {row.get('id')}")
        ids.add(row.get("id"))
        if row.get("kind") not in KINDS:
            errors.append(f"{row.get('id')}: kind {row.get('kind')!r} is not one of {KINDS}")
        exp = row.get("expected") or []
        if not exp:
            errors.append(f"{row.get('id')}: empty expected")
        for e in exp:
            if e not in by_name:
                errors.append(f"{row.get('id')}: expected {e!r} is not in the catalogue")
        if len(set(exp)) != len(exp):
            errors.append(f"{row.get('id')}: expected repeats a name")
        if row.get("kind") == "multi" and not 2 <= len(exp) <= 3:
            errors.append(f"{row.get('id')}: multi turn needs 2-3 tools, has {len(exp)}")
        if row.get("kind") != "multi" and len(exp) != 1:
            errors.append(f"{row.get('id')}: a {row.get('kind')} turn expects one tool")
        if len(row.get("query", "")) > 200:
            errors.append(f"{row.get('id')}: query over 200 characters (find_tools maxLength)")
    dup_utt = [u for u, c in collections.Counter(t["utterance"] for t in turns).items() if c > 1]
    if dup_utt:
        errors.append(f"repeated utterances: {dup_utt[:3]}")

    per_kind = collections.Counter(t["kind"] for t in turns)
    turn_apps = collections.Counter(app_of.get(e, "?") for t in turns for e in t["expected"])

    overlaps = []
    for t in turns:
        if t["kind"] != "paraphrase":
            continue
        tool = by_name.get(t["expected"][0])
        if not tool:
            continue
        target = content(name_words(tool["name"]) + words(tool.get("description", "")))
        shared = sorted(content(words(t["query"])) & target)
        overlaps.append((t["id"], t["query"], t["expected"][0], shared))
    low = sum(1 for o in overlaps if len(o[3]) <= 1)

    print("== catalogue")
    print(f"tools: {len(tools)}   app kinds: {len(per_app)}   declaration bytes max: "
          f"{max(len(json.dumps(t, ensure_ascii=False).encode()) for t in tools)}")
    for app, c in sorted(per_app.items(), key=lambda kv: -kv[1]):
        print(f"  {app:20} {c:3} tools   {turn_apps.get(app, 0):3} expected names in turns")
    print("name styles: " + ", ".join(f"{k} {v}" for k, v in styles.most_common()))
    print("slug collisions (the edge suffixes one with _2): " + (", ".join(f"{s} <- {ns}" for s, ns in collisions.items()) or "none"))
    used = {e for t in turns for e in t["expected"]}
    print(f"tools named by at least one turn: {len(used)} of {len(by_name)}")

    print("\n== turns")
    print(f"turns: {len(turns)}")
    for k in KINDS:
        print(f"  {k:15} {per_kind.get(k, 0):3}  {100 * per_kind.get(k, 0) / max(len(turns), 1):5.1f}%")
    print(f"paraphrase turns whose query shares <= 1 content word with the expected tool's name + description: "
          f"{low}/{len(overlaps)} = {100 * low / max(len(overlaps), 1):.1f}%")
    hist = collections.Counter(len(o[3]) for o in overlaps)
    print("  overlap histogram (shared words: turns): " + ", ".join(f"{k}: {hist[k]}" for k in sorted(hist)))
    for o in overlaps:
        if show_overlap or len(o[3]) > 1:
            print(f"  {o[0]} {o[1]!r} -> {o[2]} shares {o[3]}")

    print(f"\n== {n_samples} sample turns (fixed seed)")
    rng = random.Random(7)
    for t in rng.sample(turns, min(n_samples, len(turns))):
        print(f"  {t['id']} [{t['kind']}] {t['utterance']!r}\n      query {t['query']!r} -> {t['expected']}")

    soft = []
    if len(tools) < 300:
        soft.append("fewer than 300 tools")
    if len(per_app) < 10:
        soft.append("fewer than 10 app kinds")
    if len(turns) < 200:
        soft.append("fewer than 200 turns")
    if per_kind.get("paraphrase", 0) < 0.30 * len(turns):
        soft.append("paraphrases under 30%")
    if overlaps and low < 0.70 * len(overlaps):
        soft.append("under 70% of paraphrase queries share <= 1 word with their tool")
    print("\n== result")
    for e in errors:
        print("ERROR", e)
    for s in soft:
        print("FAIL", s)
    if not errors and not soft:
        print("OK: every check passed")
    sys.exit(1 if errors or soft else 0)


if __name__ == "__main__":
    main()
