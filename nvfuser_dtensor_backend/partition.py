"""Group supported aten nodes into fusion regions with FX's CapabilityBasedPartitioner
(its proposals found faster: Note [Partition proposals on bit masks])."""

from __future__ import annotations

import bisect
import collections
import logging
import operator
import os
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import fx
from torch.fx.passes.infra.partitioner import Partition
from torch.fx.passes.operator_support import OperatorSupportBase

from .fx_nodes import is_dtype_cast, is_random_op
from .options import env_flag
from .partition_proposal import Partitioner
from .registry import Translator, Unsupported, lookup, op_name

log = logging.getLogger("nvfuser_dtensor_backend")


class NvFuserSupport(OperatorSupportBase):
    """``is_node_supported`` is exactly "lookup() returned a Translator" (and, with
    ``random_ops=False``, the node draws no random numbers)."""

    def __init__(self, fuse_matmul: bool = False, on_cuda: bool = False, random_ops: bool = True):
        self.fuse_matmul = fuse_matmul
        self.on_cuda = on_cuda
        self.random_ops = random_ops
        self.unsupported: dict[fx.Node, str] = {}

    def is_node_supported(self, submodules, node: fx.Node) -> bool:
        entry = lookup(node, self.fuse_matmul)
        if isinstance(entry, Translator) and not self.random_ops and not _deterministic(node):
            entry = Unsupported(f"{node.target}: random numbers of a DTensor graph are drawn through DTensor "
                                "(its RNG tracker gives each shard numbers of its own)")
        if isinstance(entry, Translator):
            # A CPU value in a CUDA graph is host arithmetic on 0-dim tensors (T5's relative
            # position buckets): nvFuser takes CPU scalars as inputs, but its outputs live on
            # the GPU, so such a node stays in PyTorch and feeds regions as a CPU scalar.
            if not (self.on_cuda and _on_cpu(node.meta.get("val"))):
                return True
            entry = Unsupported(f"{node.target}: computes a CPU tensor in a CUDA graph")
        if node.op == "call_function":
            self.unsupported[node] = entry.reason
        return False


@dataclass
class PartitionReport:
    """What the partitioner decided for one aten graph."""

    regions: list[list[str]] = field(default_factory=list)  # op names per region
    unsupported: collections.Counter = field(default_factory=collections.Counter)  # reason -> count
    small: int = 0  # regions left to PyTorch for having too little compute

    def summary(self) -> str:
        lines = [f"{len(self.regions)} nvFuser region(s)"]
        for i, ops in enumerate(self.regions):
            counts = collections.Counter(op.split(".")[1] if op.startswith("aten.") else op for op in ops)
            lines.append(f"  region {i}: {len(ops)} ops ({', '.join(f'{k} x{v}' if v > 1 else k for k, v in counts.items())})")
        if self.small:
            lines.append(f"  {self.small} region(s) without compute left to PyTorch")
        for reason, n in self.unsupported.most_common():
            lines.append(f"  in PyTorch: {reason}" + (f" (x{n})" if n > 1 else ""))
        return "\n".join(lines)


def _on_cpu(value) -> bool:
    return any(isinstance(v, torch.Tensor) and v.device.type == "cpu"
               for v in (value if isinstance(value, (tuple, list)) else (value,)))


def _graph_on_cuda(gm: fx.GraphModule) -> bool:
    return any(isinstance(n.meta.get("val"), torch.Tensor) and n.meta["val"].is_cuda
               for n in gm.graph.nodes if n.op == "placeholder")


aten = torch.ops.aten

