"""Compare WebShop's pure-Python search with real Lucene 8, set up as the reference's pyserini.

Needs Java (``javac``) and Debian's Lucene 8 jars::

    apt-get install -y default-jdk-headless liblucene8-java   # or default-jre-headless + a JDK

It writes a small Java program (Lucene's ``EnglishAnalyzer``, a ``contents`` field with
positions and norms, an ``id`` string field with sorted doc values, ``BM25Similarity(0.9, 0.4)``,
bag-of-words queries boosted by term count, results sorted by score then id: what pyserini 0.17's
``SimpleSearcher`` does over the reference's index), indexes a generated catalogue with it, and
checks, for each size:

- ``analysis``: the terms of every indexed document and query, ours vs Lucene's;
- ``ranking``: page 1 (the first 10 hits, in order) and the top 50 (in order) over queries of
  four kinds: the instruction text, the goal's search query, a product title, and the goal's
  attributes plus its query; plus how many returned scores are bit-identical;
- ``--chars``: every code point up to U+1FFFF alone and between letters/digits, through both
  analysers (how far the tokenizer's character classes agree with Lucene's Unicode tables).

Usage::

    python scripts/compare_lucene.py --sizes 1000 10000 --queries 1200 [--chars] [--json out.json]

Not part of CI (it needs Java); the unit tests check the tokenizer and the norm encoding against
hand-computed Lucene values.
"""

from __future__ import annotations

import argparse
import glob
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

import numpy as np
from agentrl.envs.webshop.lucene import analyze
from agentrl.envs.webshop.sources import generated_catalogue
from agentrl.envs.webshop.store import search_document

JAVA_SOURCE = r"""
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;
import org.apache.lucene.analysis.*;
import org.apache.lucene.analysis.en.EnglishAnalyzer;
import org.apache.lucene.analysis.tokenattributes.CharTermAttribute;
import org.apache.lucene.document.*;
import org.apache.lucene.index.*;
import org.apache.lucene.search.*;
import org.apache.lucene.search.similarities.BM25Similarity;
import org.apache.lucene.store.*;
import org.apache.lucene.util.BytesRef;
import org.apache.lucene.util.SmallFloat;

public class LuceneRef {
  static String unescape(String s) {
    StringBuilder b = new StringBuilder();
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c == '\\' && i + 1 < s.length()) {
        char d = s.charAt(++i);
        b.append(d == 't' ? '\t' : d == 'n' ? '\n' : d == 'r' ? '\r' : d);
      } else b.append(c);
    }
    return b.toString();
  }
  static String escape(String s) {
    return s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r");
  }
  static List<String> analyze(Analyzer a, String text) throws IOException {
    List<String> out = new ArrayList<>();
    try (TokenStream ts = a.tokenStream("contents", text)) {
      CharTermAttribute t = ts.addAttribute(CharTermAttribute.class);
      ts.reset();
      while (ts.incrementToken()) out.add(t.toString());
      ts.end();
    }
    return out;
  }
  public static void main(String[] args) throws Exception {
    Analyzer analyzer = new EnglishAnalyzer();
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), false, "UTF-8");
    String mode = args[0];
    if (mode.equals("analyze")) {
      for (String line; (line = in.readLine()) != null; ) {
        StringBuilder b = new StringBuilder();
        for (String t : analyze(analyzer, unescape(line))) {
          if (b.length() > 0) b.append('\t');
          b.append(escape(t));
        }
        out.println(b);
      }
    } else if (mode.equals("norms")) {
      for (String line; (line = in.readLine()) != null; ) {
        byte b = SmallFloat.intToByte4(Integer.parseInt(line.trim()));
        out.println((b & 0xFF) + "\t" + SmallFloat.byte4ToInt(b));
      }
    } else if (mode.equals("search")) {
      Directory dir = new ByteBuffersDirectory();
      IndexWriterConfig cfg = new IndexWriterConfig(analyzer);
      cfg.setSimilarity(new BM25Similarity(0.9f, 0.4f));
      FieldType contents = new FieldType();
      contents.setIndexOptions(IndexOptions.DOCS_AND_FREQS_AND_POSITIONS);
      contents.setTokenized(true);
      contents.setStored(true);
      contents.setStoreTermVectors(true);
      contents.freeze();
      try (IndexWriter w = new IndexWriter(dir, cfg);
           BufferedReader docs = Files.newBufferedReader(Paths.get(args[1]), StandardCharsets.UTF_8)) {
        for (String line; (line = docs.readLine()) != null; ) {
          int tab = line.indexOf('\t');
          String id = unescape(line.substring(0, tab));
          Document d = new Document();
          d.add(new StringField("id", id, Field.Store.YES));
          d.add(new SortedDocValuesField("id", new BytesRef(id)));
          d.add(new Field("contents", unescape(line.substring(tab + 1)), contents));
          w.addDocument(d);
        }
      }
      int k = Integer.parseInt(args[2]);
      IndexSearcher s = new IndexSearcher(DirectoryReader.open(dir));
      s.setSimilarity(new BM25Similarity(0.9f, 0.4f));
      Sort sort = new Sort(SortField.FIELD_SCORE, new SortField("id", SortField.Type.STRING_VAL));
      for (String line; (line = in.readLine()) != null; ) {
        Map<String, Long> counts = new LinkedHashMap<>();
        for (String t : analyze(analyzer, unescape(line))) counts.merge(t, 1L, Long::sum);
        BooleanQuery.Builder b = new BooleanQuery.Builder();
        for (Map.Entry<String, Long> e : counts.entrySet())
          b.add(new BoostQuery(new TermQuery(new Term("contents", e.getKey())), (float) e.getValue()),
                BooleanClause.Occur.SHOULD);
        TopDocs top = s.search(b.build(), k, sort, true);
        StringBuilder r = new StringBuilder();
        for (ScoreDoc sd : top.scoreDocs) {
          if (r.length() > 0) r.append('\t');
          r.append(s.doc(sd.doc).get("id")).append(' ').append(Float.floatToIntBits(sd.score));
        }
        out.println(r);
      }
    }
    out.flush();
  }
}
"""


