"""Benchmarking falcon's LCMA candidates against classical IREE GEMM (the
library behind ``falcon-bench``).

* :mod:`~falcon_mlir.bench.shapes`: :class:`Shape`, ``MxNxK`` lists and the
  weight shapes of ``workloads.md`` (standard library only);
* :mod:`~falcon_mlir.bench.candidates`: what is compared (classical, auto,
  forced option strings, numpy, the cost model's top plans), plan text;
* :mod:`~falcon_mlir.bench.measure`: compile, check and time one shape;
* :mod:`~falcon_mlir.bench.report`: rows, markdown, CSV, decision quality, plot.
"""

from falcon_mlir.bench.candidates import Candidate, expand_top, parse_candidates, plan_text
from falcon_mlir.bench.measure import BenchConfig, Result, bench_shape
from falcon_mlir.bench.shapes import Shape, parse_int_list, parse_shapes, parse_workloads

__all__ = ["Shape", "parse_int_list", "parse_shapes", "parse_workloads", "Candidate",
           "parse_candidates", "expand_top", "plan_text", "BenchConfig", "Result", "bench_shape"]