# Note [Data movement counted as compute]: the ops in MOVE_KERNELS count as compute, so that a
# region made only of them and views is one nvFuser kernel instead of PyTorch's copies (by
# default ``cat`` and ``_to_copy``; ``NVFUSER_DTENSOR_MOVE_KERNELS`` replaces the list, an A/B
# switch read at import, empty for none). Measured on one H100 (sessions 29 and 30, kernels per
# training step, benchmarks/results/session29 and session30):
# - ``cat``: ViT-S/16's backward stacks the q, k and v gradients and permutes them for the qkv
#   GEMM, PyTorch's ``CatArrayBatchedCopy`` and a copy: 5.04 -> 4.91 ms (inductor 4.58; 4.70
#   -> 4.58 on the H200 in session 15). GPT-2's backward stacks its qkv gradients the same
#   way: 5.77 -> 5.75 ms.
# - ``_to_copy``: BERT's eager attention (bert_dropout) casts its float32 context to bfloat16,
#   transposes it and makes it dense, a cast and a copy in PyTorch, once per layer in the
#   forward and again in the backward: 7.72 -> 7.63 ms, 8 launches fewer. T5: 14.82 ->
#   14.57 ms, 14 launches fewer. The zoo's bert_dropout and T5 training rows with it were
#   ok on the GPU (losses and gradients within tolerance of eager's; session 30, call 1).
# - ``constant_pad_nd`` stays out: GPT-2's pad of the logits' gradient alone took 0.97 ms in
#   nvFuser against PyTorch's 0.60 ms fill and copy (h200_profiles_switches, session 11).
def move_kernels(names: str) -> frozenset:
    """The aten ops named in ``names`` (comma-separated, as NVFUSER_DTENSOR_MOVE_KERNELS)."""
    return frozenset(getattr(aten, name).default for name in filter(None, names.split(",")))


MOVE_KERNELS = move_kernels(os.environ.get("NVFUSER_DTENSOR_MOVE_KERNELS", "cat,_to_copy"))


def _compute_nodes(nodes) -> int:
    count = 0
    for n in nodes:
        entry = lookup(n)
        if isinstance(entry, Translator) and (entry.compute or n.target in MOVE_KERNELS):
            count += 1
    return count


# Note [Views leave regions]
# A view computed inside a region and used only outside it would be written out by nvFuser
# as a new tensor (a transposed or broadcast copy), where PyTorch makes it for free. Such
# trailing views are moved out of their region; views feeding the region's own compute stay.
VIEW_OPS = frozenset(
    {
        aten.view.default,
        aten._unsafe_view.default,
        aten.reshape.default,
        aten.permute.default,
        aten.transpose.int,
        aten.t.default,
        aten.expand.default,
        aten.squeeze.dim,
        aten.squeeze.dims,
        aten.squeeze.default,
        aten.unsqueeze.default,
        aten.slice.Tensor,
        aten.select.int,
        aten.alias.default,
    }
)


# Ops whose outputs are views, each taken by a getitem: the pieces of a split (GPT-2's fused
# qkv projection split into q, k and v) are views of its input. Inside a region nvFuser
# returned them as aliases, which Note [Fusion outputs are fresh tensors] then copied: three
# strided copies per layer (0.19 ms of GPT-2's 1.67 ms inference step on an H100, where
# inductor passes the views). So a split whose pieces are used only outside leaves the region
# with them, as a view does.
SPLIT_OPS = frozenset({aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int})


def _is_view(node: fx.Node, p) -> bool:
    """A view op, a split (SPLIT_OPS), or a getitem of a split none of whose pieces is read
    inside ``p`` (the split and all its pieces leave together: a region that kept the split
    and lost a piece would have to return the split's list)."""
    if node.target is operator.getitem:
        source = node.args[0]
        return (isinstance(source, fx.Node) and source.target in SPLIT_OPS
                and all(user not in p.nodes for piece in source.users for user in piece.users))
    return node.target in VIEW_OPS or node.target in SPLIT_OPS


def _remove_while(p, leaves: Callable[[fx.Node], bool]) -> bool:
    """The nodes of ``p`` that ``leaves`` picks removed from it, again until it picks none (a
    removal can make another node leave); whether any was."""
    changed, removed = True, False
    while changed:
        changed = False
        for node in list(p.nodes):
            if leaves(node):
                p.remove_node(node)
                changed = removed = True
    return removed


def _trim_trailing_views(p) -> bool:
    # no user inside: removing it cannot create a cycle
    return _remove_while(p, lambda node: _is_view(node, p) and all(user not in p.nodes for user in node.users))


