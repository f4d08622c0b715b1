"""The partition proposal on bit masks proposes FX's partitions (Note [Partition proposals on bit masks])."""

import operator
import random

import pytest
import torch
from torch import fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from nvfuser_dtensor_backend import partition_proposal
from nvfuser_dtensor_backend.partition_proposal import Partitioner

aten = torch.ops.aten
copied = pytest.mark.skipif(not partition_proposal.fx_algorithm_copied(),
                            reason="this torch's partition proposal is not the one copied; FX's own runs")


def proposal(partitions):
    return [(p.id, [(n.name, order) for n, order in p.nodes.items()]) for p in partitions]


class _Named(OperatorSupportBase):
    def __init__(self, names):
        self.names = names

    def is_node_supported(self, submodules, node):
        return node.name in self.names


def random_graph(rng: random.Random, size: int) -> tuple[fx.GraphModule, _Named]:
    """A DAG of ``size`` ops, some with tuple outputs read through getitems (of getitems), a
    random quarter to three quarters supported."""
    graph = fx.Graph()
    values = [graph.placeholder(f"x{i}") for i in range(3)]
    for _ in range(size):
        kind = rng.random()
        if kind < 0.15:  # a tuple output and its getitems
            pair = graph.call_function(aten.var_mean.correction, (rng.choice(values[-8:]),))
            items = [graph.call_function(operator.getitem, (pair, i)) for i in range(rng.choice((1, 2)))]
            if rng.random() < 0.4:  # a getitem of a getitem (a tuple of tuples), as with_effects gives
                items = [graph.call_function(operator.getitem, (items[0], 0))]
            values += items
        elif kind < 0.3:
            values.append(graph.call_function(aten.view.default, (rng.choice(values[-6:]), [-1])))
        else:
            near, far = rng.choice(values[-5:]), rng.choice(values)
            values.append(graph.call_function(rng.choice((aten.add.Tensor, aten.mul.Tensor)), (near, far)))
    graph.output(tuple(rng.sample(values, 3)))
    gm = fx.GraphModule(torch.nn.Module(), graph)
    ops = [n.name for n in graph.nodes if n.op == "call_function"]
    return gm, _Named(set(rng.sample(ops, len(ops) * rng.choice((1, 2, 3)) // 4)))


def test_this_torch_runs_the_copy():
    """torch 2.10 (CI's) and 2.11 (the GPU's) run the masks; another torch whose algorithm
    moved would run FX's own."""
    if torch.__version__.startswith(("2.10", "2.11")):
        assert partition_proposal.fx_algorithm_copied()


@pytest.mark.parametrize("single", [True, False])
@pytest.mark.parametrize("seed", range(12))
def test_random_graphs_get_fx_partitions(seed, single):
    rng = random.Random(seed)
    gm, support = random_graph(rng, rng.choice((20, 60, 150)))
    fx_partitions = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=single).propose_partitions()
    ours = Partitioner(gm, support, allows_single_node_partition=single)._propose_with_masks()
    assert proposal(ours) == proposal(fx_partitions)
    assert len(fx_partitions) > 1  # the graphs do split


def test_torch_2_11_moves_getitems_of_getitems_to_their_producer():
    """torch 2.11's step that 2.10 lacks (compared with 2.11's own on the GPU machine, and on
    6,000 random graphs with 2.11's file in session 34)."""
    graph = fx.Graph()
    x = graph.placeholder("x")
    pair = graph.call_function(aten.var_mean.correction, (x,))
    inner = graph.call_function(operator.getitem, (pair, 0))
    leaf = graph.call_function(operator.getitem, (inner, 0))
    graph.output(graph.call_function(aten.add.Tensor, (leaf, x)))
    gm = fx.GraphModule(torch.nn.Module(), graph)
    support = _Named({pair.name})  # only the tuple's producer is supported

    def owner(partitions):
        return {n.name: p.id for p in partitions for n in p.nodes}

    settled = owner(Partitioner(gm, support, allows_single_node_partition=True)._propose_with_masks(True))
    one_pass = owner(Partitioner(gm, support, allows_single_node_partition=True)._propose_with_masks(False))
    assert settled[leaf.name] == settled[inner.name] == settled[pair.name]
    assert leaf.name not in one_pass and one_pass[inner.name] == one_pass[pair.name]


def test_a_changed_fx_algorithm_runs_fx_own(monkeypatch):
    gm, support = random_graph(random.Random(0), 40)
    monkeypatch.setattr(partition_proposal, "FX_SOURCES", {})
    partition_proposal.fx_algorithm_copied.cache_clear()
    try:
        ran = []
        monkeypatch.setattr(Partitioner, "_propose_with_masks", lambda self: ran.append(1))
        assert proposal(Partitioner(gm, support).propose_partitions()) == proposal(
            CapabilityBasedPartitioner(gm, support).propose_partitions())
        assert not ran
    finally:
        partition_proposal.fx_algorithm_copied.cache_clear()


@copied
def test_a_failure_of_the_masks_warns_and_runs_fx_own(monkeypatch, caplog):
    gm, support = random_graph(random.Random(1), 40)

    def broken(self):
        raise KeyError("a node")

    monkeypatch.setattr(Partitioner, "_propose_with_masks", broken)
    with caplog.at_level("WARNING", logger="nvfuser_dtensor_backend"):
        ours = Partitioner(gm, support).propose_partitions()
    assert proposal(ours) == proposal(CapabilityBasedPartitioner(gm, support).propose_partitions())
    assert [r.message for r in caplog.records if "bit masks failed" in r.message]


@copied
def test_zoo_training_graphs_get_fx_partitions(monkeypatch):
    """The backend's own graphs of a Hugging Face model, forward and backward."""
    pytest.importorskip("transformers")
    from benchmarks import zoo, zoo_check

    compared = []
    masks = Partitioner._propose_with_masks

    def both(self):
        ours = masks(self)
        fx_partitions = CapabilityBasedPartitioner(
            self.graph_module, self.operator_support, self.allows_single_node_partition).propose_partitions()
        assert proposal(ours) == proposal(fx_partitions)
        compared.append(len(self.graph_module.graph.nodes))
        return ours

    monkeypatch.setattr(Partitioner, "_propose_with_masks", both)
    zm = zoo.build("t5", "tiny", "cpu", torch.float32)
    compiled = zoo_check.compile_model(zm.model, "nvfuser_dtensor")
    zoo_check.seeded_step(compiled, zm, zm.make_inputs(0), True, 0, collect=False)
    assert len(compared) >= 2 and max(compared) > 300
