"""How much of the backend's own graph work (``graphs_s``, Note [First-call accounting]) is the
partition proposal (FX's algorithm, Note [Partition proposals on bit masks]), per zoo model (tiny widths, 4 layers: the
node count, not the widths, sets its time), on the CPU.

    PYTHONPATH=. .venv/bin/python scripts/cpu_partition_time.py t5 gpt2
"""
import sys, time
import torch
from benchmarks import zoo, zoo_builders, zoo_check
zoo_builders.LM["tiny"]["layers"] = 4
from nvfuser_dtensor_backend import compile_time
from nvfuser_dtensor_backend.partition_proposal import Partitioner as P
orig = P.propose_partitions
spent = [0.0, 0]
def timed(self):
    t0 = time.perf_counter(); r = orig(self); spent[0] += time.perf_counter() - t0; spent[1] += len(self.graph_module.graph.nodes); return r
P.propose_partitions = timed
for name in sys.argv[1:]:
    compile_time.stats(clear=True); spent[:] = [0.0, 0]
    zm = zoo.build(name, "tiny", "cpu", torch.bfloat16)
    c = zoo_check.compile_model(zm.model, "nvfuser_dtensor")
    zoo_check.seeded_step(c, zm, zm.make_inputs(0), True, 0, collect=False)
    s = compile_time.stats()
    print(name, "graphs", s["graphs"], "graphs_s %.2f" % s["graphs_s"], "propose_partitions s %.2f" % spent[0], "nodes", spent[1], flush=True)
