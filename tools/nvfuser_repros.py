"""Standalone nvFuser repros of faults met on real models (docs/nvfuser_faults.md).

    python -m tools.nvfuser_repros            # every case, each in its own process (GPU)
    python -m tools.nvfuser_repros --case NAME

Each case builds a FusionDefinition directly with ``nvfuser_direct`` (no backend code) and
runs it on CUDA; a fault poisons the CUDA context, so the driver runs each case in a fresh
process and reports its exit status and last error line.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import torch


def _qkv_slice(b=8, s=1024, d=1024, which=2, contiguous=False):
    """``v`` of ``qkv.split(d, -1)``: shape [b, s, d], strides [s*3d, 3d, 1], offset which*d."""
    qkv = torch.randn(b, s, 3 * d, device="cuda", dtype=torch.bfloat16)
    v = qkv[..., which * d:(which + 1) * d]
    return v.contiguous() if contiguous else v


def _define_heads(fd, DataType, strided: bool, pin_layout: bool, b=8, s=1024, h=16, dh=64):
    """The region of a pre-norm block that splits a fused-qkv slice into heads:
    ``v.view(b, s, h, dh).permute(0, 2, 1, 3)`` made contiguous (aten's clone)."""
    contiguity = [True, False, True] if strided else [True, True, True]
    tv0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=contiguity, dtype=DataType.BFloat16, is_cpu=False)
    tv2 = fd.ops.reshape(tv0, new_shape=[b, s, h, dh])
    tv6 = fd.ops.permute(tv2, dims=[0, 2, 1, 3])
    tv13 = fd.ops.cast(tv6, dtype=DataType.BFloat16)
    out = fd.ops.stride_order(tv13, stride_order=[3, 2, 1, 0]) if pin_layout else tv13
    fd.add_output(out)
    return tv0


def _define_block_region(fd, DataType):
    """The whole region as the backend defined it (forward.nvfuser_region_3 of the block)."""
    tv0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, False, True], dtype=DataType.BFloat16, is_cpu=False)
    tv1 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.BFloat16, is_cpu=False)
    tv2 = fd.ops.reshape(tv0, new_shape=[8, 1024, 16, 64])
    tv6 = fd.ops.permute(tv2, dims=[0, 2, 1, 3])
    tv13 = fd.ops.cast(tv6, dtype=DataType.BFloat16)
    tv28 = fd.ops.stride_order(tv13, stride_order=[3, 2, 1, 0])
    tv5 = fd.ops.iota(length=1024, start=0, step=1)
    tv10 = fd.ops.broadcast(tv5, is_broadcast_dim=[True, False])
    tv11 = fd.ops.broadcast(tv5, is_broadcast_dim=[False, True])
    tv12 = fd.ops.sub(tv10, tv11)
    tv14 = fd.ops.ge(tv12, 1)
    tv4 = fd.ops.full(shape=[1024, 1024], fill_value=True, dtype=DataType.Bool)
    tv15 = fd.ops.logical_and(tv14, tv4)
    tv29 = fd.ops.stride_order(tv15, stride_order=[1, 0])
    tv16 = fd.ops.broadcast(tv15, is_broadcast_dim=[True, True, False, False])
    tv3 = fd.ops.reshape(tv1, new_shape=[8, 16, 1024, 1024])
    tv7 = fd.ops.cast(tv3, dtype=DataType.Float)
    tv8 = fd.ops.div(tv7, 8.0)
    tv9 = fd.ops.cast(tv8, dtype=DataType.BFloat16)
    tv17 = fd.ops.where(tv16, float("-inf"), tv9)
    tv18 = fd.ops.cast(tv17, dtype=DataType.Float)
    tv20 = fd.ops.max(tv18, dims=[3])
    tv21 = fd.ops.broadcast(tv20, is_broadcast_dim=[False, False, False, True])
    tv23 = fd.ops.exp(fd.ops.sub(tv18, tv21))
    tv24 = fd.ops.sum(tv23, dims=[3], dtype=DataType.Float)
    tv25 = fd.ops.broadcast(tv24, is_broadcast_dim=[False, False, False, True])
    tv27 = fd.ops.cast(fd.ops.div(tv23, tv25), dtype=DataType.BFloat16)
    tv30 = fd.ops.stride_order(tv27, stride_order=[3, 2, 1, 0])
    fd.add_output(tv28)
    fd.add_output(tv29)
    fd.add_output(tv30)


