"""What report.py and peers_report.py both read from the raw results directory (target/bench), and how
both write their sections into BENCHMARKS.md."""
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


def put_sections(text, sections, titles, header):
    """`text` (BENCHMARKS.md) with each part's section, printed, in place of the one between its
    markers (`<!-- bench.sh:<part>:begin -->` ... `<!-- bench.sh:<part>:end -->`), or added at the
    end under its title when it has none yet. `sections`: {part: (heading, body lines)};
    `header(part)`: the paragraph that says when, how and where the part was measured."""
    for part, (heading, body) in sections.items():
        tag = f"bench.sh:{part}"
        section = "\n".join([f"<!-- {tag}:begin -->", heading, "", header(part), ""] + body + [f"<!-- {tag}:end -->"])
        print(section)
        pattern = re.compile(rf"<!-- {re.escape(tag)}:begin -->.*?<!-- {re.escape(tag)}:end -->", re.S)
        if pattern.search(text):
            text = pattern.sub(lambda _: section, text, count=1)
        else:
            text = text.rstrip() + f"\n\n## {titles[part]}\n\n" + section + "\n"
    return text
