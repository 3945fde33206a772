#!/usr/bin/env python3
"""Deterministic test strings for the tokenizer parity test (tests/parity/test_tokenizer_hf.py).

    python tests/parity/gen_tokenizer_strings.py [--seed N] [--count N] > strings.jsonl

generate(seed, count) returns a list of str: hand-written edge cases first, then `count` random
strings built from fragments of many scripts and kinds of text (see FRAGMENT_POOLS), then random
code points over the whole Unicode range (recent-Unicode-version blocks on purpose), then a few
long strings. No lone surrogates (HF tokenizers cannot take them; the engine refuses them, tested
in tests/unit/test_tokenizer.c).
"""
import json
import random
import sys
import unicodedata

ADDED = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
    "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
    "<tts_text_bos_single>", "<|audio_pad|>",
]

SYSTEM = ("Read the complete state and schema. Decide every field jointly. Each answer must be "
          "exactly one of that field's allowed options.")

EDGE = [
    "", " ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", "\n\n\n", " \n", "\n ", "  \n  ", "\t\t\n\t",
    "a", "A", "1", "12", "123", "1234567890", "3.14159", "-42", "1e10", "0x1F", "1,000,000",
    "Hello world", "Hello  world", "Hello   world ", " Hello", "  Hello", "Hello\nworld",
    "Hello\r\nworld\r\n", "line1\rline2", "a\tb\tc", "a \t b", "end with spaces   ",
    "'s", "'S", "'t", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'Ll", "'d", "'D",
    "it's", "IT'S", "don't", "DON'T", "we're", "They'LL", "I'd", "you've", "I'M", "o'clock",
    "rock 'n' roll", "''", "'''", "' s", "x's'", "'ſ", "'K", "'ﬅ",
    "!!!", "?!?!", "...", "…", "---", "——", "!!!\n", "!!!\n\n", " !!!", "((()))", "[]{}<>",
    "a.b.c", "e-mail", "foo_bar_baz", "CamelCaseWord", "snake_case_word", "kebab-case-word",
    "https://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Users\\x\\file.txt",
    "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}",
    "#include <stdio.h>\nint main(void) { printf(\"hi\\n\"); }", "    indented\n        more",
    '{"a":1,"b":[1,2,3],"c":{"d":"e"}}', '{"key": "value", "n": null, "t": true}',
    '[{"option_id":"yes","description":"Yes"}]', '{"temp":"21°C","ratio":"3×4"}',
    "<p>Hello <b>world</b></p>", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
    "<|im_start|>system\n" + SYSTEM + "<|im_end|>\n<|im_start|>user\nSTATE:\n",
    "\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nJOINT SCHEMA DECISIONS:",
    "\n\nSCHEMA FIELDS:\n", "\nFIELD 1\nID: department\nTYPE: choice\nINSTRUCTION: ",
    "\nALLOWED OPTIONS:\n", "OPTION 1: ", "END FIELD\n", "The capital of France is", " Paris.",
    "<|im_start", "im_start|>", "<|im_start|", "<think", "think>", "<<think>>", "<think></think>",
    "<think><think>", "</think</think>>", "<|<|im_end|>|>", "<|endoftext|><|endoftext|>",
    "<|image_pad|>" * 8, "<|vision_start|><|image_pad|><|vision_end|>", "<tts_text_bos_single>x",
    "<tts_text_bos>_single>", "<tts_text_bos_single", "< think>", "<THINK>", "<think >",
    "\x00", "a\x00b", "\x01\x02\x03", "\x1b[31mred\x1b[0m", "\x7f", "\x85", "\u00a0", "a\u00a0b",
    "\u200b", "\u200d", "\u2028", "\u2029", "\ufeff", "\ufeffBOM", "\ufffd", "A\ufffdB", "\ufffe",
    "\uffff", "\U0010ffff", "\U000e0001", "\U000f0000",
    "café", "cafe\u0301", "e\u0301\u0301", "\u0301", "\u0301a", "a\u0308\u0301", "Å", "A\u030a",
    "\u212b", "\u2126", "\u1e9b\u0323", "q\u0307\u0323", "ḍ̇", "d\u0307\u0323",
    "한국어", "\u1112\u1161\u11ab", "\u1100\u1161", "가\u11a8", "ᄀᄀᄀ각ᆨᆨ",
    "が", "か\u3099", "ｶﾞ", "ﾊﾟﾝ", "パン", "ＡＢＣ１２３",
    "क्", "क्ष", "नमस्ते दुनिया", "हिन्दी", "ক্ষ", "த்", "ശ്ര", "ไทย", "ภาษาไทย", "น้ำ",
    "مرحبا بالعالم", "السَّلَامُ عَلَيْكُمْ", "بِسْمِ", "שָׁלוֹם", "עִבְרִית", "Ελληνικά", "ΆΈΉ",
    "Привет, мир!", "ёлка", "й", "и\u0306", "中文测试", "你好，世界！", "日本語のテキスト", "漢字かなカナ",
    "𠀀𠀁", "𪚥", "\U00031350", "\U0002ebf0",
    "❤", "❤️", "❤\ufe0f", "🏳️‍🌈", "👨‍👩‍👧‍👦", "👍🏽", "👍🏿", "🇫🇷", "🇺🇸🇬🇧", "1️⃣", "#️⃣", "🫠", "🫨", "🪿",
    "😀😃😄", "👩🏽‍💻", "🧑‍🤝‍🧑", "☺️", "✌🏻", "\U0001fae8", "\U0001fa89",
    "aaaa", "aaaaaaaaaaaaaaaaa", "ababababab", "abcabcabcabc", "    ", " " * 17, "\n" * 9,
    "!" * 20, "=" * 40, "-" * 33 + "\n", "00000000", "1111111111111111", "..........",
    "\u3000", "\u3000\u3000テスト", "　全角スペース　", "ﬁ", "ﬀ", "№", "½", "x²", "℃", "Ⅻ",
    "ǅ", "ǈ", "İstanbul", "ß", "ẞ", "Σίσυφος", "ﬃ", "µ", "Ω",
]