# Note [Views of region inputs stay out]
# A region that reads a value only through a view of it (an LM loss reading its logits as rows,
# ``view(logits, [-1, vocab])``; a layer reading its GEMM's output as [batch, seq, hidden])
# gave nvFuser a ``reshape`` of a fusion input. nvFuser recomputes an upcast of a fusion input
# in each segment that reads it (``privatizeUpcast``), but not an upcast *followed by* a
# reshape: GPT-2's loss forward read ``reshape(cast(logits))`` in its max and its exp-sum
# segments, and nvFuser wrote that float32 [tokens, vocabulary] tensor out between them (786 MB
# at 8 x 512 tokens on an H100, where inductor's loss allocates nothing beyond the logits;
# benchmarks/results/session39). So, with ``NVFUSER_DTENSOR_INPUT_VIEWS_OUT=1`` (an A/B switch,
# read at import), a ``view`` of a value from outside its region (``VIEWS_OF_INPUTS``; not a
# slice, which would move the data pointer off its alignment, nor a transpose or expand,
# whose strides nvFuser would then have to take) is made by PyTorch, for free, and the region
# takes the viewed value as its input (the loss's view of its upcast is first made a view of
# the logits, Note [Views before casts]). Removing such a node cannot make a cycle: it reads
# only a value from outside the region, and only the region reads it back.
# Only views that dtype casts alone read leave: every view of a region input out cost
# timm's ViT-S/16 training step twice its kernel time on an H100 (7.53 against 4.36 ms,
# session 42, not explained; its regions then took [batch, tokens, hidden] inputs, not
# reshapes of [rows, hidden] ones), and the loss needs only the view before its upcast.
INPUT_VIEWS_OUT = env_flag("NVFUSER_DTENSOR_INPUT_VIEWS_OUT")
VIEWS_OF_INPUTS = frozenset({aten.view.default, aten._unsafe_view.default})


def _only_casts_read(view: fx.Node) -> bool:
    """Every reader of ``view`` is a dtype cast or a view that only dtype casts read."""
    return all(is_dtype_cast(user) or (user.target in VIEWS_OF_INPUTS and _only_casts_read(user))
               for user in view.users)


def _trim_input_views(p) -> bool:
    """Views of values from outside ``p`` that only dtype casts read, chains of them included,
    moved out of it (Note [Views of region inputs stay out])."""
    return _remove_while(p, lambda node: node.target in VIEWS_OF_INPUTS
                         and not any(a in p.nodes for a in node.all_input_nodes)
                         and _only_casts_read(node))


def _copy_after(graph: fx.Graph, node: fx.Node, args, kwargs) -> fx.Node:
    """A copy of ``node`` (with ``args``/``kwargs``) outside any partition, right after it."""
    with graph.inserting_after(node):
        copy = graph.call_function(node.target, args, kwargs)
    copy.meta = dict(node.meta)
    return copy


# Note [Region outputs are not views]
# A region output must have exactly the strides aten recorded for it (Note [Output layout
# contract] in fusion.py). A compute node's value is dense, and nvFuser can be told its
# layout; a view's value (a transpose, a slice, an expand) generally is not dense, and no
# fusion output can have those strides. So a view inside a region whose value is also used
# outside it is replayed outside: a copy of the view node, outside the region, serves the
# outside users, and the region outputs the view's base instead. Repeated until no view
# has outside users (a chain of views moves out view by view); PyTorch then makes the
# views for free, with aten's strides, from a dense region output.
def _replay_views_outside(p, graph: fx.Graph) -> bool:
    changed, replayed = True, False
    while changed:
        changed = False
        for node in list(p.nodes):
            if node.target not in VIEW_OPS:
                continue
            outside = [user for user in node.users if user not in p.nodes]
            if not outside or len(outside) == len(node.users):
                continue  # only outside users: _trim_trailing_views moves the node itself out
            copy = _copy_after(graph, node, node.args, node.kwargs)
            for user in outside:
                user.replace_input_with(node, copy)
            changed = replayed = True
    return replayed


