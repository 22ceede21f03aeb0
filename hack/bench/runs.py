"""What report.py and peers_report.py both read from the raw results directory (target/bench)."""
import os, re


def api_requests(out, name):
    """The API server's requests during run `name` (apiserver_request_total after minus before, the
    files measure_begin/measure_end of hack/bench/lib.sh write): {(verb, resource[/subresource]): count},
    or None when the run left no counters."""
    tot = {}
    for when, sign in (("before", -1), ("after", 1)):
        p = os.path.join(out, f"{name}.metrics-{when}")
        if not os.path.exists(p):
            return None
        for line in open(p):
            m = re.match(r'apiserver_request_total\{(.*)\} (\S+)', line)
            if not m:
                continue
            lab = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            key = (lab.get("verb", ""), lab.get("resource", "") + ("/" + lab["subresource"] if lab.get("subresource") else ""))
            tot[key] = tot.get(key, 0) + sign * float(m.group(2))
    return tot
