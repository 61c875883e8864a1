"""Declared pass options (falcon_mlir.options): one parser, one help, one writer."""

from dataclasses import dataclass
from typing import ClassVar, Optional

import pytest

from falcon_mlir.options import OptionError, format_help, option, option_keys, parse_options, to_text
from falcon_mlir.passes.falcon_tiles import TilesOptions
from falcon_mlir.passes.lcma_rewrite import LcmaOptions


@dataclass
class Toy:
    PASS: ClassVar[str] = "toy"
    mode: str = option("auto", choices=("auto", "fast", "slow"), help="how")
    depth: Optional[int] = option(None, type=int, auto=True, range=(1, 4), help="levels")
    rate: Optional[float] = option(None, type=float, auto=True, range=(0, None), above=True,
                                   help="a rate")
    on: bool = option(True, help="switch")
    name: str = option("x", aliases=("old",), help="a name")
    filename: Optional[str] = None


def test_parse_values_keys_and_defaults():
    t = parse_options(Toy, "{mode=fast depth=3 rate=1e-4 on=0 old='y'}")
    assert (t.mode, t.depth, t.rate, t.on, t.name) == ("fast", 3, 1e-4, False, "y")
    assert parse_options(Toy, "depth=auto") == Toy()
    assert parse_options(Toy, "  ") == Toy() and parse_options(Toy, None) == Toy()
    assert parse_options(Toy, "'mode=slow'").mode == "slow"           # whole text quoted
    assert option_keys(Toy) == ("mode", "depth", "rate", "on", "name")  # filename is no option


@pytest.mark.parametrize("text,message", [
    ("mode=medium", "toy option mode='medium' is invalid (expected auto, fast or slow)"),
    ("depth=5", "toy option depth=5 is out of range (expected auto or 1..4)"),
    ("depth=x", "toy option depth='x' is not an integer (expected auto or 1..4)"),
    ("rate=0", "toy option rate=0 is out of range (expected auto or > 0)"),
    ("rate=nan", "toy option rate=nan is out of range (expected auto or > 0)"),
    ("rate=fast", "toy option rate='fast' is not a number (expected auto or > 0)"),
    ("on=yes", "toy option on='yes' is invalid (expected true or false)"),
    ("bogus=1", "unknown toy option 'bogus' (keys: mode, depth, rate, on, name)"),
    ("mode", "toy option 'mode' must be key=value (keys: mode, depth, rate, on, name)"),
    ("mode=fast mode=slow", "toy option 'mode' is given twice"),
    ("name=a old=b", "toy option 'old' is given twice (also as 'name')"),
])
def test_errors_are_one_line(text, message):
    with pytest.raises(OptionError) as ei:
        parse_options(Toy, text)
    assert str(ei.value) == message


def test_to_text_round_trips():
    t = Toy(mode="slow", depth=2, rate=0.5, on=False, name="n")
    assert to_text(t) == "mode=slow depth=2 rate=0.5 on=false name=n"
    assert parse_options(Toy, to_text(t)) == t
    assert to_text(Toy()) == ""
    opts = LcmaOptions.parse("scheme=strassen,winograd levels=2 form=grouped profile=h200 "
                             "max-error=1e-3 barriers=true dispatch=false chunk=512 stack=false")
    assert to_text(opts) == ("scheme=strassen,winograd levels=2 form=grouped barriers=true "
                             "stack=false max-error=0.001 profile=h200 chunk=512 dispatch=false")
    assert LcmaOptions.parse(to_text(opts)) == opts
    tiles = TilesOptions.parse("target=none prefer=simt64x64,mma64x64 combine-max=32")
    assert to_text(tiles) == "table=none prefer=simt64x64,mma64x64 combine-max=32"