# Note [Input-free outputs]
# A value a region computes from no input at all (a causal mask from arange/full/compare)
# and that is also used outside the region is computed again outside, in PyTorch, for those
# users, so the region does not output it. Outputting such a value next to a reduction that
# reads it made nvFuser 0.2.36 fault on the H200 (an illegal memory access in the pre-norm
# block's masked softmax; standalone repro `parts_iota_softmax+mask` in
# tools/nvfuser_repros.py, docs/nvfuser_faults.md), and PyTorch makes it as cheaply.
# Random ops are never replayed (a replay would draw other numbers).
def _replay_input_free_outside(p, graph: fx.Graph) -> bool:
    free: set[fx.Node] = set()
    for node in graph.nodes:  # graph order is topological
        if node in p.nodes and node.op == "call_function" and _deterministic(node) and all(
                a in free for a in node.all_input_nodes):
            free.add(node)
    if free >= set(p.nodes):
        return False  # a region of input-free values only: nothing of it is read inside
    memo: dict[fx.Node, fx.Node] = {}

    def copy_out(node: fx.Node) -> fx.Node:  # the copies read copies, never the originals
        if node not in memo:
            memo[node] = _copy_after(graph, node, *fx.node.map_arg((node.args, node.kwargs), copy_out))
        return memo[node]

    replayed = False
    for node in [n for n in graph.nodes if n in free]:
        outside = [user for user in node.users if user not in p.nodes]
        if outside and isinstance(node.meta.get("val"), torch.Tensor):
            copy = copy_out(node)
            for user in outside:
                user.replace_input_with(node, copy)
            replayed = True
    return replayed


# Note [One matmul per region]
# With ``fuse_matmul``, nearly every node of a transformer is supported, so the partitioner
# proposed one region for most of a graph (BERT's training step: 3 regions). nvFuser
# segments a fusion at its matmuls anyway (they run as ATen calls in segments of their own),
# and its segmenter's time grows faster than the fusion: on the H200 such regions took
# minutes to compile, ViT-S/16's and T5's first calls more than 420 s. So a region is cut
# into pieces with at most one matmul (or attention) each: every matmul starts a piece, and
# every other node joins the latest piece among its inputs' (the work that consumes a
# matmul's result goes with it; what reads no matmul of the region stays in piece 0). The
# repeated layers of a model then give pieces with the same code, built and compiled once
# (Note [Fusion cache key]). Edges only go from a piece to a later one (a node's piece is at
# least its inputs'), so the pieces form no cycle, and each is convex: a node on a path
# between two nodes of piece i has a piece at least i (it descends from the first) and at
# most i (the second descends from it).


def _cut_into_pieces(p, order: dict[fx.Node, int], starts: Callable[[fx.Node, list], bool]) -> list:
    """``p`` cut into pieces, its nodes taken in graph order: a node joins the latest piece
    among its inputs' (piece 0 if none), unless ``starts(node, inputs)`` (``inputs``: its
    inputs in that piece) says it begins a new piece. Edges then only go to a later piece, so
    the pieces are convex and form no cycle (Note [One matmul per region])."""
    piece_of: dict[fx.Node, int] = {}
    pieces: list[list[fx.Node]] = [[]]
    for node in sorted(p.nodes, key=order.__getitem__):
        inputs = [a for a in node.all_input_nodes if a in piece_of]
        piece = max((piece_of[a] for a in inputs), default=0)
        if starts(node, [a for a in inputs if piece_of[a] == piece]):
            pieces.append([])
            piece = len(pieces) - 1
        piece_of[node] = piece
        pieces[piece].append(node)
    pieces = [piece for piece in pieces if piece]
    return [p] if len(pieces) == 1 else [Partition(nodes=piece) for piece in pieces]


def _split_at_gemms(p, order: dict[fx.Node, int]) -> list:
    """``p`` cut into pieces of at most one GEMM node (Note [One matmul per region])."""
    return _cut_into_pieces(p, order, lambda node, _: getattr(lookup(node, fuse_matmul=True), "gemm", False))


