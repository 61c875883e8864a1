"""GemmSpec validation, supports(), KernelConfig parsing and the configuration table (no Triton needed)."""

from __future__ import annotations

import json

import pytest

from falcon_mlir.kernels.configs import (SHARED_MEMORY_LIMIT, KernelConfig, adapt, choose_config,
                                         config_by_name, estimate_shared_bytes, load_table)
from falcon_mlir.kernels.spec import GemmSpec, require_supported, supports


def test_shapes_as_stored():
    s = GemmSpec(64, 48, 80, trans_a=True, trans_b=True, batch=3)
    assert s.a_shape == (3, 80, 64) and s.b_shape == (3, 48, 80) and s.c_shape == (3, 64, 48)
    s = GemmSpec(64, 48, 80)
    assert s.a_shape == (64, 80) and s.b_shape == (80, 48) and s.c_shape == (64, 48)
    assert s.flops == 2 * 64 * 48 * 80
    assert GemmSpec.from_dict(s.to_dict()) == s
    assert s.name == "bf16_64x48x80_nn_obf16"


@pytest.mark.parametrize("kwargs, words", [
    (dict(M=0, N=1, K=1), "GemmSpec.M must be >= 1"),
    (dict(M=1.5, N=1, K=1), "GemmSpec.M must be an int"),
    (dict(M=True, N=1, K=1), "GemmSpec.M must be an int"),
    (dict(M=2**31, N=1, K=1), "exceeds"),
    (dict(M=1, N=1, K=1, a_dtype="f64"), "a_dtype must be one of f32, f16, bf16"),
    (dict(M=1, N=1, K=1, out_dtype="i8"), "out_dtype"),
    (dict(M=1, N=1, K=1, trans_a=1), "trans_a must be a bool"),
    (dict(M=1, N=1, K=1, acc="f16"), "acc must be 'f32'"),
    (dict(M=1, N=1, K=1, f32_mode="bf16x3"), "f32_mode must be one of ieee, tf32, tf32x3"),
    (dict(M=1, N=1, K=1, f32_mode=True), "f32_mode must be one of"),
])
def test_spec_rejects(kwargs, words):
    with pytest.raises(ValueError, match=words):
        GemmSpec(**kwargs)


def test_f32_modes():
    ieee = GemmSpec(64, 48, 80, "f32", "f32", "f32")
    assert ieee.f32_mode == "ieee" and ieee.input_class == "f32" and ieee.precision == "ieee"
    assert ieee.name == "f32_64x48x80_nn_of32"
    for mode in ("tf32", "tf32x3"):
        s = GemmSpec(64, 48, 80, "f32", "f32", "f32", f32_mode=mode)
        assert s.input_class == mode and s.precision == mode and s.name == f"f32_64x48x80_nn_of32_{mode}"
        assert GemmSpec.from_dict(s.to_dict()) == s
    # Ignored for 16-bit inputs: bf16 runs on tensor cores whatever the mode.
    b = GemmSpec(64, 48, 80, f32_mode="tf32x3")
    assert b.input_class == "16bit" and b.precision == "ieee" and b.name == "bf16_64x48x80_nn_obf16"
    with pytest.raises(ValueError, match="unknown GemmSpec field"):
        GemmSpec.from_dict({"M": 1, "N": 1, "K": 1, "allow_tf32": True})  # the old flag is gone


def test_from_dict_unknown_key():
    with pytest.raises(ValueError, match="unknown GemmSpec field"):
        GemmSpec.from_dict({"M": 1, "N": 1, "K": 1, "bogus": 2})


def test_supports_reasons():
    assert supports(GemmSpec(8192, 8192, 8192)) is None
    # B stored K x N with N = 70 bf16: row stride 140 bytes.
    r = supports(GemmSpec(130, 70, 96))
    assert r.startswith("B is stored K x N") and "140 bytes" in r and "multiple of 8 for bf16" in r
    # The same B stored N x K (trans_b) has row stride K * 2 = 192 bytes: served.
    assert supports(GemmSpec(130, 70, 96, trans_b=True)) is None
    # A stored K x M (trans_a) needs M aligned; f32 needs multiples of 4.
    r = supports(GemmSpec(66, 64, 64, "f32", "f32", "f32", trans_a=True))
    assert r.startswith("A is stored K x M") and "multiple of 4 for f32" in r
    assert "mixed input dtypes" in supports(GemmSpec(64, 64, 64, "f32", "bf16"))
    # C needs no alignment: a masked store is used.
    assert supports(GemmSpec(64, 70, 64, trans_b=True, out_dtype="f32")) is None
    with pytest.raises(ValueError, match="not served: B is stored"):
        require_supported(GemmSpec(130, 70, 96))