def _edge_with_added(rng):
    out = []
    for tok in ADDED:
        out += [tok, "x" + tok, tok + "x", " " + tok + " ", "\n" + tok + "\n", "a" + tok + "b" + tok + "c",
                tok + tok, "<" + tok + ">", tok[:-1], tok[1:], "hello " + tok + " world"]
    for _ in range(200):
        k = rng.randint(2, 6)
        parts = []
        for _ in range(k):
            parts.append(rng.choice(ADDED) if rng.random() < 0.4 else rng.choice(
                ["", " ", "\n", "text", " word", "中文", "é", "123", "!!", "\t", "'s", "<", ">", "|"]))
        out.append("".join(parts))
    return out


FRAGMENT_POOLS = {
    "latin": ["the", "The", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "Hello", "world",
              "naïve", "café", "résumé", "Straße", "Ærø", "façade", "jalapeño", "Øresund", "łódź", "ĳ",
              "Ελλάδα", "coöperate", "über", "señor", "Ångström", "crème brûlée", "Zürich", "Ça"],
    "greek": ["αβγ", "Καλημέρα", "κόσμε", "ΑΒΓΔ", "ῥῆμα", "ᾅ", "ἄλφα", "Ωμέγα", "σοφία"],
    "cyrillic": ["Привет", "мир", "ёжик", "Україна", "їжак", "Ґ", "сербски", "Ђорђе", "щука", "ЪЫЬ"],
    "arabic": ["مرحبا", "كتاب", "الْعَرَبِيَّةُ", "مُحَمَّد", "ﷺ", "لا", "ﻻ", "٣٤٥", "فِي", "تَّ", "ً", "ٰ"],
    "hebrew": ["שלום", "עולם", "בְּרֵאשִׁית", "יְרוּשָׁלַיִם", "ﬠ", "אָ", "ּ", "״"],
    "devanagari": ["नमस्ते", "क्ष", "क्", "ज्ञ", "हिन्दी", "संस्कृत", "क़", "क\u093c", "१२३", "ॐ", "श्री"],
    "indic": ["বাংলা", "ক্ষ", "தமிழ்", "తెలుగు", "ಕನ್ನಡ", "മലയാളം", "ગુજરાતી", "ਪੰਜਾਬੀ", "ଓଡ଼ିଆ", "සිංහල"],
    "thai": ["สวัสดี", "ภาษาไทย", "น้ำ", "กรุงเทพฯ", "๑๒๓", "ก่", "ี่", "ເລີ່ມ", "ຂ້ອຍ", "ខ្មែរ", "မြန်မာ"],
    "cjk": ["中文", "测试", "漢字", "你好", "世界", "日本", "東京", "北京市", "龍", "𠮷", "丽", "﨑", "豈"],
    "hangul": ["한국어", "안녕하세요", "세계", "ᄒᆞᆫ", "각", "ㄱㄴㄷ", "ᄀ", "ᅡ", "ᆨ"],
    "japanese": ["ひらがな", "カタカナ", "が", "ぱ", "ｶﾀｶﾅ", "ヴ", "ゔ", "ー", "っ", "。", "、", "「」"],
    "emoji": ["😀", "❤️", "❤", "🏳️‍🌈", "👨‍👩‍👧", "👍🏽", "🇯🇵", "1️⃣", "✨", "🔥", "🫶🏼", "🧑🏿‍🚀", "☕", "⚠️", "©️", "™"],
    "marks": ["\u0301", "\u0300", "\u0308", "\u0323", "\u0327", "\u034f", "\u0338", "\u20dd", "\ufe0f",
              "\ufe0e", "\u200d", "\u200c", "\u093c", "\u094d", "\u0e31", "\u05b7", "\u064b", "\u0670",
              "\u1ab0", "\u1dc0", "\u20d0", "\u302a", "\u3099", "\U0001e944"],
    "digits": ["0", "7", "42", "2024", "3.14", "١٢٣", "४२", "๕", "²", "½", "Ⅷ", "𝟘𝟙", "①", "٫"],
    "punct": [".", ",", "!", "?", ":", ";", "...", "—", "–", "-", "(", ")", "[", "]", "{", "}", "\"", "'",
              "«", "»", "“", "”", "‘", "’", "¿", "¡", "/", "\\", "@", "#", "$", "%", "^", "&", "*", "+",
              "=", "<", ">", "|", "~", "`", "•", "·", "§", "¶", "†", "°", "×", "÷", "€", "£", "¥", "。", "，"],
    "contractions": ["'s", "'S", "'t", "'T", "'re", "'Re", "'ve", "'VE", "'m", "'M", "'ll", "'LL", "'lL",
                     "'d", "'D", "’s", "'x", "'"],
    "space": [" ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", " \n", "\t\n", "\u00a0", "\u3000", "\u2003",
              "\u2009", "\u202f", "\r", "\x0b", "\x0c", "\x85", "\u2028", "\u1680"],
    "code": ["def", "return", "x = 1", "if (a && b)", "==", "!=", "->", "=>", "::", "/*", "*/", "//",
             "#!/bin/sh", "0xFF", "i++", "std::vector<int>", "fn main()", "$HOME", "`ls`", "\"\"\"",
             "    ", "\t\t", "};", "[0]", "{{", "}}", "__init__", "self.x", "λx.x"],
    "json": ['{"a":', '"b"', ':1', ',', '[', ']', '{', '}', 'null', 'true', 'false', '"\\n"', '"\\u00e9"',
             '1.5e-3', '"option_id"', '"description"', '"state"'],
    "added": ADDED,
    "control": ["\x00", "\x01", "\x07", "\x08", "\x1b", "\x1f", "\x7f", "\x80", "\x9f", "\u200e", "\u200f",
                "\u2066", "\ufeff", "\ufffd", "\ufff9", "\U000e0041", "\U000e007f"],
}