# Note [No reduction after a batch norm]
# nvFuser 0.2.36 writes out of bounds when one fusion holds a training batch norm (its
# statistics an outer ``welford`` over every dim but the channels, with per-channel outputs:
# the mean, rstd and updated running statistics) and a later reduction of its result over
# other dims: EfficientNet-B0's batch norm + SiLU + squeeze-excitation mean. Under
# compute-sanitizer (caching allocator off) every such region of the model wrote 4-byte floats
# at ``[blockIdx.x]`` of a per-channel output, thousands of them past its end, most likely
# from the kernel of the later reduction (one block per (image, channel) row): the labels got
# overwritten, and the first forward died with "an illegal memory access" or "an illegal
# instruction" (docs/nvfuser_faults.md item 9). Batch norm + SiLU without the SE mean ran
# clean, and so did the region with its rstd or its running statistics left out; a
# ``segment_set`` on the statistics or two-pass statistics instead of ``welford`` did not help
# (H100, session 20, ``scripts/gpu_bn_oob.sh``). So a reduction that reads a batch norm of its region
# (directly or through other nodes of the region) starts a piece of its own, and what reads it
# follows it, as with matmuls (Note [One matmul per region]: a node's piece is at least its
# inputs', so the pieces are convex and form no cycle). The SE mean then reads the SiLU's
# output, which the region outputs anyway for the SE multiply. A batch norm written by hand,
# ``var_mean`` (or ``var``) over the batch dim of an activation that keeps its channel dim
# (``_hand_written_batch_norm``), gives the same fusion and counts as one: two-pass
# statistics faulted as well. That case has not run on a GPU; the cut only keeps it out of
# the shape that faulted.
BATCH_NORMS = frozenset({aten._native_batch_norm_legit_functional.default})
REDUCTIONS = BATCH_NORMS | frozenset({
    aten.sum.dim_IntList, aten.sum.default, aten.mean.dim, aten.mean.default, aten.amax.default, aten.amin.default,
    aten.var.correction, aten.var_mean.correction, aten.prod.dim_int, aten.prod.default, aten.any.dim, aten.any.dims,
    aten.any.default, aten._softmax.default, aten._log_softmax.default, aten.native_layer_norm.default})


def _hand_written_batch_norm(node: fx.Node) -> bool:
    """``var_mean`` or ``var`` over dim 0 of a tensor of rank 3 or more that keeps dim 1 (Note
    [No reduction after a batch norm])."""
    if node.target not in (aten.var_mean.correction, aten.var.correction) or not node.args:
        return False
    val = node.args[0].meta.get("val") if isinstance(node.args[0], fx.Node) else None
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if not isinstance(val, torch.Tensor) or val.dim() < 3 or not dims:
        return False
    dims = {d % val.dim() for d in dims}
    return 0 in dims and 1 not in dims


def _batch_norm(node: fx.Node) -> bool:
    return node.target in BATCH_NORMS or _hand_written_batch_norm(node)


def _split_after_batch_norms(p, order: dict[fx.Node, int]) -> list:
    """``p`` cut so that no reduction follows a batch norm in its piece (Note [No reduction
    after a batch norm])."""
    batch_norms = set(filter(_batch_norm, p.nodes))
    if not batch_norms:
        return [p]
    after_bn: set[fx.Node] = set()  # nodes that read a batch norm of their own piece

    def starts(node, inputs) -> bool:
        if not any(a in after_bn or a in batch_norms for a in inputs):
            return False
        if node.target in REDUCTIONS:
            return True
        after_bn.add(node)
        return False

    return _cut_into_pieces(p, order, starts)


# Note [Unrelated parts of a region]
# FX's partitioner merges every two partitions it can without a cycle, so pieces that share
# nothing end up in one region: every batch norm's running-statistics update of ResNet-18's
# forward (137 nodes on the tiny model), every bias-gradient sum of ViT's backward. nvFuser
# segments such a fusion into a kernel per piece or group anyway, and on the H200 these were
# the slowest first calls of their models (14-19 s, benchmarks/results/h200_models_session18),
# while the same pieces cut apart repeat across layers and would share one definition and
# kernel (Note [Fusion cache key]). ``NVFUSER_DTENSOR_SPLIT_UNRELATED=1`` (an A/B switch, read
# at import) cuts each region into its connected parts: nodes joined by an edge inside the
# region or by an input they both read (read once by one kernel). Each part is convex, and so
# is any union of them: a path leaving a part reaches no other node of the region without
# leaving the region and coming back, which the partitioner's region never allows. Off until
# the H200 says whether first calls get shorter and what the extra launches cost (on an H100
# in session 19: ResNet-18's first call 105 s against 115 s, ViT-S/16's 28 s against 36 s,
# kernels the same, benchmarks/results/h100_session19). A part whose every input from inside
# the graph comes from one other region then joins that region (``_join_producers``): a
# batch norm's running-statistics cast joins the batch norm's region, where it is one more
# output of a kernel that runs anyway, instead of a region of its own. No cycle can appear:
# a path into the part enters it through one of its inputs, all in that region or graph
# inputs. The other parts become regions of their own, as before, except that a region's
# scalar parts that read only graph inputs stay together as one region (``_scalar_part``): a
# batch norm's ``num_batches_tracked + 1`` reads nothing of its batch norm, so it cannot join
# it, and as 20 regions of one scalar add each (tiny ResNet-18) they would cost ResNet-18 20
# launches for what one kernel does.
SPLIT_UNRELATED = env_flag("NVFUSER_DTENSOR_SPLIT_UNRELATED")