def _define_block_parts(fd, DataType, mask: str, outputs: str):
    """Pieces of the block region, for bisecting the fault: the causal mask made in the
    fusion (``iota``) or given as an input (``input``), and which outputs are kept
    (``softmax``, ``softmax+mask``)."""
    tv1 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.BFloat16, is_cpu=False)
    if mask == "iota":
        tv5 = fd.ops.iota(length=1024, start=0, step=1)
        tv12 = fd.ops.sub(fd.ops.broadcast(tv5, is_broadcast_dim=[True, False]),
                          fd.ops.broadcast(tv5, is_broadcast_dim=[False, True]))
        tv15 = fd.ops.logical_and(fd.ops.ge(tv12, 1), fd.ops.full(shape=[1024, 1024], fill_value=True,
                                                                  dtype=DataType.Bool))
    else:
        tv15 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Bool, is_cpu=False)
    tv16 = fd.ops.broadcast(tv15, is_broadcast_dim=[True, True, False, False])
    tv3 = fd.ops.reshape(tv1, new_shape=[8, 16, 1024, 1024])
    tv9 = fd.ops.cast(fd.ops.div(fd.ops.cast(tv3, dtype=DataType.Float), 8.0), dtype=DataType.BFloat16)
    tv18 = fd.ops.cast(fd.ops.where(tv16, float("-inf"), tv9), dtype=DataType.Float)
    tv21 = fd.ops.broadcast(fd.ops.max(tv18, dims=[3]), is_broadcast_dim=[False, False, False, True])
    tv23 = fd.ops.exp(fd.ops.sub(tv18, tv21))
    tv25 = fd.ops.broadcast(fd.ops.sum(tv23, dims=[3], dtype=DataType.Float), is_broadcast_dim=[False, False, False, True])
    fd.add_output(fd.ops.cast(fd.ops.div(tv23, tv25), dtype=DataType.BFloat16))
    if outputs == "softmax+mask":
        fd.add_output(tv15)


