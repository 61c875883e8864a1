"""GEMM shapes for benchmarks: ``MxNxK`` lists and the LLM weight shapes of a
workloads file (``workloads.md``).

Imports only the standard library, so that GPU bundles made by
``scripts/gpu_check.py`` can carry a copy (see :mod:`falcon_mlir.bundles`).
Bad input raises ``ValueError`` with a message that names the bad token; the
command-line tools put the option in front (``--shapes: ...``).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

__all__ = ["Shape", "parse_int_list", "parse_shapes", "shape_argument", "parse_workloads"]


@dataclass
class Shape:
    """One GEMM: C (M x N) = A (M x K) @ B (K x N); ``label`` names the weight."""

    M: int
    N: int
    K: int
    label: str = ""

    @property
    def flops(self) -> float:
        """Classical floating-point operations, 2*M*N*K."""
        return 2.0 * self.M * self.N * self.K

    @property
    def mnk(self) -> Tuple[int, int, int]:
        """``(M, N, K)``."""
        return (self.M, self.N, self.K)

    def text(self) -> str:
        """``"MxNxK"``."""
        return f"{self.M}x{self.N}x{self.K}"


def parse_int_list(text: str) -> List[int]:
    """``"512,1024"`` -> ``[512, 1024]`` (empty tokens skipped).

    Raises:
        ValueError: a token that is not a positive integer, or no token at all.
    """
    out = []
    for tok in text.split(","):
        tok = tok.strip()
        if not tok:
            continue
        if not re.fullmatch(r"[0-9]+", tok) or int(tok) <= 0:
            raise ValueError(f"{tok!r} is not a positive integer")
        out.append(int(tok))
    if not out:
        raise ValueError("empty list")
    return out


def parse_shapes(text: str) -> List[Shape]:
    """``"MxNxK,..."`` (``x`` or ``X``) -> shapes (label: ``square`` when
    M = N = K, else ``KxN``).

    Raises:
        ValueError: a token that is not three positive integers joined by
            ``x``, or no token at all.
    """
    shapes = []
    for tok in text.split(","):
        tok = tok.strip()
        if not tok:
            continue
        m = re.fullmatch(r"([0-9]+)[xX]([0-9]+)[xX]([0-9]+)", tok)
        if not m or 0 in (int(m.group(1)), int(m.group(2)), int(m.group(3))):
            raise ValueError(f"{tok!r} is not MxNxK with positive integers")
        M, N, K = (int(g) for g in m.groups())
        shapes.append(Shape(M, N, K, "square" if M == N == K else f"{K}x{N}"))
    if not shapes:
        raise ValueError("empty list")
    return shapes


def shape_argument(text: str) -> Tuple[int, int, int]:
    """``MxNxK`` -> ``(M, N, K)``: one shape of :func:`parse_shapes`, as an argparse ``type=`` (the scripts'
    positional shapes: the message reaches the usage line).

    Raises:
        argparse.ArgumentTypeError: not one shape of three positive ints joined by ``x``.
    """
    try:
        shapes = parse_shapes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if len(shapes) != 1:
        raise argparse.ArgumentTypeError(f"one MxNxK per argument, got {text!r}")
    return shapes[0].mnk


def _table_row(s: str, current_model: str, model: Optional[str]) -> Tuple[str, list]:
    """One markdown table row -> ``(model cell in force, [(label, K, N), ...])``."""
    cells = [c.strip() for c in s.strip("|").split("|")]
    if len(cells) < 4 or set(cells[0]) <= set("-: ") and cells[0]:
        return current_model, []
    if cells[2].lower() == "k":
        return current_model, []  # header
    if cells[0]:
        current_model = cells[0]
    ks = [c.strip() for c in cells[2].split("/")]
    ns = [c.strip() for c in cells[3].split("/")]
    layers = [c.strip() for c in cells[1].split("/")]
    n = max(len(ks), len(ns))
    if not all(re.fullmatch(r"[0-9]+", x) for x in ks + ns):
        return current_model, []
    if len(ks) > 1 and len(ns) > 1 and len(ks) != len(ns):
        raise ValueError(f"row '{s}' lists {len(ks)} K and {len(ns)} N values")
    if model and model.lower() not in current_model.lower():
        return current_model, []
    short = current_model.split("(")[0].strip()
    found = []
    for i in range(n):
        K = int(ks[i] if len(ks) > 1 else ks[0])
        N = int(ns[i] if len(ns) > 1 else ns[0])
        layer = layers[i] if len(layers) == n else cells[1]
        found.append((f"{short} {layer}".strip(), K, N))
    return current_model, found


def parse_workloads(path: str, model: Optional[str] = None) -> List[Tuple[str, int, int]]:
    """Weight shapes ``(label, K, N)`` from a workloads file.

    Reads the markdown table of ``workloads.md`` (columns model | layer | K | N;
    an empty model cell continues the row above; ``"a / b"`` in K, N and layer
    lists several layers; ``k, v`` share one shape) or plain lines ``K N
    [label]``.  ``model`` keeps the rows whose model cell contains it
    (case-insensitive).  Duplicate (K, N) pairs are merged into one label.

    Raises:
        ValueError: unreadable file, a row with mismatched K and N lists, a
            size below 1, or no shape found.
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror}") from None
    found: List[Tuple[str, int, int]] = []
    current_model = ""
    for line in lines:
        s = line.strip()
        if s.startswith("|"):
            current_model, rows = _table_row(s, current_model, model)
            found += rows
        else:
            m = re.fullmatch(r"([0-9]+)\s+([0-9]+)(?:\s+(.*))?", s)
            if m:
                found.append((m.group(3) or f"{m.group(1)}x{m.group(2)}", int(m.group(1)), int(m.group(2))))
    for label, K, N in found:
        if K < 1 or N < 1:
            raise ValueError(f"{label}: K and N must be >= 1 (got K={K}, N={N})")
    merged: dict = {}
    for label, K, N in found:
        if (K, N) in merged:
            merged[(K, N)] += ", " + label.split(" ", 1)[-1] if " " in label else ""
        else:
            merged[(K, N)] = label
    if not merged:
        raise ValueError(f"no shapes found in {path}" + (f" for model {model!r}" if model else ""))
    return [(label, K, N) for (K, N), label in merged.items()]