def _connected_parts(p) -> list:
    """``p`` cut into its connected parts (Note [Unrelated parts of a region])."""
    parent = {n: n for n in p.nodes}

    def find(n):
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    reader: dict[fx.Node, fx.Node] = {}  # an input from outside -> the first node reading it
    for node in p.nodes:
        for a in node.all_input_nodes:
            other = a if a in parent else reader.setdefault(a, node)
            parent[find(node)] = find(other)
    parts: dict[fx.Node, list] = {}
    for node in p.nodes:
        parts.setdefault(find(node), []).append(node)
    return [p] if len(parts) == 1 else [Partition(nodes=part) for part in parts.values()]


def _sole_other_owner(sources, owner: dict, i: int) -> int | None:
    """The one region other than ``i`` that holds every node of ``sources`` (graph inputs and
    attributes aside), or None: a part that reads only it may join it."""
    owners = {owner.get(a) for a in sources if a.op not in ("placeholder", "get_attr")}
    if len(owners) != 1 or None in owners or i in owners:
        return None
    return next(iter(owners))


def _join_producers(partitions: list) -> list:
    """Each region's connected parts that read from exactly one other region moved into it,
    then every region cut into its connected parts (Note [Unrelated parts of a region]).
    One move at a time, on the regions as they stand: each keeps the regions convex and
    free of cycles between them."""
    groups: list[dict] = [dict(p.nodes) for p in partitions]
    owner: dict[fx.Node, int] = {n: i for i, g in enumerate(groups) for n in g}
    for i in range(len(groups)):
        for part in _connected_parts(Partition(nodes=groups[i])):
            if len(part.nodes) == len(groups[i]):
                break  # what is left of the region is one part (or always was): it stays
            j = _sole_other_owner({a for n in part.nodes for a in n.all_input_nodes if a not in part.nodes}, owner, i)
            if j is None:
                continue
            for n in part.nodes:
                del groups[i][n]
                groups[j][n] = None
                owner[n] = j
    kept = []
    for g in filter(None, groups):
        scalars = []
        for part in _connected_parts(Partition(nodes=g)):
            if _scalar_part(part):
                scalars += part.nodes
            else:
                kept.append(part)
        kept += [Partition(nodes=scalars)] if scalars else []
    return kept


def _scalar_part(part) -> bool:
    """Every value of ``part`` is 0-d and it reads only graph inputs (Note [Unrelated parts of
    a region])."""
    return (all(isinstance(v := n.meta.get("val"), torch.Tensor) and v.dim() == 0 for n in part.nodes)
            and all(a in part.nodes or a.op in ("placeholder", "get_attr")
                    for n in part.nodes for a in n.all_input_nodes))


