"""Compare docs/reference.md with the catalog (test/suites/reference.sh).

Usage: reference_check.py REFERENCE_MD CATALOG LIMITS SETTINGS ROLES
  CATALOG   rows "entry|roles|codes" of test/tools/reference.sql
  LIMITS    rows "kind|max_bytes" of agent.text_limits()
  SETTINGS  rows "key|type|min_value|max_value" of agent.setting_rules()
  ROLES     the product's roles, one a line
Prints one line per difference, prefixed with what it is about, and
nothing when the page and the catalog agree.
"""
import re
import sys

doc_path, catalog_path, limits_path, settings_path, roles_path = sys.argv[1:6]
doc = open(doc_path, encoding="utf-8").read()


def rows(path, n):
    return [tuple(l.rstrip("\n").split("|", n - 1)) for l in open(path, encoding="utf-8") if l.strip()]


def codes(s):
    return set() if s.strip() in ("", "none") else {c.strip() for c in s.split(",")}


# Entries: "### `ENTRY`", then "Roles: R. SQLSTATEs: C."
documented = {}
for m in re.finditer(r"^### `(agent\.[^`]+)`\n\nRoles: (.*?)\. SQLSTATEs: (.*?)\.$", doc, re.M):
    if m.group(1) in documented:
        print(f"entry: documented twice: {m.group(1)}")
    documented[m.group(1)] = (m.group(2), codes(m.group(3)))
headings = set(re.findall(r"^### `(agent\.[^`]+)`", doc, re.M))
for h in sorted(headings - set(documented)):
    print(f"entry: no Roles/SQLSTATEs line under {h}")

catalog = {e: (r, codes(c)) for e, r, c in rows(catalog_path, 3)}
for e in sorted(set(catalog) - headings):
    print(f"missing from the page: {e}")
for e in sorted(headings - set(catalog)):
    print(f"not in the catalog: {e}")
for e in sorted(set(catalog) & set(documented)):
    if catalog[e][0] != documented[e][0]:
        print(f"roles of {e}: catalog {catalog[e][0]}, page {documented[e][0]}")
    missing = catalog[e][1] - documented[e][1]
    if missing:
        print(f"SQLSTATEs of {e}: the page lacks {', '.join(sorted(missing))}")

# Every SQLSTATE the page names is in its SQLSTATE table.
table = set(re.findall(r"^\| `([0-9A-Z]{5})` \|", doc, re.M))
named = set().union(*(c for _, c in documented.values())) if documented else set()
for c in sorted(named - table):
    print(f"SQLSTATE table: lacks {c}")


def md_table(title):
    sec = doc.split(f"\n## {title}\n", 1)
    if len(sec) < 2:
        print(f"section missing: {title}")
        return []
    body = sec[1].split("\n## ", 1)[0]
    out = []
    for line in body.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            out.append(tuple(c.strip().strip("`") for c in line.strip("|").split("|")))
    return out[1:]   # without the header


limits = {(k, v) for k, v in rows(limits_path, 2)}
page_limits = {(r[0], r[1]) for r in md_table("Limits")}
for x in sorted(limits ^ page_limits):
    print(f"limits: {'catalog' if x in limits else 'page'} only: {x}")

settings = set(rows(settings_path, 4))
page_settings = {tuple(r[:4]) for r in md_table("Settings")}
for x in sorted(settings ^ page_settings):
    print(f"settings: {'catalog' if x in settings else 'page'} only: {x}")

roles = {l.strip() for l in open(roles_path) if l.strip()}
page_roles = {r[0] for r in md_table("Roles")} - {"owner"}
for x in sorted(roles ^ page_roles):
    print(f"roles: {'catalog' if x in roles else 'page'} only: {x}")
