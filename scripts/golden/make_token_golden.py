#!/usr/bin/env python3
# Writes tests/golden/tokens_smollm2.txt: expected token ids for SmolLM2's byte-level BPE, computed by
# an independent implementation (Hugging Face `tokenizers`) from the vocab and merges in the GGUF, plus
# expected pre-tokenizer pieces for every pre-tokenizer kvzip supports (smollm, gpt2, llama-bpe, qwen2).
# Python: the pyenv python3 (3.11); needs `pip install tokenizers gguf numpy`.
# Usage: python3 scripts/golden/make_token_golden.py [MODEL.gguf] [OUT.txt]
# Format (ASCII, one record per line; strings are JSON with ensure_ascii):
#   kvzip-token-golden v1
#   # comment
#   encode <parse_special 0|1> <json text>      followed by   ids <id> <id> ...
#   pretok <pre name> <json text>               followed by   pieces <json piece> <json piece> ...
import json
import os
import sys

from gguf import GGUFReader
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MODEL = os.environ.get(
    "KVZIP_MODEL", os.path.expanduser("~/.cache/kvzip/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
SQUAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "normans.json")

# The pre-tokenizer regexes as Hugging Face tokenizer.json files write them (Split, "Isolated").
GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
             r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
            r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Test vectors from the reference notes (gguf-smollm2-bpe.md 2.4); checked against tokenizers below.
REFERENCE_VECTORS = [
    ("Hello, we can use", [19556, 28, 392, 416, 722]),
    ("The capital of France is", [504, 3575, 282, 4649, 314]),
    ("You are a helpful AI assistant named SmolLM, trained by Hugging Face",
     [2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407, 19712, 8182]),
    ("\n", [198]),
    ("Hello world! 123", [19556, 905, 17, 216, 33, 34, 35]),
    ("Caf\u00e9 d\u00e9j\u00e0 vu.", [51, 1939, 2756, 32564, 90, 16739, 386, 101, 30]),
    ("  multiple   spaces", [216, 2701, 256, 5600]),
]

SHORT_CASES = [
    # unicode: CJK, emoji (incl. ZWJ sequence and flag), accents, RTL, combining marks
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "Emoji: \U0001F600\U0001F44D\U0001F3FD \U0001F468\u200d\U0001F469\u200d\U0001F467 \U0001F1EB\U0001F1F7!",
    "na\u00efve fa\u00e7ade \u00c5ngstr\u00f6m \u0141\u00f3d\u017a stra\u00dfe",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "e\u0301 a\u0308 n\u0303 \u0915\u094d\u0937 Z\u0351\u036b\u0343\u036a\u0302",
    "\u0417\u0434\u0440\u0430\u0432\u0441\u0442\u0432\u0443\u0439, \u043c\u0438\u0440! \u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5",
    # digits
    "12345", "3.14", "1,000,000", "\u0661\u0662\u0663 \u0664\u0665", "\u00bd \u2163 \u00b2", "v1.2.3-rc4 0x1F 1e-5",
    "In 1066, 7000 men",
    # whitespace runs
    "a b", "a  b", "a   b", "a\tb\t\tc", "x\n\n\ny", "trailing spaces   ", "   leading", "line1\r\nline2\r\n",
    " ", "  ", "\t", "\n\n", "\u00a0nbsp\u00a0\u00a0x", "\u3000ideographic\u2003em", "a \n b", "a\u0085b",
    "tabs\t \tand spaces \t\n", "end with newline\n",
    # code
    "def f(x):\n    return x**2  # square\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "if (a && b || !c) {\n\tprintf(\"%d\\n\", x);\n}",
    "<div class=\"x\">&amp;</div>",
    "SELECT * FROM t WHERE id='42';",
    # contractions and case
    "don't", "I'LL", "we've they're it's I'm you'd", "DON'T WON'T", "rock 'n' roll", "\u2019s curly\u2019s",
    # punctuation runs and odd characters
    "!!! ??? ... ---", "\"quoted\" (paren) [bracket] {brace}", "@user #tag $5 100%", "\u00ad\u200b\u200d\ufeff",
    "\x00\x01\x7f", "",
    # bytes SmolLM2's vocabulary has no token for (0x04, 0x1D, lead byte 0xF1) are dropped
    "!\x04!", "th\x04e", "a\x1d\x1d b", "\U00050000 x",
]

SPECIAL_CASES = [
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n",
    "text <|endoftext|>more<|im_end|><|im_start|>",
    "<|im_start|><|im_start|>  <|im_end|>\n\n",
    "partial <|im_sta and <|im_end| and <empty_output>",
    "<jupyter_code>print(1)<jupyter_output>1",
]

PRETOK_CASES = SHORT_CASES + [
    "The Normans (Norman: Nourmands; French: Normands; Latin: Normanni) were the people who in the 10th",
    "HELLO'S 'S 'll 'LL 'Ll 'd it'\u017f",
    # code points where PCRE2 10.42 and tokenizers disagree unless kvzip patches the classes:
    # U+180E (PCRE2 \s), Unicode 15-16 letters/numbers, Unicode 17 numerics (Rust is_numeric)
    "a\u180eb \u1c89x \U00010d4ay \U00016d40z 7\U00010d40 8\U00011de0 9\U00016ff4!", "a\r\n\r\n  b \r c", "x  \n  y", "1234567 12 1", "\u00e9t\u00e9 \u00c9T\u00c9",
]


def load_gguf(path):
    r = GGUFReader(path)

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    def ints(key):
        f = r.fields[key]
        return [int(f.parts[i][0]) for i in f.data]

    model = bytes(r.fields["tokenizer.ggml.model"].parts[-1]).decode()
    pre = bytes(r.fields["tokenizer.ggml.pre"].parts[-1]).decode()
    assert model == "gpt2" and pre == "smollm", (model, pre)
    return strings("tokenizer.ggml.tokens"), ints("tokenizer.ggml.token_type"), strings(
        "tokenizer.ggml.merges")


def build(tokens, types, merges, with_specials):
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = []
    for m in merges:
        cut = m.index(" ", 1)  # split at the first space after index 0, as llama.cpp does
        pairs.append((m[:cut], m[cut + 1:]))
    tk = Tokenizer(models.BPE(vocab=vocab, merges=pairs))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tk.decoder = decoders.ByteLevel()
    if with_specials:
        specials = [t for t, ty in zip(tokens, types) if ty == 3]
        assert len(specials) == 17, len(specials)
        tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return tk


def byte_decoder():
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def pretokenizers():
    bytelevel = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    return {
        "smollm": (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), bytelevel]), True),
        "gpt2": (bytelevel, True),
        "llama-bpe": (pre_tokenizers.Split(Regex(LLAMA3_RE), behavior="isolated"), False),
        "qwen2": (pre_tokenizers.Split(Regex(QWEN2_RE), behavior="isolated"), False),
    }