def _define_qwen2_loss_backward(fd, DataType, b, s, v):
    """The backend's definition of Qwen2's loss backward region (tiny dump, 661e4d9 with the
    >65536-class guard lifted): one-hot scatter as iota-where, log_softmax backward, the add of
    the logits' other gradient. Literal shape [b, s, v] in place of the tiny one."""
    tv0 = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float, is_cpu=True)
    tv1 = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float, is_cpu=True)
    tv2 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float, is_cpu=False)
    tv3 = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Int, is_cpu=False)
    tv4 = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Bool, is_cpu=False)
    tv5 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.BFloat16, is_cpu=False)
    tv27 = fd.ops.cast(tv5, dtype=DataType.Float)
    c1 = fd.ops.size(tv2, dim=1)
    tv10 = fd.ops.iota(length=c1, start=0, step=1)
    tv11 = fd.ops.broadcast(tv10, is_broadcast_dim=[True, False])
    tv12 = fd.ops.eq(tv11, tv3)
    c0 = fd.ops.size(tv2, dim=0)
    c13 = fd.define_scalar(0.00000, dtype=DataType.Float)
    tv7 = fd.ops.full(shape=[c0, c1], fill_value=c13, dtype=DataType.Float)
    tv13 = fd.ops.where(tv12, -1.00000, tv7)
    tv6 = fd.ops.div(tv0, tv1)
    tv14 = fd.ops.broadcast(tv6, is_broadcast_dim=[True, True])
    c15 = fd.define_scalar(0.00000, dtype=DataType.Float)
    tv8 = fd.ops.full(shape=[], fill_value=c15, dtype=DataType.Float)
    tv15 = fd.ops.broadcast(tv8, is_broadcast_dim=[True, True])
    tv16 = fd.ops.where(tv4, tv14, tv15)
    tv18 = fd.ops.mul(tv13, tv16)
    tv9 = fd.ops.cast(tv2, dtype=DataType.Float)
    tv17 = fd.ops.cast(tv9, dtype=DataType.Float)
    tv19 = fd.ops.exp(tv17)
    tv20 = fd.ops.sum(tv18, dims=[1], dtype=DataType.Float)
    tv21 = fd.ops.broadcast(tv20, is_broadcast_dim=[False, True])
    tv22 = fd.ops.mul(tv19, tv21)
    tv23 = fd.ops.sub(tv18, tv22)
    tv24 = fd.ops.reshape(tv23, new_shape=[b, s, v])
    tv25 = fd.ops.cast(tv24, dtype=DataType.Float)
    tv26 = fd.ops.cast(tv25, dtype=DataType.BFloat16)
    tv28 = fd.ops.cast(tv26, dtype=DataType.Float)
    tv29 = fd.ops.add(tv27, tv28)
    tv30 = fd.ops.cast(tv29, dtype=DataType.BFloat16)
    tv31 = fd.ops.stride_order(tv30, stride_order=[])
    fd.add_output(tv31)


