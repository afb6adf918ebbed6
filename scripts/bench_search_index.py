"""Build time and memory of Search-v0's BM25 index on synthetic wiki-18-like corpora.

    python scripts/bench_search_index.py --sizes 100000 300000 1000000 --out /tmp/search-bench

Each corpus is a jsonl file in wiki-18's format (``id``, ``contents`` = quoted title, newline,
text) of passages of 100 words (wiki-18's passage length) drawn from a Zipf(1.1) distribution
over 300,000 invented word types (seeded). The index is built by ``open_corpus`` (what the env
runs on first use) in a fresh child process, which reports: the build's wall time; the peak of
its anonymous memory (``RssAnon``, sampled every 50 ms: what the build itself holds) and of its
resident set (``VmHWM``, which also counts the pages of the index files being written, clean
page cache the kernel can drop); the index size on disk; and the median and 99th-percentile
latency of 200 three-word queries on the opened, memory-mapped index, with the resident memory
it adds. A linear fit over the sizes extrapolates each figure to wiki-18's 21,015,324 passages.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

WIKI18_PASSAGES = 21_015_324
WORDS_PER_PASSAGE = 100
VOCAB = 300_000


def _vocabulary(rng: np.random.Generator) -> list[str]:
    letters = rng.integers(ord("a"), ord("z") + 1, size=(VOCAB, 10), dtype=np.uint8)
    lengths = rng.integers(3, 11, size=VOCAB)
    words = {row[:n].tobytes().decode() for row, n in zip(letters, lengths)}
    out = sorted(words)
    rng.shuffle(out)  # frequency rank independent of spelling
    return out


def write_corpus(path: Path, size: int, seed: int = 0) -> None:
    """``size`` passages of 100 Zipf-distributed words each, as wiki-18 jsonl."""
    rng = np.random.default_rng(seed)
    vocab = _vocabulary(rng)
    cdf = np.cumsum(np.arange(1, len(vocab) + 1, dtype=np.float64) ** -1.1)
    cdf /= cdf[-1]
    with open(path, "w") as f:
        for start in range(0, size, 10_000):
            n = min(10_000, size - start)
            ids = np.searchsorted(cdf, rng.random((n, WORDS_PER_PASSAGE + 2)))
            lines = []
            for i, row in enumerate(ids.tolist()):
                words = [vocab[j] for j in row]
                title = f"{words[0].capitalize()} {words[1].capitalize()}"
                text = " ".join(words[2:])  # [a-z ] only: nothing to escape but the quotes
                lines.append(f'{{"id": "{start + i}", "contents": "\\"{title}\\"\\n{text}"}}\n')
            f.write("".join(lines))


def _status(field: str) -> int:
    """A ``/proc/self/status`` field in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def child(corpus: Path, cache: Path) -> dict:
    """Build the index of ``corpus`` into ``cache`` and measure (runs in a fresh process)."""
    from agentrl.envs.search.corpus import open_corpus

    peak = {"anon": 0}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak["anon"] = max(peak["anon"], _status("RssAnon"))
            time.sleep(0.05)

    thread = threading.Thread(target=sample, daemon=True)
    before = _status("RssAnon")
    thread.start()
    t0 = time.perf_counter()
    index, passages = open_corpus(corpus, cache_dir=cache)
    build_s = time.perf_counter() - t0
    done.set()
    thread.join()
    folder = next(p for p in cache.iterdir() if p.is_dir() and (p / "meta.json").exists())
    disk = sum(f.stat().st_size for f in folder.iterdir())
    hwm = _status("VmHWM")

    rng = np.random.default_rng(1)
    sample_docs = rng.choice(len(passages), size=200, replace=False)
    queries = [" ".join(passages[int(i)].text.split()[:3]) for i in sample_docs]
    rss0 = _status("VmRSS")
    times = []
    for q in queries:
        t = time.perf_counter()
        index.search(q, 3)
        times.append(time.perf_counter() - t)
    return {
        "passages": index.num_docs,
        "terms": index.meta["num_terms"],
        "postings": index.meta["num_postings"],
        "build_s": round(build_s, 1),
        "peak_anon_mib": round((peak["anon"] - before) / 2**20, 1),
        "peak_rss_mib": round(hwm / 2**20, 1),
        "index_disk_mib": round(disk / 2**20, 1),
        "query_p50_ms": round(1000 * float(np.median(times)), 2),
        "query_p99_ms": round(1000 * float(np.percentile(times, 99)), 2),
        "query_rss_added_mib": round((_status("VmRSS") - rss0) / 2**20, 1),
    }


def extrapolate(rows: list[dict], key: str, n: int) -> float:
    x = np.array([r["passages"] for r in rows], dtype=float)
    y = np.array([r[key] for r in rows], dtype=float)
    if len(rows) == 1:
        return float(y[0] * n / x[0])
    slope, intercept = np.polyfit(x, y, 1)
    return float(slope * n + intercept)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    ap.add_argument("--out", type=Path, default=Path("/tmp/search-bench"))
    ap.add_argument("--child", nargs=2, metavar=("CORPUS", "CACHE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(Path(args.child[0]), Path(args.child[1]))))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for size in args.sizes:
        corpus = args.out / f"synthetic-{size}.jsonl"
        if not corpus.exists():
            t = time.perf_counter()
            write_corpus(corpus, size)
            print(f"wrote {corpus} ({time.perf_counter() - t:.0f} s)", file=sys.stderr)
        cache = args.out / f"cache-{size}"
        subprocess.run(["rm", "-rf", str(cache)], check=True)
        proc = subprocess.run(
            [sys.executable, __file__, "--child", str(corpus), str(cache)],
            capture_output=True,
            text=True,
            check=True,
        )
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        row["corpus_mib"] = round(corpus.stat().st_size / 2**20, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    keys = ["build_s", "peak_anon_mib", "peak_rss_mib", "index_disk_mib", "corpus_mib"]
    fit = {k: round(extrapolate(rows, k, WIKI18_PASSAGES), 1) for k in keys}
    print(json.dumps({"extrapolated_to_wiki18": WIKI18_PASSAGES, **fit}))
    (args.out / "results.json").write_text(json.dumps({"rows": rows, "wiki18": fit}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