def test_help_is_generated_from_the_declarations():
    lines = format_help(Toy, indent=4)
    assert lines[0] == "    mode=auto|fast|slow"
    assert "    depth=auto|1..4" in lines and "    rate=auto|>0" in lines
    assert any("(default x; also old=)" in ln for ln in lines)
    lcma = "\n".join(format_help(LcmaOptions))
    for key in ("scheme=", "levels=auto|1..4", "edge=auto|peel|pad", "form=auto|per-product|grouped",
                "barriers=auto|true|false", "max-error=", "profile=", "also target=", "chunk=",
                "dispatch=auto|true|false", "stack=auto|true|false"):
        assert key in lcma
    assert "table=cuda-sm80|none|auto" in "\n".join(format_help(TilesOptions))


def test_lcma_profile_is_also_target_and_tiles_table_is_also_target():
    assert LcmaOptions.parse("target=h200").profile == "h200"
    assert LcmaOptions.parse("profile=h200-iree").profile == "h200-iree"
    with pytest.raises(OptionError, match="'target' is given twice"):
        LcmaOptions.parse("profile=h200 target=a100")
    with pytest.raises(OptionError, match="lcma-rewrite option profile: unknown target profile"):
        LcmaOptions.parse("profile=nope")
    assert TilesOptions.parse("target=none").table == "none"
    assert TilesOptions.parse("table=none").table == "none"
    assert TilesOptions.parse("none").table == "none"            # a bare table name
    with pytest.raises(OptionError) as ei:
        TilesOptions.parse("target=sm_90")
    assert str(ei.value) == ("falcon-tiles option target='sm_90' is invalid "
                             "(expected one of: cuda-sm80, none, auto)")
    with pytest.raises(OptionError, match="is given twice"):   # the same rules as lcma-rewrite
        TilesOptions.parse("table=none target=auto")


def test_falcon_opt_help_lists_every_declared_option(capfd):
    from falcon_mlir.tools import falcon_opt

    assert falcon_opt.main(["--help"]) == 0
    out = capfd.readouterr().out
    for cls in (LcmaOptions, TilesOptions):
        for line in format_help(cls):
            assert line in out


def test_a_pass_without_options_says_so(capfd):
    """empty-reduction has no options: any text is one line saying so, --help shows the bare flag."""
    from falcon_mlir.passes.empty_reduction import EmptyReductionOptions
    from falcon_mlir.tools import falcon_opt

    assert EmptyReductionOptions.parse("") == EmptyReductionOptions.parse("{}") == EmptyReductionOptions()
    for text, given in (("x=1", "x=1"), ("auto", "auto")):
        with pytest.raises(OptionError) as ei:
            EmptyReductionOptions.parse(text)
        assert str(ei.value) == f"empty-reduction takes no options (given: '{given}')"
    assert falcon_opt.main(["--help"]) == 0
    out = capfd.readouterr().out
    assert "  --empty-reduction  " in out and "--empty-reduction[=OPTIONS]" not in out


def test_new_and_old_keys_give_the_same_ir(capfd, tmp_path):
    """profile= / target= (lcma-rewrite) and table= / target= (falcon-tiles) are one option."""
    from falcon_mlir.tools import falcon_opt

    src = tmp_path / "mm.mlir"
    src.write_text("func.func @mm(%a: tensor<256x256xf32>, %b: tensor<256x256xf32>,"
                   " %c: tensor<256x256xf32>) -> tensor<256x256xf32> {\n"
                   "  %0 = linalg.matmul ins(%a, %b : tensor<256x256xf32>, tensor<256x256xf32>)"
                   " outs(%c : tensor<256x256xf32>) -> tensor<256x256xf32>\n"
                   "  return %0 : tensor<256x256xf32>\n}\n")
    outs = []
    for lcma, tiles in (("profile", "table"), ("target", "target")):
        assert falcon_opt.main([str(src), f"--lcma-rewrite=scheme=strassen {lcma}=h200-iree",
                                f"--falcon-tiles={tiles}=cuda-sm80"]) == 0
        outs.append(capfd.readouterr().out)
    assert outs[0] == outs[1] and "compilation_info" in outs[0] and "falcon.combine" in outs[0]
