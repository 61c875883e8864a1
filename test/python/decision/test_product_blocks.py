"""A profile's ``product_blocks``: the rate of a per-product plan's products by block shape."""

import json
import math

import pytest

from falcon_mlir.decision import Problem, load_profile
from falcon_mlir.decision.cost import CostModel
from falcon_mlir.decision.product_blocks import ProductBlocks
from falcon_mlir.decision.profile import Profile, ProfileError

TOY = {"format": 1, "name": "toy", "kind": "cpu", "bandwidth": 1e10, "dispatch_overhead": 1e-5,
       "dtypes": {"f32": {"gemm": [[100, 1e11], [10000, 1e11]], "add": 1e10}}}
BLOCKS = {"reference": [256, 2048, 1280], "exponents": [0.0, -0.2, -0.1],
          "range": [[256, 1024], [1024, 4096], [640, 2560]]}


def test_rate_factor_is_one_at_the_reference_and_a_power_law_inside_the_range():
    pb = ProductBlocks.from_json(BLOCKS, "p.json")
    assert pb.rate_factor(256, 2048, 1280) == pytest.approx(1.0)
    assert pb.rate_factor(999, 2048, 1280) == pytest.approx(1.0)  # exponent 0: Mb does not count
    assert pb.rate_factor(256, 4096, 1280) == pytest.approx(2.0 ** -0.2)
    assert pb.rate_factor(256, 1024, 640) == pytest.approx(0.5 ** -0.2 * 0.5 ** -0.1)
    assert pb.rate_factor(256, 3000, 2000) == pytest.approx(
        (3000 / 2048) ** -0.2 * (2000 / 1280) ** -0.1)


def test_rate_factor_holds_the_end_values_outside_the_range():
    pb = ProductBlocks.from_json(BLOCKS, "p.json")
    assert pb.rate_factor(256, 100, 1280) == pytest.approx(pb.rate_factor(256, 1024, 1280))
    assert pb.rate_factor(256, 65536, 99999) == pytest.approx(pb.rate_factor(256, 4096, 2560))


@pytest.mark.parametrize("value,msg", [
    ([1, 2, 3], "must be an object with 'reference', 'exponents' and 'range'"),
    (dict(BLOCKS, extra=1), "must be an object"),
    (dict(BLOCKS, reference=[256, 0, 1280]), "'reference' must be three positive numbers"),
    (dict(BLOCKS, reference=[256, 2048]), "'reference' must be three positive"),
    (dict(BLOCKS, exponents=[0, "x", 0]), "'exponents' must be three finite numbers"),
    (dict(BLOCKS, exponents=[0, float("nan"), 0]), "'exponents' must be three finite"),
    (dict(BLOCKS, range=[[256, 1024], [1024, 4096]]), "'range' must be three"),
    (dict(BLOCKS, range=[[256, 1024], [4096, 1024], [640, 2560]]), "'range' of Nb must be"),
    (dict(BLOCKS, range=[[256, 1024], [1024, 4096], [0, 2560]]), "'range' of Kb must be"),
])
def test_bad_product_blocks_are_one_line_profile_errors(tmp_path, value, msg):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(dict(TOY, product_blocks=value)))
    with pytest.raises(ProfileError) as e:
        load_profile(str(path))
    assert msg in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value)


def test_product_blocks_round_trip_through_save(tmp_path):
    p = Profile.from_dict(dict(TOY, product_blocks=BLOCKS))
    p.save(tmp_path / "x.json")
    q = load_profile(str(tmp_path / "x.json"))
    assert q.product_blocks == p.product_blocks
    assert q.product_blocks.to_json() == {k: [list(map(float, r)) if isinstance(r, list) else
                                              float(r) for r in v] for k, v in BLOCKS.items()}
    assert "product_blocks" not in Profile.from_dict(TOY).to_dict()


def _products(profile, pb, scheme):
    return CostModel(profile).plan(pb, [scheme]).parts["products"]


def test_constant_b_products_are_priced_at_the_block_shapes_rate():
    plain, shaped = Profile.from_dict(TOY), Profile.from_dict(dict(TOY, product_blocks=BLOCKS))
    const = Problem(1024, 16384, 5120, const_rhs=True)  # 4x4x4:49 blocks 256 x 4096 x 1280
    factor = shaped.product_blocks.rate_factor(256, 4096, 1280)
    assert factor < 1
    assert _products(shaped, const, "4x4x4:49") == pytest.approx(
        _products(plain, const, "4x4x4:49") / factor, rel=1e-6)
    # the other parts do not move
    a, b = (CostModel(p).plan(const, ["4x4x4:49"]).parts for p in (plain, shaped))
    assert a["combine_a"] == b["combine_a"] and a["combine_c"] == b["combine_c"]


def test_the_law_leaves_b_as_an_argument_blocking_and_classical_alone():
    plain, shaped = Profile.from_dict(TOY), Profile.from_dict(dict(TOY, product_blocks=BLOCKS))
    arg = Problem(1024, 16384, 5120)
    assert _products(shaped, arg, "4x4x4:49") == _products(plain, arg, "4x4x4:49")
    const = Problem(1024, 16384, 5120, const_rhs=True)
    assert _products(shaped, const, "2x2x2:8") == _products(plain, const, "2x2x2:8")
    assert CostModel(shaped).classical(const).seconds == CostModel(plain).classical(const).seconds


def test_narrow_products_rank_first_where_the_table_cannot_tell_them_apart():
    """2048x3584x3584 with B constant on the host profile: 4x2x4:26's products are 512 x 896 x 1792
    (Mb x Nb x Kb), 4x4x2:26's 512 x 1792 x 896; the table prices the two plans within 2% of each
    other, and measured, 4x2x4:26 ran 0.220 s against 0.260 s (docs/benchmarks.md, Products by
    block shape)."""
    host = load_profile("host")
    assert host.product_blocks is not None
    pb = Problem(2048, 3584, 3584, const_rhs=True)
    t_deep, t_wide = (CostModel(host).plan(pb, [s]).seconds for s in ("4x2x4:26", "4x4x2:26"))
    assert t_deep < t_wide / 1.03
    flat = CostModel(Profile.from_dict(dict(host.to_dict(), product_blocks=None)))
    assert math.isclose(flat.plan(pb, ["4x2x4:26"]).seconds, flat.plan(pb, ["4x4x2:26"]).seconds,
                        rel_tol=0.02)
