#!/usr/bin/env python3
"""Deterministic benchmark texts for bench/bench_tokenizer.sh: English-like prose, CJK (Chinese and
Japanese) prose and JSON records, about SIZE bytes each (default 2 MB); and, when the author's
fixture is given, "states": the rendered state of every record of fixtures-clef-flash.json (real
English and JSON, as the reference renders them), joined by blank lines.

    python bench/bench_tokenizer_texts.py OUT_DIR [SIZE [FIXTURES_JSON]]

The generated English uses a ~300-word vocabulary, so pretoken caches hit far more than on real
text; "states" is the realistic one.
"""
import json
import os
import random
import sys

WORDS = ("the of and to in is was that for it with as his on be at by had are but from or have an they which "
         "one you were her all she there would their we him been has when who will more no if out so said what up "
         "its about into than them can only other new some could time these two may then do first any my now such "
         "like our over man me even most made after also did many before must through back years where much your "
         "way well down should because each just those people how too little state good very make world still own "
         "see men work long get here between both life being under never day same another know while last might us "
         "great old year off come since against go came right used take three customer ticket warranty refund lamp "
         "department shipping invoice schema decision option description instructions don't it's we'll they're "
         "I've Zürich naïve café résumé 2024 3.14 42 1,000 100% e-mail co-operate well-known").split()

CJK = ("的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事其里所去"
       "行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此心前面又定见只主没公从知"
       "データ処理の結果を確認してください。東京都の天気は晴れです。これはテストの文章であり、日本語と中国語を含む。")
PUNCT_CJK = "，。、；：？！「」（）"


def english(rng, size):
    out, n = [], 0
    while n < size:
        k = rng.randint(5, 25)
        s = " ".join(rng.choice(WORDS) for _ in range(k))
        s = s[0].upper() + s[1:] + rng.choice([".", ".", ".", "?", "!", ",", ";"])
        if rng.random() < 0.1:
            s += "\n\n"
        else:
            s += " "
        out.append(s)
        n += len(s.encode())
    return "".join(out)


def cjk(rng, size):
    out, n = [], 0
    while n < size:
        s = "".join(rng.choice(CJK) for _ in range(rng.randint(8, 40))) + rng.choice(PUNCT_CJK)
        if rng.random() < 0.05:
            s += "\n"
        out.append(s)
        n += len(s.encode())
    return "".join(out)


def records(rng, size):
    out, n = [], 0
    while n < size:
        rec = {"id": f"rec_{rng.randint(0, 10**6)}", "state": english(rng, rng.randint(40, 200)).strip(),
               "score": round(rng.random() * 100, 3), "tags": [rng.choice(WORDS) for _ in range(rng.randint(0, 5))],
               "nested": {"ok": rng.random() < 0.5, "n": rng.randint(-1000, 1000), "unit": rng.choice(["°C", "kg", "×2"])}}
        s = json.dumps(rec, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n"
        out.append(s)
        n += len(s.encode())
    return "".join(out)


def main():
    out_dir = sys.argv[1]
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 2_000_000
    os.makedirs(out_dir, exist_ok=True)
    for name, fn in (("english", english), ("cjk", cjk), ("json", records)):
        rng = random.Random(20261129)
        with open(os.path.join(out_dir, name + ".txt"), "w", encoding="utf-8") as f:
            f.write(fn(rng, size))
    if len(sys.argv) > 3:
        ff = json.load(open(sys.argv[3], encoding="utf-8"))
        parts = []
        for r in ff["records"]:
            st = r["request"]["state"]
            parts.append(st if isinstance(st, str) else
                         json.dumps(st, sort_keys=True, ensure_ascii=False, separators=(",", ":")))
        with open(os.path.join(out_dir, "states.txt"), "w", encoding="utf-8") as f:
            f.write("\n\n".join(parts))


if __name__ == "__main__":
    main()
