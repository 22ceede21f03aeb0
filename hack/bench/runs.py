"""What report.py and peers_report.py both read from the raw results directory (target/bench), and how
both write their sections into BENCHMARKS.md."""
import os, re, sys


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


def run_of(out, part):
    """target/bench/run-<part> (hack/bench/lib.sh's bench_begin, hack/bench.sh): when the part
    started, the command, the load average then and which sluice ran."""
    lines = open(os.path.join(out, f"run-{part}")).read().split("\n") + [""] * 4
    return {"started_at": lines[0], "command": lines[1],
            "load": lines[2].split() if lines[2].strip() else ["?"] * 3, "versions": lines[3] or "?"}


def machine():
    """This machine's cores and memory, as the sections' headers say them."""
    gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30)
    return f"{os.cpu_count()} cores, {gib} GiB"


def measured(out, part, command, load_note):
    """The paragraph above a part's table: when and by which command it was measured (`command`
    of the command run-<part> records), which sluice, on which machine; then `load_note` with
    {load}, the load average when the part started."""
    r = run_of(out, part)
    return (f"Measured {r['started_at']} by `{command(r['command'])}` — {r['versions']}; machine: {machine()}"
            + load_note.format(load=" / ".join(r["load"])))


def build_sections(parts, build, out, who):
    """Each part's (heading, body) from `build[part]()`, and when it was measured; a part without raw
    results in `out` is said on stderr (as `who`) and left out: its section and keys stay."""
    sections, started = {}, {}
    for part in parts:
        made = build[part]()
        if made is None:
            print(f"{who}: no raw results of {part} in {out}: its section and keys stay as they are", file=sys.stderr)
            continue
        sections[part] = made
        started[part] = run_of(out, part)["started_at"]
    return sections, started


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
