"""A fixed subset of the OpInfo parity sweep (tools/op_coverage.py), so that it cannot rot and a
wrong answer on these ops fails CI. The full sweep's table is docs/op_coverage.md."""

from tools import op_coverage

SUBSET = "exp,add,mul,sum,where,softmax,var_mean,nn.functional.gelu,clamp,cat,amax"


def test_subset_is_right_and_fused(tmp_path):
    out = tmp_path / "coverage.md"
    rows = op_coverage.main(["--ops", SUBSET, "--dtypes", "float32,bfloat16,int64", "--samples", "1",
                             "--out", str(out)])
    defects = [r for r in rows if r.status in ("WRONG", "ERROR")]
    assert not defects, defects
    fused = {r.family for r in rows if r.status == "fused"}
    assert {"add", "mul", "sum", "where", "_softmax", "var_mean", "gelu"} <= fused, fused
    assert "| status | rows |" in out.read_text()
