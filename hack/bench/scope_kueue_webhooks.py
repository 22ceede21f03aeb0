#!/usr/bin/env python3
"""Reads a Kueue webhook configuration (JSON) on stdin and prints it with every webhook scoped to
the namespaces labelled bench.sluice.dev/kueue=on (Kueue's pod webhooks have no object selector:
left as installed, the API server would call them for every pod of every run).
"""
import json
import sys

c = json.load(sys.stdin)
for w in c.get("webhooks", []):
    sel = w.setdefault("namespaceSelector", {})
    exprs = sel.setdefault("matchExpressions", [])
    if not any(e.get("key") == "bench.sluice.dev/kueue" for e in exprs):
        exprs.append({"key": "bench.sluice.dev/kueue", "operator": "In", "values": ["on"]})
print(json.dumps(c))
