"""Issue 14, point 5: FSDP2 over tensor parallelism on a 2 x 2 mesh of 4 gloo ranks trains
three steps compiled with nvfuser_dtensor and matches eager (fsdp_tp_worker.py)."""

import os
import re
import subprocess
import sys
from pathlib import Path

WORKER = Path(__file__).with_name("fsdp_tp_worker.py")


def test_fsdp2_over_tp_trains_like_eager_on_the_global_view():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", WORKER_DEVICE="cpu", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4",
                           str(WORKER)], capture_output=True, text=True, timeout=600, env=env)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-6000:]
    # Ranks share the pipe: a line may hold two ranks' reports.
    passed = re.findall(r"PASS fsdp_tp paths=(\[[^\]]*\]) regions=(\d+) rank=(\d+)", text)
    assert {int(r) for _, _, r in passed} == {0, 1, 2, 3}, text[-3000:]
    for paths, regions, _ in passed:
        # Every compiled graph took the global view (nvFuser's multidevice schedule) and fused.
        assert "global view" in paths and "'forward'" not in paths and "'backward'" not in paths, paths
        # ... and ran on local tensors (Note [Local execution of the global view]).
        assert "on DTensor" not in paths, paths
        assert int(regions) > 0