def test_config_parse_round_trip():
    c = KernelConfig.parse("128x256x64,s3,w8,g8")
    assert c == KernelConfig()
    for text in ("64x128x64,s4,w4,g16,ws", "128x256x64,s3,w8,g8,sub", "32x32x16,s2,w4,g2,masked"):
        assert KernelConfig.parse(text).label == text
    assert KernelConfig.from_dict(c.to_dict()) == c


@pytest.mark.parametrize("text, words", [
    ("128x256", "expected BMxBNxBK"),
    ("128x96x64", "block_n must be a power of two"),
    ("512x128x64", "block_m must be a power of two in 16..256"),
    ("128x128x64,w2", "num_warps must be 4 or 8"),
    ("128x128x64,s0", "num_stages must be an int in 1..8"),
    ("128x128x64,w8,ws", "warp_specialize needs num_warps=4"),
    ("128x128x64,sub,masked", "epilogue_subtile applies to the TMA store only"),
    ("128x128x64,zz", "unknown part 'zz'"),
])
def test_config_rejects(text, words):
    with pytest.raises(ValueError, match=words):
        KernelConfig.parse(text)


def test_table_is_data_with_sources():
    table = load_table()
    assert len(table) >= 5
    for e in table:
        assert e.source and e.inputs and e.out
    assert config_by_name("16bit-128x256") == KernelConfig.parse("128x256x64,s3,w8,g8")
    with pytest.raises(ValueError, match="no configuration named"):
        config_by_name("nope")


def test_choose_config():
    # The tuned entries (H200 tune of 2026-12-01, picked into configs.json).
    big = choose_config(GemmSpec(8192, 8192, 8192))
    assert big.label == "128x256x64,s3,w8,g16"
    assert choose_config(GemmSpec(8192, 8192, 8192, "f16", "f16", "f16")).label == "128x256x64,s3,w8,g8"
    assert choose_config(GemmSpec(8192, 1024, 4096)).label == "128x256x64,s3,w8,g8"
    assert choose_config(GemmSpec(8192, 576, 7168)).label == "128x128x64,s4,w4,g8"  # narrow N: DeepSeek kv_a
    assert choose_config(GemmSpec(8192, 8192, 8192, "f32", "f32", "f32")).label == "128x128x32,s3,w8,g8"
    # f32 out of 16-bit inputs: the same tiles, C stored in halves to fit shared memory.
    f32out = choose_config(GemmSpec(8192, 8192, 8192, out_dtype="f32"))
    assert f32out.epilogue_subtile and f32out.block_n == 256
    assert estimate_shared_bytes(GemmSpec(8192, 8192, 8192, out_dtype="f32"), f32out) <= SHARED_MEMORY_LIMIT
    assert choose_config(GemmSpec(32, 4096, 4096)).block_m == 64          # decode-like M
    assert choose_config(GemmSpec(8192, 128, 4096)).block_n == 128        # narrow N
    f32 = choose_config(GemmSpec(8192, 8192, 8192, "f32", "f32", "f32"))
    assert (f32.block_m, f32.block_n, f32.block_k) == (128, 128, 32)
    # C rows not 16-byte aligned: masked store.
    odd = choose_config(GemmSpec(130, 70, 96, trans_b=True, out_dtype="f32"))
    assert not odd.tma_store and not odd.epilogue_subtile
    assert adapt(GemmSpec(64, 64, 64), odd) == odd
    with pytest.raises(ValueError, match="not served"):
        choose_config(GemmSpec(130, 70, 96))
    assert choose_config(GemmSpec(8192, 8192, 8192, "f32", "f32", "f32", f32_mode="tf32x3")).label \
        == "128x64x32,s4,w4,g8"  # tuned (not IEEE FMA)


def test_estimate_matches_known_figure():
    # Triton 3.6 (and 3.9): 128x256x64, 3 stages, bf16 -> 213,016 bytes (212,992 + 24 for barriers).
    assert estimate_shared_bytes(GemmSpec(8192, 8192, 8192), KernelConfig()) == 212992


def test_table_errors(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"format": 1, "entries": [{"name": "x", "inputs": ["16bit"], "out": ["bf16"],
                                                       "config": "128x128x64", "color": "red",
                                                       "source": "test"}]}))
    with pytest.raises(ValueError, match="entry 0: unknown key"):
        load_table(str(p))
    p.write_text(json.dumps({"format": 1, "entries": [{"name": "x", "inputs": ["bf32"], "out": ["bf16"],
                                                       "config": "128x128x64", "source": "test"}]}))
    with pytest.raises(ValueError, match="entry 0: unknown input class or dtype 'bf32'"):
        load_table(str(p))
    p.write_text(json.dumps({"entries": []}))
    with pytest.raises(ValueError, match="format"):
        load_table(str(p))