def _define_qwen2_loss_forward_masked_sum(fd, DataType, b, s, v):
    """Qwen2's forward loss region as 69d1dac defined it (dumped from tiny Qwen2 at 69d1dac,
    literal sizes made [b, s, v]): log_softmax, the shifted labels (pad, slice), and the
    one-class gather as a masked sum over an iota of the classes (reverted at 661e4d9).
    Outputs: log_softmax, the ignore mask, the count, the clamped labels, the mean loss."""
    tv0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16, is_cpu=False)
    tv1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Int, is_cpu=False)
    tv2 = fd.ops.reshape(tv0, new_shape=[b, s, v])
    tv6 = fd.ops.cast(tv2, dtype=DataType.BFloat16)
    tv7 = fd.ops.cast(tv6, dtype=DataType.Float)
    tv9 = fd.ops.reshape(tv7, new_shape=[b * s, v])
    tv11 = fd.ops.cast(tv9, dtype=DataType.Float)
    tv12 = fd.ops.max(tv11, dims=[1])
    tv13 = fd.ops.broadcast(tv12, is_broadcast_dim=[False, True])
    tv14 = fd.ops.sub(tv9, tv13)
    tv15 = fd.ops.exp(tv14)
    tv16 = fd.ops.sum(tv15, dims=[1], dtype=DataType.Float)
    tv17 = fd.ops.broadcast(tv16, is_broadcast_dim=[False, True])
    tv18 = fd.ops.log(tv17)
    tv19 = fd.ops.sub(tv14, tv18)
    tv45 = fd.ops.stride_order(tv19, stride_order=[])
    tv3 = fd.ops.pad(tv1, pad_widths=[0, 1, 0, 0], value=-100)
    c4 = fd.ops.size(tv1, dim=1)
    c21 = fd.ops.add(c4, 1)
    c3 = fd.ops.size(tv3, dim=0)
    tv8 = fd.ops.slice(tv3, start_indices=[0, 1], end_indices=[c3, c21], strides=[1, 1], manual_normalization=True)
    tv10 = fd.ops.cast(tv8, dtype=DataType.Int)
    tv4 = fd.ops.full(shape=[], fill_value=0, dtype=DataType.Int)
    tv31 = fd.ops.broadcast(tv4, is_broadcast_dim=[True, True])
    tv33 = fd.ops.iota(length=v, start=0, step=1)
    tv34 = fd.ops.broadcast(tv33, is_broadcast_dim=[True, False])
    tv23 = fd.ops.broadcast(tv4, is_broadcast_dim=[True])
    c26 = fd.define_scalar(0.00000, dtype=DataType.Float)
    tv5 = fd.ops.full(shape=[], fill_value=c26, dtype=DataType.Float)
    tv41 = fd.ops.broadcast(tv5, is_broadcast_dim=[True])
    c144 = fd.ops.mul(c3, c4)
    tv20 = fd.ops.reshape(tv10, new_shape=[c144])
    tv22 = fd.ops.broadcast(tv20, is_broadcast_dim=[False, True])
    tv27 = fd.ops.ne(tv22, -100)
    tv46 = fd.ops.stride_order(tv27, stride_order=[])
    tv32 = fd.ops.where(tv27, tv22, tv31)
    tv47 = fd.ops.stride_order(tv32, stride_order=[])
    tv21 = fd.ops.ne(tv20, -100)
    tv24 = fd.ops.where(tv21, tv20, tv23)
    tv28 = fd.ops.broadcast(tv24, is_broadcast_dim=[False, True])
    tv35 = fd.ops.eq(tv34, tv28)
    tv36 = fd.ops.where(tv35, tv19, 0.00000)
    tv37 = fd.ops.sum(tv36, dims=[1], dtype=DataType.Float)
    tv38 = fd.ops.broadcast(tv37, is_broadcast_dim=[False, True])
    tv39 = fd.ops.squeeze(tv38, dims=[1])
    tv40 = fd.ops.neg(tv39)
    tv42 = fd.ops.where(tv21, tv40, tv41)
    tv43 = fd.ops.sum(tv42, dims=[0], dtype=DataType.Float)
    tv25 = fd.ops.cast(tv21, dtype=DataType.Int)
    tv26 = fd.ops.sum(tv25, dims=[0], dtype=DataType.Int)
    tv29 = fd.ops.cast(tv26, dtype=DataType.Int)
    tv30 = fd.ops.cast(tv29, dtype=DataType.Float)
    tv44 = fd.ops.div(tv43, tv30)
    fd.add_output(tv45)
    fd.add_output(tv46)
    fd.add_output(tv30)
    fd.add_output(tv47)
    fd.add_output(tv44)


def _define_convnext_layer_scale(fd, DataType, g_channels_last: bool, outputs: str, pin: bool):
    """The backward region of a ConvNeXt block's layer scale as the backend defined it
    (docs/nvfuser_faults.md item 8): ``add = div + g`` (the residual's two gradients, ``g``
    from cuDNN in channels_last), ``add * gamma`` moved to NHWC for the MLP's Linear backward.
    outputs: "both", "add" or "nhwc"; pin: the outputs' stride_order (Note [Output layout contract])."""
    tv0 = fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=[True] * 4, dtype=DataType.BFloat16, is_cpu=False)
    tv1 = fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=[True] * 4, dtype=DataType.BFloat16, is_cpu=False,
                           **({"stride_order": [3, 0, 2, 1]} if g_channels_last else {}))
    tv2 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.BFloat16, is_cpu=False)
    tv6 = fd.ops.cast(fd.ops.add(fd.ops.cast(tv0, dtype=DataType.Float), fd.ops.cast(tv1, dtype=DataType.Float)),
                      dtype=DataType.BFloat16)
    tv16 = fd.ops.stride_order(tv6, stride_order=[3, 2, 1, 0]) if pin else tv6
    tv9 = fd.ops.broadcast(tv2, is_broadcast_dim=[True, False, True, True])
    tv12 = fd.ops.mul(fd.ops.cast(tv6, dtype=DataType.Float), fd.ops.cast(tv9, dtype=DataType.Float))
    tv14 = fd.ops.permute(fd.ops.cast(tv12, dtype=DataType.BFloat16), dims=[0, 2, 3, 1])
    tv17 = fd.ops.stride_order(tv14, stride_order=[3, 2, 1, 0]) if pin else tv14
    if outputs in ("both", "add"):
        fd.add_output(tv16)
    if outputs in ("both", "nhwc"):
        fd.add_output(tv17)


