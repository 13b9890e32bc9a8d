"""Render the JSON lines collected by ``JITGRAD_BENCH_JSON=path python -m jitgrad bench`` as Markdown.

    JITGRAD_BENCH_JSON=/tmp/b.jsonl python -m jitgrad bench > /tmp/bench.log
    python benchmarks/report.py /tmp/b.jsonl [--wall-s 512] > body.md

Prints the machine header and one section per table (main table, extra tables, reference lines, notes,
target verdicts, mismatches), then a summary of every target.
"""
import json
import sys


def md_table(headers, rows):
    def esc(c):
        return str(c).replace("|", "\\|")
    out = ["| " + " | ".join(esc(h) for h in headers) + " |",
           "| " + " | ".join("---" for _ in headers) + " |"]
    for r in rows:
        out.append("| " + " | ".join(esc(c) for c in r) + " |")
    return "\n".join(out)


def main(argv):
    path = argv[0]
    wall = None
    if "--wall-s" in argv:
        wall = float(argv[argv.index("--wall-s") + 1])
    recs = [json.loads(line) for line in open(path) if line.strip()]
    if not recs:
        print("(no results)")
        return
    m = recs[0]["machine"]
    print(f"Measured {m['date']} on a {m['nproc']}-CPU machine ({m['cpu']}); Python {m['python']}, NumPy "
          f"{m['numpy']}, Numba {m['numba']}, PyTorch {m['torch']} ({m['torch_threads']} threads), JAX {m['jax']}."
          + (f" Suite wall time {wall:.0f} s." if wall else ""))
    print()
    print("Columns: *median* of the timed calls (interleaved rounds across configurations); *first call* "
          "includes tracing/compiling; *vs ...* = this median / that row's median (lower is better; \"fastest "
          "peer\" excludes peers whose outputs failed the check); *uncontended* = share of the timed calls that ran "
          "while no other process competed for the CPUs (when at least 5 did, the median uses only those; "
          "otherwise the row is marked *noisy*); *check* = max error relative to the float64 NumPy reference's "
          "largest magnitude.")
    print()
    summary = []
    ids = [r["id"] for r in recs]
    for r in recs:
        label = r["id"] if ids.count(r["id"]) == 1 else f"{r['id']} ({r['title'].split(' of ')[0]})"
        print(f"## {r['id']}: {r['title']}\n")
        other = r.get("foreign_cpus")
        if other is not None:
            print(f"_Background load while this table ran: other processes kept {other:.2f} of {m['nproc']} CPUs "
                  f"busy on average; wall time {r['wall_s']:.0f} s._\n")
        if r["rows"]:
            print(md_table(r["headers"], r["rows"]))
            print()
        for t in r.get("extra_tables", []):
            print(f"{t['title']}:\n")
            print(md_table(t["headers"], t["rows"]))
            print()
        for ref in r.get("refs", []):
            print(f"- Reference (shared/BENCHMARKS.md, another machine): {ref}")
        for n in r.get("notes", []):
            print(f"- Note: {n}")
        for text, verdict, detail in r.get("targets", []):
            print(f"- **Target** {text}: **{verdict}**" + (f" ({detail})" if detail else ""))
            summary.append((label, text, verdict, detail))
        for mm in r.get("mismatches", []):
            print(f"- **MISMATCH**: `{mm}`")
        print()
    print("## Targets summary\n")
    print(md_table(["workload", "target", "verdict", "measured"], summary))


if __name__ == "__main__":
    main(sys.argv[1:])
