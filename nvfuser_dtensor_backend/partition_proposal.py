"""FX's partition proposal with its cycle check on bit masks: FX's regions, found faster.

Note [Partition proposals on bit masks]
FX's ``CapabilityBasedPartitioner.propose_partitions`` tries to merge every node's new
partition with every partition proposed so far (its horizontal fusion; Note [Parts of a
region far apart] undoes the merges that join unrelated parts). Each try checks for a cycle
by walking, for every user of the two partitions outside them, every node downstream of
that user. On T5's training graphs that walk was 5.5 of the backend's 6.3 s of graph work on
the CPU (96,684 walks; docs/compile_time.md), most of the graph work of a first call.

The walk's answer is an "any": the merge of partitions A and B makes a cycle if some node
downstream of a user of A or B (outside both) lies in A or B, or lies in a partition whose
reach (FX's ``partition_map``) holds A or B. Here each node's downstream set and each
partition's nodes are bit masks (Python ints over node indices), and ``reach_into[X]`` is the
union of the nodes of the partitions whose reach holds X. The check is then one OR over the
users and one AND. Every other step (merge order, which partition absorbs which, the reach
sets, the getitem reassignment, the single-node filter) is FX's, line for line, so the
proposed partitions are FX's: ``tests/test_partition_proposal.py`` compares both on the
zoo's graphs and on random graphs. (The reach part of the check never decided a merge on
20,000 small random graphs: a node downstream of a user already catches those cycles there.
It is kept, as FX keeps it, since no proof says it never decides one.)
On T5's tiny training graphs (4 layers, 1,071 nodes the largest) the proposals take 0.42 s
instead of FX's 5.5 s on the CPU (`scripts/cpu_partition_time.py t5`).

The copy is of torch 2.10's and 2.11's algorithm, which differ in one step: torch 2.11
moves getitems into their producer's partition until none moves (nested getitem chains),
2.10 in one pass (2.11 also raises AssertionError where 2.10 asserts). Where the installed
torch's ``propose_partitions`` is neither text (``FX_SOURCES``), FX's own runs, so that a
torch whose algorithm changed keeps its own regions (one debug log line says so).
"""

from __future__ import annotations

import collections
import functools
import hashlib
import inspect
import itertools
import logging
import operator

from torch.fx.node import Node, _get_qualified_name
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner, Partition

log = logging.getLogger("nvfuser_dtensor_backend")

# sha256 of inspect.getsource(CapabilityBasedPartitioner.propose_partitions) -> whether
# that torch moves getitems to their producers until none moves
FX_SOURCES = {
    "323d871e451fe7ea5b8badbae842e0a8303a49f5ccb23c4e15730d02862bc657": False,  # torch 2.10
    "f9ee7d13c804a0e1ed2cf2805da0e2ae060a3e7d908119e4e0a1e6eeac8e0b3f": True,  # torch 2.11
}


@functools.cache
def _fx_source_key() -> str:
    return hashlib.sha256(inspect.getsource(CapabilityBasedPartitioner.propose_partitions).encode()).hexdigest()


@functools.cache
def fx_algorithm_copied() -> bool:
    """Whether the installed torch proposes partitions with an algorithm copied here."""
    same = _fx_source_key() in FX_SOURCES
    if not same:
        log.debug("nvfuser_dtensor: this torch's partition proposal is not torch 2.10's or 2.11's; FX's own runs")
    return same


def _downstream_masks(nodes: list[Node], bit: dict[Node, int]) -> dict[Node, int]:
    """Each node's downstream nodes (not itself) as a mask, as FX's ``_DependencyViewer``."""
    down: dict[Node, int] = {}
    for node in reversed(nodes):
        mask = 0
        for user in node.users:
            mask |= bit[user] | down.get(user, 0)
        down[node] = mask
    return down