def _convnext_layer_scale(name, FusionDefinition, DataType):
    """convnext_layer_scale[_N_C_HW][_contiguous][_add|_nhwc][_free]"""
    n, c, hw = 32, 768, 7
    parts = name.split("_")[3:]
    if parts and parts[0].isdigit():
        n, c, hw = (int(x) for x in parts[:3])
        parts = parts[3:]
    outputs = "add" if "add" in parts else "nhwc" if "nhwc" in parts else "both"
    channels_last = "contiguous" not in parts
    with FusionDefinition() as fd:
        _define_convnext_layer_scale(fd, DataType, channels_last, outputs, pin="free" not in parts)
    div = torch.randn(n, c, hw, hw, device="cuda", dtype=torch.bfloat16)
    g = torch.randn(n, c, hw, hw, device="cuda", dtype=torch.bfloat16)
    if channels_last:
        g = g.contiguous(memory_format=torch.channels_last)
    gamma = torch.randn(c, device="cuda", dtype=torch.bfloat16)
    outs = fd.execute([div, g, gamma])
    torch.cuda.synchronize()
    add = div + g
    refs = {"add": add, "nhwc": (add * gamma.view(1, -1, 1, 1)).permute(0, 2, 3, 1)}
    names = ["add", "nhwc"] if outputs == "both" else [outputs]
    report = []
    for k, o in zip(names, outs):
        wrong = ((o.float() - refs[k].float()).abs() > 0.02 * refs[k].float().abs() + 1e-2)
        report.append(f"{k}: max error {(o.float() - refs[k].float()).abs().max().item():.3g}, "
                      f"{int(wrong.sum())} of {wrong.numel()} wrong, strides {o.stride()}")
    print(name, "|", "; ".join(report))


