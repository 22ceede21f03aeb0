#!/usr/bin/env python3
"""Prints one end-to-end run's result (e2e_load's JSON) without its long per-pod time lists.

usage: e2e_summary.py <e2e-<run>.json>
"""
import json
import sys

d = json.load(open(sys.argv[1]))
print({k: v for k, v in d.items() if not k.endswith("_times")})