def _escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def _unescape(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s):
            out.append({"t": "\t", "n": "\n", "r": "\r"}.get(s[i + 1], s[i + 1]))
            i += 2
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


class Lucene:
    """The compiled Java reference, run once per batch of lines."""

    def __init__(self, workdir: Path):
        jars = [
            sorted(glob.glob(f"/usr/share/java/{name}-8*.jar"))
            for name in ("lucene-core", "lucene-analyzers-common")
        ]
        if not all(jars) or shutil.which("javac") is None:
            sys.exit("needs javac and liblucene8-java (apt-get install liblucene8-java)")
        self.jars = [j[-1] for j in jars]
        self.version = Path(self.jars[0]).stem.rsplit("-", 1)[-1]
        self.cp = ":".join([*self.jars, str(workdir)])
        (workdir / "LuceneRef.java").write_text(JAVA_SOURCE)
        subprocess.run(
            ["javac", "-cp", self.cp, str(workdir / "LuceneRef.java")], check=True, cwd=workdir
        )

    def run(self, *args: str, lines: list[str]) -> list[str]:
        data = ("\n".join(_escape(x) for x in lines) + "\n").encode("utf-8")
        res = subprocess.run(
            ["java", "-Xmx4g", "-cp", self.cp, "LuceneRef", *args],
            input=data,
            capture_output=True,
            check=True,
        )
        out = res.stdout.decode("utf-8").split("\n")
        return out[: len(lines)]

    def analyze(self, texts: list[str]) -> list[list[str]]:
        return [
            [_unescape(t) for t in line.split("\t")] if line else []
            for line in self.run("analyze", lines=texts)
        ]