def _efficientnet_bn_se_mean(name, FusionDefinition, DataType):
    """docs/nvfuser_faults.md item 9: EfficientNet-B0's batch norm (training) + SiLU + SE mean
    region at [32, 144, 28, 28], as nvFuser printed the backend's definition (session-19
    recording, row 15). Run it under ``PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer
    --tool memcheck``: the kernel of the SE mean writes per-channel floats at [blockIdx.x],
    far past their end; with the caching allocator on, the writes land unseen in its segments.
    ``_no_mean`` leaves the SE mean's output out, ``_no_rstd`` the rstd output."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks/results/h100_session19/regions_efficientnet_b0.jsonl"
    text = json.loads(path.read_text().splitlines()[15])["text"]
    drop = {"_no_mean": "    fd.add_output(tv47)\n", "_no_rstd": "    fd.add_output(tv43)\n"}.get(name.removeprefix("efficientnet_bn_se_mean"), "")
    namespace = {"DataType": DataType, "FusionDefinition": FusionDefinition}
    exec(compile(text.replace(drop, "") if drop else text, "<efficientnet_bn_se_mean>", "exec"), namespace)  # noqa: S102
    with FusionDefinition() as fd:
        namespace["nvfuser_fusion"](fd)
    x = torch.randn(32, 144, 28, 28, device="cuda", dtype=torch.bfloat16)
    w, b, rm = (torch.randn(144, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    rv = torch.rand(144, device="cuda", dtype=torch.bfloat16) + 0.5
    outs = fd.execute([x, w, b, rm, rv])
    torch.cuda.synchronize()
    ref = torch.nn.functional.batch_norm(x.float(), rm.float().clone(), rv.float().clone(), w.float(), b.float(), training=True)
    print(name, "batch norm max error", (outs[0].float() - ref).abs().max().item(), "outputs", len(outs))


def case(name: str) -> None:
    from nvfuser_direct import DataType, FusionDefinition

    if name.startswith("efficientnet_bn_se_mean"):
        _efficientnet_bn_se_mean(name, FusionDefinition, DataType)
    elif name.startswith("heads_"):
        strided = "contiguous" not in name
        pin = "pinned" in name
        with FusionDefinition() as fd:
            _define_heads(fd, DataType, strided, pin)
        v = _qkv_slice(contiguous=not strided)
        (out,) = fd.execute([v])
        torch.cuda.synchronize()
        ref = v.view(8, 1024, 16, 64).permute(0, 2, 1, 3)
        print(name, "max error", (out.float() - ref.float()).abs().max().item(), "strides", out.stride())
    elif name.startswith("block_region"):
        with FusionDefinition() as fd:
            _define_block_region(fd, DataType)
        v = _qkv_slice(contiguous=name.endswith("contiguous"))
        scores = torch.randn(128, 1024, 1024, device="cuda", dtype=torch.bfloat16)
        outs = fd.execute([v, scores])
        torch.cuda.synchronize()
        ref = v.view(8, 1024, 16, 64).permute(0, 2, 1, 3)
        print(name, "max error", (outs[0].float() - ref.float()).abs().max().item())
    elif name.startswith("parts_"):
        _, mask, outputs = name.split("_", 2)
        with FusionDefinition() as fd:
            _define_block_parts(fd, DataType, mask, outputs)
        scores = torch.randn(128, 1024, 1024, device="cuda", dtype=torch.bfloat16)
        causal = torch.ones(1024, 1024, dtype=torch.bool, device="cuda").triu(1)
        outs = fd.execute([scores] + ([causal] if mask == "input" else []))
        torch.cuda.synchronize()
        ref = (scores.view(8, 16, 1024, 1024).float() / 8).masked_fill(causal, float("-inf")).softmax(-1)
        print(name, "max error", (outs[0].float() - ref).abs().max().item())
    elif name.startswith("expand_reshape"):
        # Llama's GQA repeat_kv consumed in the fusion: kv[:, :, None].expand(2, 2, 4, 32, 16)
        # .reshape(2, 8, 32, 16) * 2, and the clone of the expand as a second output.
        # "_materialized": a where with an all-true condition first (Note [Expanded
        # broadcasts are materialized]).
        with FusionDefinition() as fd:
            tv0 = fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=[True] * 4, dtype=DataType.Float, is_cpu=False)
            sizes = [fd.ops.size(tv0, dim=d) for d in range(4)]
            shape = sizes[:2] + [4] + sizes[2:]
            tv = fd.ops.expand(fd.ops.broadcast(tv0, is_broadcast_dim=[False, False, True, False, False]), shape=shape)
            if name.endswith("materialized"):
                tv = fd.ops.where(fd.ops.full(shape=shape, fill_value=True, dtype=DataType.Bool), tv, tv)
            clone = fd.ops.cast(tv, dtype=DataType.Float)
            fd.add_output(fd.ops.stride_order(clone, stride_order=[4, 3, 2, 1, 0]))
            fd.add_output(fd.ops.mul(fd.ops.reshape(clone, new_shape=[2, 8, 32, 16]), 2.0))
        kv = torch.randn(2, 2, 32, 16, device="cuda")
        clone, rep2 = fd.execute([kv])
        torch.cuda.synchronize()
        ref = kv[:, :, None].expand(2, 2, 4, 32, 16)
        print(name, "clone max error", (clone - ref).abs().max().item(), "strides", clone.stride(),
              "| reshape*2 max error", (rep2 - ref.reshape(2, 8, 32, 16) * 2).abs().max().item())
    elif name.startswith("qwen2_loss_backward"):
        # docs/nvfuser_faults.md item 6: Qwen2's training step faulted ("unspecified launch
        # failure") once this region ran in nvFuser at its 151936 classes; "_32000" is Llama's width.
        b, s = 8, 512
        v = 32000 if name.endswith("32000") else 151936
        with FusionDefinition() as fd:
            _define_qwen2_loss_backward(fd, DataType, b, s, v)
        logp = torch.randn(b * s, v, device="cuda").log_softmax(-1)
        labels = torch.randint(0, v, (b * s, 1), device="cuda")
        keep = torch.rand(b * s, 1, device="cuda") > 0.1
        other = torch.randn(b, s, v, device="cuda", dtype=torch.bfloat16)
        grad_out, total = torch.tensor(1.0), torch.tensor(float(keep.sum()))
        (out,) = fd.execute([grad_out, total, logp, labels, keep, other])
        torch.cuda.synchronize()
        one_hot = torch.zeros_like(logp).scatter(1, labels, -1.0) * torch.where(keep, grad_out / total, 0.0).cuda()
        ref = one_hot - logp.exp() * one_hot.sum(1, keepdim=True)
        ref = (other.float() + ref.view(b, s, v).bfloat16().float()).bfloat16()
        print(name, "max error", (out.float() - ref.float()).abs().max().item())
    elif name.startswith("convnext_layer_scale"):
        _convnext_layer_scale(name, FusionDefinition, DataType)
    elif name.startswith("qwen2_loss_forward_masked_sum"):
        # docs/nvfuser_faults.md item 6: the other region that first ran in nvFuser at 151936
        # classes when Qwen2's step faulted at 69d1dac.
        b, s = 8, 512
        v = 32000 if name.endswith("32000") else 151936
        with FusionDefinition() as fd:
            _define_qwen2_loss_forward_masked_sum(fd, DataType, b, s, v)
        logits = torch.randn(b * s, v, device="cuda", dtype=torch.bfloat16)
        labels = torch.randint(0, v, (b, s), device="cuda")
        labels[:, :5] = -100
        outs = fd.execute([logits, labels])
        torch.cuda.synchronize()
        shifted = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:].reshape(-1)
        ref = torch.nn.functional.cross_entropy(logits.float(), shifted, ignore_index=-100)
        print(name, "loss", outs[-1].item(), "error", abs(outs[-1].item() - ref.item()),
              "| log_softmax max error", (outs[0] - logits.float().log_softmax(-1)).abs().max().item())
    else:
        raise SystemExit(f"unknown case {name}")


CASES = ["efficientnet_bn_se_mean", "efficientnet_bn_se_mean_no_mean", "efficientnet_bn_se_mean_no_rstd", "convnext_layer_scale", "convnext_layer_scale_32_384_14", "convnext_layer_scale_contiguous", "convnext_layer_scale_add",
         "convnext_layer_scale_nhwc", "convnext_layer_scale_free", "convnext_layer_scale_8_768_7", "convnext_layer_scale_32_768_8",
         "expand_reshape", "expand_reshape_materialized", "qwen2_loss_backward_32000", "qwen2_loss_backward",
         "qwen2_loss_forward_masked_sum_32000", "qwen2_loss_forward_masked_sum", "block_region", "parts_iota_softmax", "parts_iota_softmax+mask", "parts_input_softmax",
         "parts_input_softmax+mask", "block_region_contiguous", "heads_strided_pinned", "heads_strided_free", "heads_contiguous_pinned", "heads_contiguous_free"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--case")
    args = p.parse_args(argv)
    if args.case:
        case(args.case)
        return 0
    for name in CASES:
        r = subprocess.run([sys.executable, "-m", "tools.nvfuser_repros", "--case", name],
                           capture_output=True, text=True, timeout=300)
        lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
        err = next((ln for ln in lines if "CUDA error" in ln or "Error" in ln), lines[-1] if lines else "")
        print(f"{name}: exit {r.returncode}: {err[:300]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