def _random_codepoint(rng):
    r = rng.random()
    if r < 0.15:
        cp = rng.randint(0x20, 0x7E)
    elif r < 0.35:
        cp = rng.randint(0x80, 0x2FFF)
    elif r < 0.55:
        cp = rng.randint(0x3000, 0xFFFF)
    elif r < 0.70:
        cp = rng.randint(0x10000, 0x1FFFF)
    elif r < 0.78:
        cp = rng.randint(0x20000, 0x323AF)
    elif r < 0.83:
        cp = rng.randint(0xE0000, 0x10FFFF)
    else:
        # blocks added in Unicode 14 - 16 (and some unassigned neighbours)
        lo, hi = rng.choice([
            (0x1E030, 0x1E08F), (0x11F00, 0x11F5F), (0x1E4D0, 0x1E4FF), (0x16D40, 0x16D7F),
            (0x11380, 0x113FF), (0x1E5D0, 0x1E5FF), (0x16100, 0x1613F), (0x105C0, 0x105FF),
            (0x11BC0, 0x11BFF), (0x1CC00, 0x1CEBF), (0x2EBF0, 0x2EE5F), (0x31350, 0x323AF),
            (0x1FAE0, 0x1FAFF), (0x1FA70, 0x1FAAF), (0x10D40, 0x10D8F), (0x11F00, 0x11F5F),
            (0x0870, 0x089F), (0x1DF00, 0x1DFFF), (0x1E290, 0x1E2BF), (0x10EC0, 0x10EFF),
            (0x0CF3, 0x0CF3), (0x1B4F, 0x1B7F), (0x0897, 0x0897), (0x1AC0, 0x1AFF), (0x1E000, 0x1E02F),
        ])
        cp = rng.randint(lo, hi)
    if 0xD800 <= cp <= 0xDFFF:
        cp = 0xFFFD
    return chr(cp)