def pieces_of(pt, byte_level, text, dec):
    out = []
    for piece, _ in pt.pre_tokenize_str(text):
        out.append(bytes(dec[c] for c in piece).decode("utf-8") if byte_level else piece)
    assert "".join(out) == text, (text, out)
    return out


def js(s):
    return json.dumps(s, ensure_ascii=True)


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_MODEL
    out_path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(REPO, "tests/golden/tokens_smollm2.txt")
    tokens, types, merges = load_gguf(model)
    with_sp = build(tokens, types, merges, True)
    plain = build(tokens, types, merges, False)

    for text, want in REFERENCE_VECTORS:
        got = with_sp.encode(text, add_special_tokens=False).ids
        assert got == want, f"reference vector disagrees with tokenizers: {text!r}: {got} != {want}"

    squad = json.load(open(SQUAD, encoding="utf-8"))
    paragraphs = [p for a in squad["data"] for p in a["paragraphs"]]
    article = "\n\n".join(p["context"] for p in paragraphs)
    questions = [q["question"] for p in paragraphs for q in p["qas"]]

    lines = ["kvzip-token-golden v1",
             "# Generated by scripts/golden/make_token_golden.py with tokenizers " +
             __import__("tokenizers").__version__ + " from " + os.path.basename(model) + "; do not edit.",
             "# encode <parse_special> <text> / ids ...;  pretok <pre> <text> / pieces ..."]

    dec = byte_decoder()
    vocab_chars = {dec[t] for t in tokens if len(t) == 1 and t in dec}  # bytes that have a token

    def add_encode(text, parse_special):
        tk = with_sp if parse_special else plain
        ids = tk.encode(text, add_special_tokens=False).ids
        if all(c in vocab_chars for c in text.encode("utf-8")):
            assert tk.decode(ids, skip_special_tokens=False) == text, text
        lines.append(f"encode {int(parse_special)} {js(text)}")
        lines.append("ids " + " ".join(map(str, ids)) if ids else "ids")

    for text, _ in REFERENCE_VECTORS:
        add_encode(text, False)
    add_encode(article, False)
    for q in questions:
        add_encode(q, False)
    for text in SHORT_CASES:
        add_encode(text, False)
    for text in SPECIAL_CASES:
        add_encode(text, True)
        add_encode(text, False)  # the same text as a document: specials stay plain text

    for name, (pt, byte_level) in pretokenizers().items():
        for text in PRETOK_CASES:
            pieces = pieces_of(pt, byte_level, text, dec)
            lines.append(f"pretok {name} {js(text)}")
            lines.append("pieces " + " ".join(js(p) for p in pieces) if pieces else "pieces")

    with open(out_path, "w", encoding="ascii", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {out_path}: {len(lines)} lines, {os.path.getsize(out_path)} bytes")


if __name__ == "__main__":
    main()
