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


def test_parts_merge_into_the_whole_sweep(tmp_path):
    """--shard K/N parts (the GPU run's parallel processes) cover the sweep once, and --merge
    gives the same rows as one process."""
    args = ["--ops", "exp,add,sum", "--dtypes", "float32", "--modes", "fwd", "--samples", "1"]
    whole = op_coverage.main(args + ["--out", str(tmp_path / "whole.md")])
    for k in range(2):
        op_coverage.main(args + ["--shard", f"{k}/2", "--out", "-", "--json", str(tmp_path / f"p{k}.json")])
    merged = op_coverage.main(["--merge", str(tmp_path / "p0.json"), str(tmp_path / "p1.json"),
                               "--out", str(tmp_path / "merged.md")])
    key = lambda r: (r.op, r.dtype, r.mode)  # noqa: E731
    assert sorted(map(key, merged)) == sorted(map(key, whole)) and len(whole) >= 3
    assert {key(r): r.status for r in merged} == {key(r): r.status for r in whole}