# Note [Parts of a region far apart]
# FX's partitioner merges unrelated parts across the whole graph (Note [Unrelated parts of a
# region]), and fuses a region in after its last output node, so a region runs where its last
# part runs, and PyTorch's kernels that do not wait for it run before it while the inputs of
# its earlier parts stay alive. T5's backward held the RMSNorm weight gradients of every layer
# in one region (68 ops in 15 parts on the tiny model; 10-17 s of its first call on an H100),
# ViT-S/16's the bias-gradient sums of all twelve layers. The full cut into connected parts
# (``NVFUSER_DTENSOR_SPLIT_UNRELATED``) also separates parts that run side by side and parts
# that could join the region they read, which costs launches. So, with
# ``NVFUSER_DTENSOR_SPLIT_FAR`` (read at import, on by default since session 33; ``=0`` is the A/B
# switch back), the trailing
# views of each region set aside (they leave it anyway, Note [Views leave regions]), a region's
# connected parts, in the order of their last nodes, stay together while every PyTorch kernel
# between them reads the earlier ones (directly or through views: it waits for them anyway),
# and a region starts where one does not. Then a piece that reads one other region only (graph
# inputs aside) joins it under the same rule, with the views outside every region between them
# (without those, the region would read a view of its own output: a cycle). Pieces are unions
# of connected parts, so each is convex and they form no cycle (that Note); a join moves a
# piece only into a region it reads. It runs before the cut at matmuls (Note [One matmul per
# region]), which no join may undo.
#
# Two kinds of piece join nothing. A piece of copies only (a ``clone`` saved for the backward)
# would make the region write one more output and save no launch of note; it was what the cut
# joined into EfficientNet-B0's group norm + SiLU regions in session 31's one run with the
# switch on by default, where ``test_group_norm_in_a_timm_model`` died of a segmentation fault
# in nvFuser's execute (that run also had 1 x 1 convolutions as matrix products, since
# excluded, so which of the two crashed it is not known).
# A piece with a reduction (a bias gradient's column sum) stays a region of its own: joined to
# the GELU backward or layer-norm backward that makes its input, nvFuser 0.2.36 schedules the
# pair as one slower reduction kernel instead of a pointwise or inner-persistent kernel and a
# column sum, so ViT-S/16's training kernels went from 4.46 to 4.77 ms and BERT's from 7.37 to
# 7.54 (H100, session 32, one process per arm, joins of both kinds still on). As nvFuser cut
# the big region into one kernel per sum anyway, a sum of its own costs no launch.
#
# Measured with those joins on (H100, session 31, training, our backend alone, each model in
# its own process, default / this), reserved MB: ViT-S/16 1610 / 1130, T5 3486 / 3294, BERT
# 2064 / 1920, Llama 1554 / 1506, GPT-2 2086 / 2086; first calls s: T5 54 / 46, ViT 23 / 21,
# Llama 32 / 33, GPT-2 18 / 21, BERT 26 / 28; every row right against eager. With the copy
# rule, every GPU test passed with the switch on (session 32, 442). With both rules (H100,
# session 33, ``benchmarks/results/session33``): every GPU test passed with it on (459), and,
# default then / this, training kernels alone ViT-S/16 4.50 / 4.40 ms (one process per arm),
# reserved MB ViT-S/16 1572 / 1072, BERT 2064 / 1680, Llama 1554 / 1506, T5 3486 / 3294, first
# calls s ViT-S/16 55 / 44, T5 109 / 84 (beside the GPU tests); the whole zoo then ran with it
# on, 26 of 26 rows right. So it is on by default.
SPLIT_FAR = env_flag("NVFUSER_DTENSOR_SPLIT_FAR", default=True)


def _reduces(piece) -> bool:
    return any(n.target in REDUCTIONS for n in piece)


def _free(node: fx.Node) -> bool:
    """A node PyTorch runs without a kernel: a view, a split or a getitem."""
    return node.target is operator.getitem or node.target in VIEW_OPS or node.target in SPLIT_OPS


def _split_far_parts(partitions: list, graph: fx.Graph) -> list:
    """Each region cut where PyTorch kernels that do not read its earlier parts lie between its
    parts, and parts that read one region only joined to it where none lie between (Note
    [Parts of a region far apart])."""
    supported = {n for p in partitions for n in p.nodes}  # a view a join takes along must be one
    for p in partitions:  # the views that leave their regions anyway (Note [Views leave regions])
        _trim_trailing_views(p)
    partitions = [p for p in partitions if p.nodes]
    inside = {n for p in partitions for n in p.nodes}
    position = {n: i for i, n in enumerate(graph.nodes)}
    kernels = [n for n in graph.nodes if n.op == "call_function" and n not in inside and not _free(n)]
    kernel_positions = [position[k] for k in kernels]

    def reads(node: fx.Node, piece: dict) -> bool:  # directly or through views and getitems
        return any(a in piece or (_free(a) and reads(a, piece)) for a in node.all_input_nodes)

    def may_hold(earlier: dict, later: dict) -> bool:
        """Whether one region may run both: every kernel between them waits for ``earlier``."""
        first, last = (max(map(position.__getitem__, piece)) for piece in (earlier, later))
        between = kernels[bisect.bisect_right(kernel_positions, first):bisect.bisect_left(kernel_positions, last)]
        return all(reads(k, earlier) for k in between)

    pieces: list[dict] = []
    for p in partitions:
        parts = sorted((dict(part.nodes) for part in _connected_parts(p)),
                       key=lambda part: max(map(position.__getitem__, part)))
        pieces.append(parts[0])
        for part in parts[1:]:
            if may_hold(pieces[-1], part):
                pieces[-1].update(part)
            else:
                pieces.append(part)
    owner = {n: i for i, piece in enumerate(pieces) for n in piece}

    def source(node: fx.Node, chain: list) -> fx.Node:  # through views and getitems outside every region
        while node not in owner and _free(node) and len(node.all_input_nodes) == 1:
            chain.append(node)
            node = node.all_input_nodes[0]
        return node

    for i, piece in enumerate(pieces):
        chain: list[fx.Node] = []  # the views between: they join too, or the region would read its own view
        sources = {source(a, chain) for n in piece for a in n.all_input_nodes if a not in piece}
        j = _sole_other_owner(sources, owner, i)
        if j is None or not _compute_nodes(piece) or _reduces(piece):
            continue  # a copy alone stays with PyTorch, a reduction a region of its own
        if supported.issuperset(chain) and may_hold(pieces[j], piece):
            pieces[j].update(dict.fromkeys(chain))
            pieces[j].update(piece)
            owner.update(dict.fromkeys([*chain, *piece], j))
            piece.clear()
    return [Partition(nodes=piece) for piece in pieces if piece]