class Partitioner(CapabilityBasedPartitioner):
    """``CapabilityBasedPartitioner`` whose proposals are FX's, found with bit masks."""

    def propose_partitions(self) -> list[Partition]:
        if not fx_algorithm_copied():
            return super().propose_partitions()
        try:
            return self._propose_with_masks()
        except Exception as e:  # a bug here must not stop a compile: FX's own gives the same partitions
            log.warning("nvfuser_dtensor: the partition proposal on bit masks failed (%s: %s); FX's own runs",
                        type(e).__name__, e)
            return super().propose_partitions()

    def _propose_with_masks(self, getitems_until_settled: bool | None = None) -> list[Partition]:
        if getitems_until_settled is None:
            getitems_until_settled = FX_SOURCES[_fx_source_key()]
        nodes = list(self.graph_module.graph.nodes)
        bit = {node: 1 << i for i, node in enumerate(nodes)}
        down = _downstream_masks(nodes, bit)
        # FX's state, as FX keeps it
        partition_map: dict[int, set] = collections.defaultdict(set)
        assignment: dict[Node, int] = {}
        partitions_by_id: dict[int, Partition] = {}
        partitions_order: dict[int, int] = {}
        partition_users: dict[int, set] = {}
        new_partition_id = itertools.count()
        # the masks: each partition's nodes, and for each id X the nodes of the partitions
        # whose partition_map holds X
        nodes_of: dict[int, int] = {}
        reach_into: dict[int, int] = collections.defaultdict(int)

        def maybe_merge_partition(self_id: int, other_id: int):
            self_nodes = partitions_by_id[self_id].nodes
            other_nodes = partitions_by_id[other_id].nodes
            reached = 0  # the nodes downstream of the users outside both
            for users in (partition_users[self_id], partition_users[other_id]):
                for user_node in users:
                    if user_node not in self_nodes and user_node not in other_nodes:
                        reached |= down[user_node]
            if reached & (nodes_of[self_id] | nodes_of[other_id] | reach_into[self_id] | reach_into[other_id]):
                return self_id, False  # the merge would make a cycle
            all_user_nodes = partition_users[self_id] | partition_users[other_id]
            all_user_nodes.difference_update(other_nodes, self_nodes)

            merge_id, removed_id = self_id, other_id
            if len(self_nodes) < len(other_nodes):
                merge_id, removed_id = removed_id, merge_id
            partitions_by_id[merge_id].nodes.update(partitions_by_id[removed_id].nodes)
            for node in partitions_by_id[removed_id].nodes:
                assignment[node] = merge_id
            del partitions_by_id[removed_id]
            partitions_order[merge_id] = min(partitions_order[merge_id], partitions_order[removed_id])
            del partitions_order[removed_id]
            partition_map[merge_id] = partition_map[merge_id].union(partition_map[removed_id])
            del partition_map[removed_id]
            partition_users[merge_id] = all_user_nodes
            del partition_users[removed_id]
            nodes_of[merge_id] |= nodes_of.pop(removed_id)
            for target_id in partition_map[merge_id]:
                reach_into[target_id] |= nodes_of[merge_id]
            return merge_id, True

        def merge_single_node(node: Node, node_order: int | None, id: int | None):
            if node in assignment:
                partitions_by_id[assignment[node]].remove_node(node)
            if id is None:
                assignment.pop(node)
            elif id not in partitions_by_id:
                assignment[node] = id
                assert node_order is not None
                partitions_by_id[id] = Partition(id=id, nodes=[node], node_orders=[node_order])
                partition_users[id] = set(node.users)
                for user_node in node.users:  # FX's _update_partition_map
                    target_id = assignment.get(user_node)
                    if target_id is not None:
                        partition_map[id].add(target_id)
                        partition_map[id].update(partition_map[target_id])
                nodes_of[id] = bit[node]
                for target_id in partition_map[id]:
                    reach_into[target_id] |= bit[node]
            else:  # only in the getitem reassignment below, after the last cycle check
                assignment[node] = id
                partitions_by_id[id].add_node(node, node_order)

        for node_order, node in enumerate(reversed(nodes)):
            merge_candidates: dict[int, None] = {}
            if self._is_node_supported(node) and node not in assignment:
                partition_id = next(new_partition_id)
                partitions_order[partition_id] = partition_id
                merge_single_node(node, node_order, partition_id)
                merge_candidates[partition_id] = None
            for partition_id, _ in sorted(partitions_order.items(), key=operator.itemgetter(1)):
                merge_candidates[partition_id] = None
            merge_candidates_list = list(merge_candidates.keys())
            if len(merge_candidates_list) > 1:
                self_id = merge_candidates_list[0]
                for other_id in merge_candidates_list[1:]:
                    self_id, _ = maybe_merge_partition(self_id, other_id)

        for partition in partitions_by_id.values():
            partition.nodes = dict(sorted(partition.nodes.items(), key=operator.itemgetter(1), reverse=True))

        # FX's post-processing: getitems join their producer's partition (torch 2.11: until
        # none moves, for getitems of getitems)
        while True:
            nodes_reassignment: dict[Node, int] = {}
            for node in nodes:
                is_tuple_output = True
                for user in node.users:
                    if user.op != "call_function" or _get_qualified_name(user.target) != "_operator.getitem":
                        is_tuple_output = False
                        break
                if is_tuple_output:
                    id = assignment.get(node)
                    for user in node.users:
                        if assignment.get(user) != id:
                            nodes_reassignment[user] = id
            if not nodes_reassignment:
                break
            for node, id in nodes_reassignment.items():
                merge_single_node(node, None, id)
            if not getitems_until_settled:
                break

        if not self.allows_single_node_partition:
            non_compute_ops = {"torch.ops.aten.view", "_operator.getitem"}.union(set(self.non_compute_ops))
            partitions_to_remove: list[int] = []
            for id, partition in partitions_by_id.items():
                compute_node_count = 0
                for node in partition.nodes:
                    if node.op == "call_function":
                        assert callable(node.target)
                        if _get_qualified_name(node.target) not in non_compute_ops:
                            compute_node_count += 1
                        if _get_qualified_name(node.target) in self.allowed_single_node_partition_ops:
                            compute_node_count += 1
                if compute_node_count <= 1:
                    partitions_to_remove.append(id)
            for id in partitions_to_remove:
                del partitions_by_id[id]

        return [partition for partition in partitions_by_id.values() if partition.size() > 0]
