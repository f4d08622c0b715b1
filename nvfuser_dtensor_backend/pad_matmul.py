"""``options.pad_matmuls``: 16-bit matmuls with a dim that is not a multiple of 8 are padded.

Note [Padded matmuls]
cuBLAS picks its fast tensor-core kernels only when the leading dims of a GEMM's operands
and output are 16-byte multiples (8 elements of bf16/fp16). A vocabulary of 50257 (GPT-2),
50265 (RoBERTa, BART) or 30522 (BERT) makes the LM head's three GEMMs (forward, input
gradient, weight gradient) fall to ``cutlass ... align1`` kernels: on the H200 they took
7.9 ms of GPT-2's 14.3 ms of kernels per training step, in eager and in our backend alike,
while inductor, which pads such GEMMs (``torch/_inductor/fx_passes/pad_mm.py``), spent
4.7 ms on the whole step (``scripts/gpu_top_kernels.py gpt2``,
benchmarks/results/h200_cuda_graphs). So, before partitioning, each ``mm``/``addmm`` of
bf16/fp16 operands with an unaligned M, K or N is rewritten as the same product of operands
padded with zeros to multiples of 8 (M only where it is a leading dim: a column-major first
operand), sliced back to its shape:
- zeros added along K add nothing to the product; rows added along M and columns along N
  are sliced off, so the result is exact;
- an output sliced along N stays a view of the padded product (row stride a multiple of 8)
  when every view op after it takes that layout (checked on its recorded value: GPT-2's
  ``view`` of the logits to [batch, seq, vocab] does). Otherwise it is copied to a dense
  tensor, as aten's graph recorded. On the H200 that copy of GPT-2's logits took 0.47 ms
  of a 6.3 ms step (benchmarks/results/h200_profiles_regions); the views hand the user
  strided logits, as inductor's padded matmuls do, and our CUDA graphs copy them out whole.
  One sliced along M only is dense as it is;
- a bias over the columns added to a product sliced along N, through views that keep its
  columns (BART's and Marian's ``lm_head(x) + final_logits_bias``), is added by the padded
  product itself (``addmm``, the bias padded with zeros): the sum is then a view of padded
  rows too, and the loss's reductions read them (Note [Reductions over padded rows]).
  Without it the add wrote the logits dense, in rows of an odd 50265 elements that no
  kernel after it could vectorize. cuBLAS rounds the product and the bias once, where aten
  rounded the product, then the sum;
- an operand that is a transpose (``t``/``permute``) of a value is padded before the
  transpose, and every pad of a value is made once per graph: the LM head's output
  gradient feeds both the input and the weight gradients, and is padded once;
- the other readers of a padded value (the bias gradient's column sum of the LM head's
  output gradient, next to the two GEMMs) read the padded tensor's slice instead, a view of
  the same values in rows of a multiple of 8: the value is then written once, padded, not
  also dense in odd rows for them (RoBERTa's backward wrote its logits' gradient twice,
  412 MB each in bf16 at 8 x 512 tokens). Views and graph outputs keep the value as aten
  recorded it;
- ``"auto"`` (default) pads on CUDA, GEMMs of at least ``MIN_MACS`` multiply-adds (small
  ones cost more to pad than they gain); ``True`` pads every unaligned 16-bit GEMM on any
  device (the CPU tests); ``False`` never.
"""

from __future__ import annotations

import logging

import torch
from torch import fx
from torch._guards import detect_fake_mode

from .fx_nodes import RESHAPES, call_with_val, rewritten
from .fx_nodes import val as _val
from .partition import VIEW_OPS

log = logging.getLogger("nvfuser_dtensor_backend")
aten = torch.ops.aten

ALIGN = 8  # elements of a 16-bit dtype in 16 bytes
DTYPES = (torch.bfloat16, torch.float16)
MIN_MACS = 1 << 27
_TRANSPOSES = (aten.t.default, aten.permute.default, aten.transpose.int)