def make_queries(cat, n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` queries, a quarter of each kind, drawn from the catalogue's goals and products."""
    rng = random.Random(seed)
    out = []
    per = n // 4
    for kind in ("instruction", "goal_query", "title", "attributes_query"):
        for _ in range(per):
            g = cat.goal(rng.randrange(cat.num_goals))
            if kind == "instruction":
                q = g["instruction_text"]
            elif kind == "goal_query":
                q = g["query"]
            elif kind == "title":
                q = cat.product(rng.randrange(cat.num_products))["Title"].lower()
            else:
                q = " ".join([*g["attributes"], g["query"]])
            out.append((kind, q))
    return out


def compare_size(lucene: Lucene, n: int, num_queries: int, seed: int, cache: Path) -> dict:
    cat = generated_catalogue(n, seed=seed, cache_dir=cache)
    products = [cat.product(i) for i in range(cat.num_products)]
    docs = [search_document(p) for p in products]
    asins = [p["asin"] for p in products]
    index_of = {a: i for i, a in enumerate(asins)}
    queries = make_queries(cat, num_queries, seed + 1)

    # Analysis: every document and query, term for term.
    texts = docs + [q for _, q in queries]
    ref_terms = lucene.analyze(texts)
    analysis_same = sum(analyze(t) == r for t, r in zip(texts, ref_terms))

    docs_file = cache / f"docs-{n}.tsv"
    docs_file.write_text("".join(f"{_escape(a)}\t{_escape(d)}\n" for a, d in zip(asins, docs)))
    t0 = time.perf_counter()
    ref_lines = lucene.run("search", str(docs_file), "50", lines=[q for _, q in queries])
    java_s = time.perf_counter() - t0

    by_kind: dict[str, dict[str, int]] = {}
    scores_same = scores_total = 0
    examples = []
    for (kind, q), line in zip(queries, ref_lines):
        ref = [x.split(" ") for x in line.split("\t")] if line else []
        ref_ids = [a for a, _ in ref]
        ours_docs = cat.search(q, 50)
        ours = [asins[i] for i in ours_docs]
        docs_arr, scores = cat.index.scores(q)
        score_of = dict(zip(docs_arr.tolist(), scores.view(np.int32).tolist()))
        for a, bits in ref:
            scores_total += 1
            scores_same += score_of.get(index_of[a]) == int(bits)
        k = by_kind.setdefault(kind, {"queries": 0, "page1": 0, "top50": 0, "top50_set": 0})
        k["queries"] += 1
        k["page1"] += ours[:10] == ref_ids[:10]
        k["top50"] += ours == ref_ids
        k["top50_set"] += set(ours) == set(ref_ids)
        if ours[:10] != ref_ids[:10] and len(examples) < 5:
            examples.append({"query": q, "ours": ours[:10], "lucene": ref_ids[:10]})
    total = {
        key: sum(v[key] for v in by_kind.values())
        for key in ("queries", "page1", "top50", "top50_set")
    }
    return {
        "num_products": n,
        "documents_and_queries_analysed": len(texts),
        "analysis_identical": analysis_same,
        "ranking": total,
        "ranking_by_kind": by_kind,
        "scores_bit_identical": [scores_same, scores_total],
        "lucene_search_s": round(java_s, 1),
        "page1_differences": examples,
    }


def compare_chars(lucene: Lucene, top: int = 0x20000) -> dict:
    texts, owners = [], []
    for cp in range(0x20, top):
        c = chr(cp)
        if unicodedata.category(c) in ("Cs", "Co", "Cn"):
            continue
        for t in (c, f"x{c}y", f"1{c}2", f"{c}{c}", f"yes{c}", f"{c}b"):
            texts.append(t)
            owners.append(cp)
    ref = lucene.analyze(texts)
    bad: set[int] = set()
    for t, cp, r in zip(texts, owners, ref):
        if analyze(t) != r:
            bad.add(cp)
    checked = len(set(owners))
    bmp = [cp for cp in set(owners) if cp < 0x10000]
    latin = [cp for cp in set(owners) if cp < 0x2000]
    return {
        "code_points": checked,
        "identical": checked - len(bad),
        "bmp": [len(bmp) - sum(cp < 0x10000 for cp in bad), len(bmp)],
        "below_U+2000": [len(latin) - sum(cp < 0x2000 for cp in bad), len(latin)],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--queries", type=int, default=1200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chars", action="store_true", help="also compare every code point")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="compare-lucene-") as tmp:
        work = Path(tmp)
        lucene = Lucene(work)
        report = {"lucene": lucene.version, "sizes": []}
        for n in args.sizes:
            r = compare_size(lucene, n, args.queries, args.seed, work)
            report["sizes"].append(r)
            t = r["ranking"]
            print(
                f"{n:>7} products: page 1 identical {t['page1']}/{t['queries']} "
                f"({100 * t['page1'] / t['queries']:.1f} %), top 50 identical "
                f"{t['top50']}/{t['queries']} ({100 * t['top50'] / t['queries']:.1f} %), "
                f"analysis identical {r['analysis_identical']}/{r['documents_and_queries_analysed']}"
                + f", scores bit-identical {r['scores_bit_identical'][0]}/"
                f"{r['scores_bit_identical'][1]}",
                flush=True,
            )
        if args.chars:
            report["chars"] = compare_chars(lucene)
            c = report["chars"]
            print(
                f"code points: {c['identical']}/{c['code_points']} identical "
                f"(BMP {c['bmp'][0]}/{c['bmp'][1]}, below U+2000 {c['below_U+2000'][0]}/"
                f"{c['below_U+2000'][1]})"
            )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
