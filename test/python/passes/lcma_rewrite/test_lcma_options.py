"""lcma-rewrite's option text (LcmaOptions.parse): values of max-error,
empty and over-long scheme lists, duplicated keys, and a composition so large
that parsing it must stop quickly. (Bad options on falcon-opt's and
falcon-compile's command lines: tools/test_falcon_opt.py,
tools/test_falcon_compile.py.)
"""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("value,ok", [
    ("0", False), ("-1", False), ("nan", False), ("NaN", False), ("-inf", False), ("1e-400", False),
    ("1e-4x", False), ("", False), ("0x10", False), ("1e-4,1e-3", False),
    ("inf", True), ("1e300", True), ("1e-300", True), ("5e-324", True), ("+1e-4", True),
])
def test_max_error_values(value, ok):
    from falcon_mlir.passes.lcma_rewrite import LcmaOptions, OptionError

    if ok:
        assert LcmaOptions.parse(f"max-error={value}").max_error > 0
    else:
        with pytest.raises(OptionError):
            LcmaOptions.parse(f"max-error={value}")


def test_empty_scheme_is_an_option_error():
    from falcon_mlir.passes.lcma_rewrite import LcmaOptions, OptionError

    with pytest.raises(OptionError):
        LcmaOptions.parse("scheme=")


def test_scheme_list_longer_than_max_levels():
    from falcon_mlir.passes.lcma_rewrite import LcmaOptions, OptionError

    with pytest.raises(OptionError):
        LcmaOptions.parse("scheme=strassen,strassen,strassen,strassen,strassen")


def test_duplicated_option_key():
    from falcon_mlir.passes.lcma_rewrite import LcmaOptions, OptionError

    with pytest.raises(OptionError):
        LcmaOptions.parse("scheme=strassen scheme=laderman")


_LIMIT = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
from falcon_mlir.passes.lcma_rewrite import LcmaOptions, OptionError
try:
    LcmaOptions.parse(sys.argv[1])
except OptionError as e:
    print("OptionError", e)
"""


def test_fixed_huge_composition_hangs():
    try:
        p = subprocess.run([sys.executable, "-c", _LIMIT, "scheme=strassen^4*strassen"],
                           capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("option parsing did not finish in 60 s (it used to run for minutes)")
    assert "OptionError" in p.stdout, p.stdout + p.stderr