def _padded(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _static(t) -> bool:
    return isinstance(t, torch.Tensor) and all(isinstance(s, int) for s in t.shape)


def _is_2d_transpose(node: fx.Node) -> bool:
    if node.op != "call_function" or node.target not in _TRANSPOSES or _val(node.args[0]) is None:
        return False
    if node.target is aten.permute.default:
        return list(node.args[1]) == [1, 0]
    return _val(node.args[0]).dim() == 2


class _Rewriter:
    def __init__(self, graph: fx.Graph, fake_mode):
        self.graph, self.fake_mode = graph, fake_mode
        self.pads: dict[tuple, fx.Node] = {}

    def call(self, target, args, kwargs=None):
        return call_with_val(self.graph, self.fake_mode, target, args, kwargs)

    def _after(self, node: fx.Node) -> fx.Node:
        """Where a node computed from ``node`` goes: right after it, after the placeholders."""
        if node.op != "placeholder":
            return node
        return [n for n in self.graph.nodes if n.op == "placeholder"][-1]

    def pad(self, node: fx.Node, extra: tuple[int, int]) -> fx.Node:
        """``node`` (2-D) with ``extra`` zero rows and columns; a transpose is padded before it."""
        if extra == (0, 0):
            return node
        key = (node, extra)
        if key not in self.pads:
            if _is_2d_transpose(node):
                inner = self.pad(node.args[0], extra[::-1])
                with self.graph.inserting_after(inner):
                    self.pads[key] = self.call(aten.t.default, [inner])
            else:
                with self.graph.inserting_after(self._after(node)):
                    self.pads[key] = self.call(aten.constant_pad_nd.default, [node, [0, extra[1], 0, extra[0]], 0.0])
        return self.pads[key]


def _dims(node: fx.Node):
    """(a, b, bias, M, K, N) of an mm/addmm node, or None if it is not one to pad."""
    if node.op != "call_function" or node.target not in (aten.mm.default, aten.addmm.default):
        return None
    if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
        return None
    bias, a, b = (None, *node.args[:2]) if node.target is aten.mm.default else node.args[:3]
    va, vb = _val(a), _val(b)
    if not (_static(va) and _static(vb)) or va.dtype not in DTYPES or vb.dtype != va.dtype:
        return None
    if bias is not None and not (_static(_val(bias)) and _val(bias).dim() in (1, 2)):
        return None
    (m, k), n = va.shape, vb.shape[1]
    # M is a leading dim only of a column-major ``a`` (a transpose: the weight gradient's
    # ``grad.t() @ x``); K and N always are one (of ``a`` or ``b``, and of the output).
    m_leads = va.stride(0) == 1 and va.stride(1) != 1
    return a, b, bias, m, k, n, m_leads


def _column_bias(node: fx.Node, n: int) -> tuple[fx.Node, fx.Node, fx.Node] | None:
    """(the add, the bias, the last view before the add) when the product ``node`` (``n``
    columns) goes only through reshapes that keep its columns into one ``add`` of a bias of
    ``n`` elements over the columns, else None (Note [Padded matmuls])."""
    last = node
    while len(last.users) == 1:
        user = next(iter(last.users))
        if user.op != "call_function" or user.target not in RESHAPES or _val(user).shape[-1] != n:
            break
        last = user
    if len(last.users) != 1:
        return None
    add = next(iter(last.users))
    if add.op != "call_function" or add.target is not aten.add.Tensor or add.kwargs or len(add.args) != 2:
        return None
    bias = add.args[1] if add.args[0] is last else add.args[0]
    vb, vadd = _val(bias), _val(add)
    if (bias is last or not isinstance(bias, fx.Node) or not isinstance(vb, torch.Tensor) or not _static(vb)
            or vb.dtype != _val(node).dtype or vb.numel() != n or vb.shape[-1] != n
            or tuple(vadd.shape) != tuple(_val(last).shape) or vadd.dtype != vb.dtype):
        return None
    return add, bias, last


def _restrided_views(node: fx.Node, value, fake_mode) -> dict | None:
    """The values of the view ops under ``node`` (transitively) once ``node``'s value is
    ``value`` (a strided slice), or None if one of them cannot view it."""
    values, todo = {node: value}, [node]
    while todo:
        for user in todo.pop().users:
            if user.op != "call_function" or user.target not in VIEW_OPS:  # views must take the strided layout
                continue
            args = fx.node.map_arg(user.args, lambda a: values.get(a, _val(a)))
            try:
                with fake_mode:
                    values[user] = user.target(*args, **user.kwargs)
            except Exception:  # noqa: BLE001 - aten's view raises RuntimeError or ValueError: keep the copy
                return None
            todo.append(user)
    del values[node]
    return values


def _hand_over(rw: "_Rewriter", node: fx.Node, out: fx.Node) -> None:
    """``node``'s users take ``out`` (a strided view of a padded product) instead, the views
    after it re-strided, or a dense copy of it where one of them needs the layout aten
    recorded; ``node`` goes."""
    views = _restrided_views(node, _val(out), rw.fake_mode)
    if views is None:
        with rw.graph.inserting_after(out):
            out = rw.call(aten.clone.default, [out], {"memory_format": torch.contiguous_format})
    else:
        for view, value in views.items():
            view.meta["val"] = value
    node.replace_all_uses_with(out)
    rw.graph.erase_node(node)


def _read_padded(rw: "_Rewriter") -> None:
    """The readers of each padded value other than its pad, views and the graph's output
    read a slice of the pad instead (Note [Padded matmuls])."""
    pads = set(rw.pads.values())
    for (node, (rows, cols)), pad in rw.pads.items():
        if pad.target is not aten.constant_pad_nd.default or pad.args[0] is not node or not pad.users:
            continue
        # (another pad of the same value, for another GEMM, keeps reading the value)
        readers = [u for u in node.users if u not in pads and u.op == "call_function" and u.target not in VIEW_OPS]
        if not readers:
            continue
        m, n = _val(node).shape
        with rw.graph.inserting_after(pad):
            view = rw.call(aten.slice.Tensor, [pad, 0, 0, m]) if rows else pad
            if cols:
                view = rw.call(aten.slice.Tensor, [view, 1, 0, n])
        for user in readers:
            user.replace_input_with(node, view)


def pad_matmuls(gm: fx.GraphModule, mode) -> int:
    """Rewrite the unaligned 16-bit GEMMs of ``gm`` (Note [Padded matmuls]); returns how many."""
    graph = gm.graph
    candidates = []
    for node in graph.nodes:
        dims = _dims(node)
        if dims is None:
            continue
        _, _, _, m, k, n, m_leads = dims
        if (not m_leads or m == _padded(m)) and k == _padded(k) and n == _padded(n):
            continue
        if mode == "auto" and (not _val(node).is_cuda or m * k * n < MIN_MACS):
            continue
        candidates.append((node, dims))
    if not candidates:
        return 0
    fake_mode = detect_fake_mode([_val(candidates[0][0])])
    if fake_mode is None:
        return 0
    rw = _Rewriter(graph, fake_mode)
    for node, (a, b, bias, m, k, n, m_leads) in candidates:
        mp, kp, np_ = _padded(m) if m_leads else m, _padded(k), _padded(n)
        a2, b2 = rw.pad(a, (mp - m, kp - k)), rw.pad(b, (kp - k, np_ - n))
        folded = _column_bias(node, n) if bias is None and np_ != n else None
        if folded is not None:
            bias = folded[1]
            with graph.inserting_before(node):
                bias = rw.call(aten.view.default, [bias, [n]])
        with graph.inserting_before(node):
            if bias is None:
                out = rw.call(aten.mm.default, [a2, b2])
            else:
                vbias = _val(bias)
                rows = mp - m if vbias.dim() == 2 and vbias.shape[0] == m and m != 1 else 0
                cols = np_ - n if vbias.shape[-1] == n and n != 1 else 0
                if vbias.dim() == 1:
                    bias2 = rw.call(aten.constant_pad_nd.default, [bias, [0, cols], 0.0]) if cols else bias
                else:
                    bias2 = rw.pad(bias, (rows, cols))
                out = rw.call(aten.addmm.default, [bias2, a2, b2])
            if mp != m:
                out = rw.call(aten.slice.Tensor, [out, 0, 0, m])
            if np_ != n:
                out = rw.call(aten.slice.Tensor, [out, 1, 0, n])
        if np_ != n:
            _hand_over(rw, node, out)
        else:
            node.replace_all_uses_with(out)
            graph.erase_node(node)
        if folded is not None:  # the add's users take the views of the biased product
            add, _, last = folded
            _hand_over(rw, add, last)
    rewritten(gm)  # transposes that only fed a replaced matmul go
    _read_padded(rw)
    log.info("nvfuser_dtensor: padded %d matmul(s) to multiples of %d (Note [Padded matmuls])", len(candidates), ALIGN)
    return len(candidates)