def _deterministic(node: fx.Node) -> bool:
    return not is_random_op(node.target)


def partition(
    gm: fx.GraphModule, min_region_size: int = 1, fuse_matmul: bool = False, random_ops: bool = True,
    global_view: bool = False,
) -> tuple[fx.GraphModule, list[str], PartitionReport]:
    """Fuse supported nodes of ``gm`` into submodules named ``nvfuser_region_<i>``.

    Returns the rewritten graph module, the names of the region submodules and a report.
    ``random_ops=False`` leaves random ops to PyTorch (graphs with DTensor inputs; Note
    [Random numbers drawn by nvFuser]). ``global_view=True`` (the DTensor global view's
    graphs, which run the code outside regions on DTensors and whose fusions carry the
    relayouts that nvFuser turns into communication):
    - keeps input-free values as region outputs (Note [Input-free outputs]): a plain tensor
      made by a replayed factory op would not mix with DTensors;
    - keeps the matmuls of a region together (Note [One matmul per region]);
    - keeps regions whole where their parts lie far apart (Note [Parts of a region far
      apart]): that rule has not been tried on matmuls and relayouts inside.
    """
    local = not global_view
    support = NvFuserSupport(fuse_matmul, on_cuda=_graph_on_cuda(gm), random_ops=random_ops)
    partitioner = Partitioner(gm, support, allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    if local and SPLIT_FAR and not SPLIT_UNRELATED:  # before the cut at matmuls, which no join may undo
        partitions = _split_far_parts(partitions, gm.graph)
    if fuse_matmul and local:
        partitions = [piece for p in partitions for piece in _split_at_gemms(p, order)]
    if SPLIT_UNRELATED:
        partitions = _join_producers(partitions)
    # last, so that no join puts back together what it cuts
    partitions = [piece for p in partitions for piece in _split_after_batch_norms(p, order)]
    report = PartitionReport()
    kept = []
    for p in partitions:
        if local:
            _replay_input_free_outside(p, gm.graph)
        while _replay_views_outside(p, gm.graph) | _trim_trailing_views(p):
            pass
        if local and INPUT_VIEWS_OUT:
            _trim_input_views(p)
        if not any(user not in p.nodes for node in p.nodes for user in node.users):
            report.small += 1  # nothing of it is used outside it any more
        elif _compute_nodes(p.nodes) >= min_region_size:
            kept.append(p)
        else:
            report.small += 1
    for node, reason in support.unsupported.items():
        report.unsupported[reason] += 1
    if not kept:
        return gm, [], report
    fused = partitioner.fuse_partitions(kept, prefix="nvfuser_region_")
    names = []
    for node in fused.graph.nodes:
        if node.op == "call_module" and node.target.startswith("nvfuser_region_"):
            names.append(node.target)
            sub = getattr(fused, node.target)
            report.regions.append([op_name(n.target) for n in sub.graph.nodes if n.op == "call_function"])
    return fused, names, report
