"""The cases of the falcon-opt mutation fuzzer (``scripts/fuzz_opt.py``):
valid seeds from ``test/lit/**/*.mlir``, their mutations (bytes and tokens:
delete / duplicate / swap lines, flip characters, change the numbers of
shapes, including to 0, 1 and huge, swap element types, drop tokens,
truncate) and the falcon-opt options each case runs with."""

from __future__ import annotations

import glob
import os
import random
import re
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
LIT_DIR = os.path.join(os.path.dirname(HERE), "test", "lit")

#: Option strings of lcma-rewrite the cases are run with (all valid: invalid
#: option strings are the business of test/python/tools/test_falcon_opt.py). Product counts stay
#: small (at most 48 or 7*7 per contraction) so no case is slow by design.
OPTIONS = [
    "scheme=strassen levels=2",
    "scheme=strassen levels=1 edge=pad",
    "scheme=strassen levels=2 edge=pad",
    "scheme=3x3x3:23 levels=2 edge=pad",
    "scheme=strassen",
    "scheme=winograd",
    "scheme=3x3x3:23",
    "scheme=2x3x4:20 edge=pad",
    "scheme=strassen,2x2x3:11 levels=2",
    "scheme=4x4x4:48",
    "scheme=strassen barriers=true",
    "scheme=auto",
    "",
]

#: Extra falcon-opt flags drawn now and then (all valid).
EXTRA_FLAGS = [
    [], [], [], ["--canonicalize"], ["--cse"], ["--split-input-file"], ["--mlir-print-debuginfo"],
    ["--verify-each=false"], ["--allow-unregistered-dialect"],
]

ELEMENT_TYPES = ["f32", "f16", "bf16", "f64", "i8", "i32", "i64", "i1", "index", "f8E4M3FN",
                 "complex<f32>", "i0", "si8", "ui8", "tf32"]
HUGE = ["4611686018427387904", "9223372036854775807", "4294967296", "2147483648",
        "18446744073709551616", "99999999999999999999"]
PUNCT = list("{}()<>[],:%@=\"'#^!-") + ["\\", "\x00", "\xff", "\u00e9", "x", " ", "\n"]

_SHAPE_NUM = re.compile(r"(?<=[<x])(\d+)(?=x)")
_ANY_NUM = re.compile(r"\d+")
_ETYPE = re.compile(r"\b(f16|bf16|f32|f64|i1|i8|i32|i64)\b")
_TOKEN = re.compile(r"%[\w.]+|@\w+|[\w.]+|\S")

# --------------------------------------------------------------------------
# Seeds and mutations
# --------------------------------------------------------------------------

def load_seeds(lit_dir: str = LIT_DIR) -> list:
    """Valid chunks of the lit tests (comment lines dropped), plus whole files.

    The files are taken from every folder below ``lit_dir`` in the order of
    their file names (not their folders), so a seed keeps its index, and a
    case its input, when a test moves to another folder."""
    seeds = []
    paths = glob.glob(os.path.join(lit_dir, "**", "*.mlir"), recursive=True)
    for path in sorted(paths, key=lambda p: (os.path.basename(p), p)):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        chunks = re.split(r"(?m)^// -----\s*$", text)
        for ch in chunks:
            body = "\n".join(l for l in ch.splitlines() if not l.lstrip().startswith("//"))
            if body.strip():
                seeds.append(body.strip() + "\n")
        seeds.append(text)
    if not seeds:
        raise ValueError(f"no seeds in {lit_dir}")
    return seeds


def _lines_op(text: str, rng: random.Random) -> str:
    lines = text.split("\n")
    if len(lines) < 2:
        return text
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    op = rng.choice(["delete", "duplicate", "swap"])
    if op == "delete":
        del lines[i]
    elif op == "duplicate":
        lines.insert(j, lines[i])
    else:
        lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def _flip_char(text: str, rng: random.Random) -> str:
    if not text:
        return text
    i = rng.randrange(len(text))
    return text[:i] + rng.choice(PUNCT) + text[i + 1:]


def _sub_nth(regex, text: str, rng: random.Random, repl) -> str:
    matches = list(regex.finditer(text))
    if not matches:
        return text
    m = rng.choice(matches)
    return text[:m.start()] + repl(m) + text[m.end():]


def _shape_num(text: str, rng: random.Random) -> str:
    def repl(m):
        return rng.choice(["0", "1", "2", "3", "5", "7", "64", "1024", rng.choice(HUGE),
                           str(rng.randint(0, 40)), "?"])

    if rng.random() < 0.5:  # change every occurrence of one size (keeps the IR consistent)
        nums = sorted(set(_SHAPE_NUM.findall(text)))
        if nums:
            old, new = rng.choice(nums), repl(None)
            return re.sub(r"(?<=[<x])" + old + r"(?=x)", new, text)
    return _sub_nth(_SHAPE_NUM, text, rng, repl)


def _any_num(text: str, rng: random.Random) -> str:
    return _sub_nth(_ANY_NUM, text, rng,
                    lambda m: rng.choice(["0", "1", "-1", str(int(m.group()) + 1), rng.choice(HUGE)]))


def _elem_type(text: str, rng: random.Random) -> str:
    if rng.random() < 0.4:  # swap one type everywhere (keeps the IR consistent)
        found = sorted(set(_ETYPE.findall(text)))
        if found:
            old, new = rng.choice(found), rng.choice(ELEMENT_TYPES)
            return re.sub(r"\b" + re.escape(old) + r"\b", new, text)
    return _sub_nth(_ETYPE, text, rng, lambda m: rng.choice(ELEMENT_TYPES))


def _token_op(text: str, rng: random.Random) -> str:
    toks = list(_TOKEN.finditer(text))
    if not toks:
        return text
    m = rng.choice(toks)
    op = rng.choice(["delete", "duplicate", "replace"])
    if op == "delete":
        return text[:m.start()] + text[m.end():]
    if op == "duplicate":
        return text[:m.end()] + " " + m.group() + text[m.end():]
    other = rng.choice(toks).group()
    return text[:m.start()] + other + text[m.end():]


def _truncate(text: str, rng: random.Random) -> str:
    return text[:rng.randrange(len(text) + 1)] if text else text


def _byte_flip(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return data
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        b[rng.randrange(len(b))] = rng.randrange(256)
    return bytes(b)


TEXT_MUTATORS = [_lines_op, _flip_char, _shape_num, _shape_num, _any_num, _elem_type, _elem_type,
                 _token_op, _token_op, _truncate]


def mutate(seed: str, rng: random.Random) -> bytes:
    """One to three mutations of ``seed``; now and then a raw byte flip."""
    text = seed
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        text = rng.choice(TEXT_MUTATORS)(text, rng)
    data = text.encode("utf-8", "surrogatepass")
    if rng.random() < 0.05:
        data = _byte_flip(data, rng)
    return data


@dataclass
class Case:
    """One fuzz case: the input bytes and falcon-opt's arguments after the input path."""

    index: int
    data: bytes
    argv: list            # falcon-opt arguments after the input path



def make_cases(n: int, seed: int, seeds: list) -> list:
    """``n`` cases (mutated seeds with drawn options), the same for the same ``seed``."""
    rng = random.Random(seed)
    cases = []
    for i in range(n):
        data = mutate(rng.choice(seeds), rng)
        argv = [f"--lcma-rewrite={rng.choice(OPTIONS)}"] + rng.choice(EXTRA_FLAGS)
        if rng.random() < 0.2:
            argv = rng.choice(EXTRA_FLAGS) + argv
        cases.append(Case(i, data, argv))
    return cases