def _fragment_string(rng):
    pools = list(FRAGMENT_POOLS)
    mode = rng.random()
    n = rng.randint(1, 12)
    parts = []
    main = rng.choice(pools)
    for _ in range(n):
        pool = main if mode < 0.4 else rng.choice(pools)
        if pool == "added" and rng.random() < 0.7:
            pool = "latin"
        parts.append(rng.choice(FRAGMENT_POOLS[pool]))
        r = rng.random()
        if r < 0.45:
            parts.append(" ")
        elif r < 0.55:
            parts.append(rng.choice(FRAGMENT_POOLS["space"]))
        elif r < 0.62:
            parts.append(rng.choice(FRAGMENT_POOLS["punct"]))
    s = "".join(parts)
    if rng.random() < 0.15:
        s = unicodedata.normalize("NFD", s)
    elif rng.random() < 0.05:
        s = unicodedata.normalize("NFKD", s)
    return s


def _repetitive(rng):
    unit = rng.choice(["a", "ab", "aab", "ba", "  ", " a", "a ", "!", "!?", "--", "==", "\n", " \n", "0",
                       "01", "中", "中文", "é", "e\u0301", "ab'", "'s", "😀", "❤️", "\t", "ー", "...", "ll",
                       "xyz", "<|", "|>", "<think", "abcd", "\u0301"])
    return unit * rng.randint(2, 80)


def _normalization_cases(rng):
    """Every combining mark (ccc != 0) and every character with a canonical decomposition, in NFC and
    NFD form, after a base, next to marks of other classes (canonical reordering), and a few hundred
    random mark soups: NFC must agree with HF's normalizer, whose tables are older than utf8proc's."""
    marks, decomposable = [], []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        if unicodedata.combining(c):
            marks.append(c)
        d = unicodedata.decomposition(c)
        if d and not d.startswith("<"):
            decomposable.append(c)
    out = []
    for m in marks:
        out.append("x" + m + "\u0334" + rng.choice(marks))
        out.append("a\u0345" + m + rng.choice(marks))
    for c in decomposable:
        out.append(c + " " + unicodedata.normalize("NFD", c) + rng.choice(marks))
    for _ in range(400):
        base = rng.choice("aeouAEOUkn\u0915\u0627\u05d0\u0e01\u1100\uac00" + "".join(decomposable[:50]))
        out.append(base + "".join(rng.choice(marks) for _ in range(rng.randint(1, 6))))
    return out


def generate(seed=20261129, count=20000):
    rng = random.Random(seed)
    out = list(EDGE)
    out += _edge_with_added(rng)
    out += _normalization_cases(rng)
    for _ in range(count):
        r = rng.random()
        if r < 0.70:
            out.append(_fragment_string(rng))
        elif r < 0.85:
            out.append("".join(_random_codepoint(rng) for _ in range(rng.randint(1, 24))))
        elif r < 0.95:
            out.append(_repetitive(rng))
        else:  # mixtures with long whitespace and punctuation runs
            out.append(_fragment_string(rng) + rng.choice(FRAGMENT_POOLS["space"]) * rng.randint(1, 30)
                       + _fragment_string(rng))
    # a few long strings: long words (heap BPE), long whitespace runs, long CJK runs, a long document
    out.append("a" * 5000)
    out.append("ab" * 3000)
    out.append(" " * 4000 + "x")
    out.append("\n" * 3000)
    out.append("中文测试漢字" * 800)
    out.append("".join(_random_codepoint(rng) for _ in range(6000)))
    out.append(" ".join(_fragment_string(rng) for _ in range(1500)))
    out.append("x" * 70000)
    return out


def main(argv):
    seed, count = 20261129, 20000
    i = 1
    while i < len(argv):
        if argv[i] == "--seed":
            seed = int(argv[i + 1]); i += 2
        elif argv[i] == "--count":
            count = int(argv[i + 1]); i += 2
        else:
            sys.exit("usage: gen_tokenizer_strings.py [--seed N] [--count N]")
    for s in generate(seed, count):
        sys.stdout.write(json.dumps(s) + "\n")


if __name__ == "__main__":
    main(sys.argv)
