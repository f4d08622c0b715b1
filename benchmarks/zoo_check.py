"""Accuracy harness of the model zoo: one training or inference step, compiled against eager.

Used by ``tests/test_zoo.py`` and ``benchmarks/models.py``.

- ``run_step``: train = ``model.train()``, forward, loss, backward (gradients zeroed first,
  returned); infer = ``model.eval()`` and forward under ``torch.no_grad()``.
- ``after_replays``: the step again once the timed steps ran (a CUDA-graph replay) and a
  gradient accumulation over two micro-batches, judged the same way.
- ``compare``: a compiled deep copy against eager on the same inputs and initial weights.
  ``loss_err`` = |loss - loss_ref| / |loss_ref| (infer: ||out - ref|| / ||ref|| of the main
  output, the logits); ``grad_err`` = max over parameters of ||g - g_ref|| / ||all g_ref||,
  the norm of all reference gradients concatenated (a gradient that is mathematically zero
  is only rounding noise, so it is not measured against itself).
- A step outside those tolerances gets a second look against a float64 run of the same
  model (``fp64_step``), PyTorch's own rule for its dynamo accuracy runs
  (``torch._dynamo.utils.same`` with ``fp64_ref``): it is still right when its error from
  float64 is at most ``FP64_MULTIPLIER`` x eager's own error from float64 plus a tenth of the
  tolerance. Some low-precision steps are ill-conditioned (a bf16 ResNet's batch-norm
  backward: inductor and nvFuser both differ from eager bf16 by 0.17-0.25 of the gradient
  norm), and eager bf16 is then no truth to be within 5% of.
- Dropout-on models (training): the compiled backend draws its masks from another RNG stream
  than eager, so an elementwise comparison says nothing. They are compared statistically:
  the loss within ``DROPOUT_LOSS_TOL`` of eager's, ``grad_err`` no larger than
  ``DROPOUT_GRAD_FACTOR`` x eager's own seed-to-seed difference (eager with two seeds), and
  the compiled model must give different logits for two seeds (dropout really happened).
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from dataclasses import dataclass

import torch

# Relative tolerances per dtype: fp32 tight; bf16/fp16 loose enough for inductor too, whose
# errors the benchmark records next to ours (benchmarks/models.py).
TOLERANCES = {
    torch.float32: dict(loss=1e-4, grad=1e-3),
    torch.float64: dict(loss=1e-8, grad=1e-7),
    torch.bfloat16: dict(loss=3e-2, grad=5e-2),
    torch.float16: dict(loss=1e-2, grad=3e-2),
}
FP64_MULTIPLIER = 2.0  # torch._dynamo.utils.same: res_error <= multiplier * ref_error + tol / 10
DROPOUT_LOSS_TOL = 0.05
DROPOUT_GRAD_FACTOR = 2.0


@dataclass
class Step:
    loss: torch.Tensor  # detached scalar
    output: torch.Tensor  # detached main output (logits)
    grads: dict  # parameter name -> gradient (None when unused); empty for infer


def main_output(out) -> torch.Tensor:
    """The tensor an inference step is judged on: the logits of an HF output, or the output."""
    if isinstance(out, torch.Tensor):
        return out
    logits = getattr(out, "logits", None)
    if logits is None:
        raise TypeError(f"no main output in {type(out).__name__}")
    return logits


def _module(model) -> torch.nn.Module:
    return getattr(model, "_orig_mod", model)  # the module under torch.compile's wrapper


def run_step(model, inputs, loss_fn, train: bool, collect: bool = True, micro_batches: int = 1) -> Step | None:
    """One step; ``inputs`` is a zoo ``Batch``. ``collect=False`` (timing) returns None.
    ``micro_batches`` > 1 (training): gradient accumulation, the same batch that many times
    into ``.grad`` (set to None first); ``Step.grads`` holds the mean, one batch's gradients.
    With CUDA graphs the later micro-batches' forwards replay while ``.grad`` holds what the
    first one's backward produced (Note [Memory a replay writes])."""
    # A new step for CUDA graphs (cudagraph trees: inductor's reduce-overhead, our cuda_graphs):
    # outputs of the last replay may be overwritten from here on, so a Step keeps copies.
    torch.compiler.cudagraph_mark_step_begin()
    if train:
        model.train()
        model.zero_grad(set_to_none=True)
        for _ in range(micro_batches):
            out = model(**inputs.kwargs)
            loss = loss_fn(out, inputs)
            loss.backward()
        if not collect:
            return None
        grads = {n: (p.grad.detach() / micro_batches if micro_batches > 1 else p.grad.detach().clone())
                 if p.grad is not None else None for n, p in _module(model).named_parameters()}
        return Step(loss.detach().clone(), main_output(out).detach().clone(), grads)
    model.eval()
    with torch.no_grad():
        out = model(**inputs.kwargs)
        if not collect:
            return None
        return Step(loss_fn(out, inputs).detach().clone(), main_output(out).detach().clone(), {})


def compile_model(model: torch.nn.Module, backend: str, options: dict | None = None):
    """A compiled deep copy (``backend="eager"``: the plain copy); dynamo is reset first."""
    copied = copy.deepcopy(model)
    if backend == "eager":
        return copied
    torch._dynamo.reset()
    if backend.startswith("nvfuser_dtensor"):
        import nvfuser_dtensor_backend as nb

        nb.clear_reports()
    from .run import compile_kwargs

    return torch.compile(copied, **compile_kwargs(backend, dict(options) if options else None))


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    ref = b.double().norm().item()
    return (a.double() - b.double()).norm().item() / (ref if ref else 1.0)


def errors(step: Step, ref: Step, train: bool) -> tuple[float, float | None]:
    """(loss_err, grad_err) of ``step`` against ``ref``; infer: (output error, None)."""
    if not train:
        return _rel(step.output, ref.output), None
    loss_ref = ref.loss.double().item()
    loss_err = abs(step.loss.double().item() - loss_ref) / (abs(loss_ref) or 1.0)
    total = math.sqrt(sum(g.double().norm().item() ** 2 for g in ref.grads.values() if g is not None)) or 1.0
    grad_err = 0.0
    for name, g_ref in ref.grads.items():
        g = step.grads.get(name)
        if g is None and g_ref is None:
            continue
        if g is None or g_ref is None:  # one side has no gradient: it counts as zeros
            g = torch.zeros_like(g_ref) if g is None else g
            g_ref = torch.zeros_like(g) if g_ref is None else g_ref
        if not torch.isfinite(g).all():
            return loss_err, math.inf
        grad_err = max(grad_err, (g.double() - g_ref.double()).norm().item() / total)
    if not math.isfinite(step.loss.double().item()):
        loss_err = math.inf
    return loss_err, grad_err


def after_replays(compiled, zm, batch, train: bool, ref: Step, first: dict, accumulate: bool) -> dict:
    """The step again after the timed ones (with CUDA graphs, a replay), and in training a
    gradient accumulation over two micro-batches (``run_step``), against eager's ``ref``:
    ``replay_loss_err``, ``replay_grad_err``, ``accum_grad_err`` and ``replay_wrong`` (what
    went wrong, or None). ``first`` is ``compare``'s result for the first step. The same
    kernels on the same inputs should repeat its errors, so the bound is the larger of the
    tolerance and twice the first step's error plus a tenth of the tolerance (a first step
    judged right against float64 may be outside the tolerance from eager)."""
    tol = first["tol"]

    def bound(kind: str) -> float:
        err = first["loss_err" if kind == "loss" else "grad_err"] or 0.0
        return max(tol[kind], 2 * err + tol[kind] / 10)

    step = seeded_step(compiled, zm, batch, train, 0)
    loss_err, grad_err = errors(step, ref, train)
    res = dict(replay_loss_err=loss_err, replay_grad_err=grad_err)
    wrong = []
    if not loss_err <= bound("loss") or (grad_err is not None and not grad_err <= bound("grad")):
        wrong.append(f"replayed step: loss_err {loss_err:.3g}, grad_err {grad_err if grad_err is None else f'{grad_err:.3g}'}")
    if train and accumulate:
        _, accum = errors(seeded_step(compiled, zm, batch, True, 0, micro_batches=2), ref, True)
        res["accum_grad_err"] = accum
        if not accum <= bound("grad"):
            wrong.append(f"gradient accumulation: grad_err {accum:.3g}")
    res["replay_wrong"] = "; ".join(wrong) or None
    return res


def fallback_warnings(caught) -> list[str]:
    from nvfuser_dtensor_backend.region import NvFuserFallbackWarning

    return [str(w.message) for w in caught if issubclass(w.category, NvFuserFallbackWarning)]


def seeded_step(model, zm, batch, train: bool, seed: int, collect: bool = True, micro_batches: int = 1) -> Step | None:
    torch.manual_seed(seed)  # the RNG stream of dropout
    return run_step(model, batch, zm.loss_fn, train, collect, micro_batches)


def fp64_step(zm, batch, train: bool, seed: int) -> Step:
    """Eager on a float64 copy of the model, floating inputs cast to float64."""
    model = copy.deepcopy(zm.model).double()
    kwargs = {k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
              for k, v in batch.kwargs.items()}
    return seeded_step(model, zm, type(batch)(kwargs, batch.labels), train, seed)


def fp64_judgement(step: Step, ref: Step, ref64: Step, train: bool, tol: dict) -> dict:
    """Errors of ``step`` and of eager's ``ref`` from the float64 ``ref64``; ``ok`` by FP64_MULTIPLIER."""
    loss, grad = errors(step, ref64, train)
    eager_loss, eager_grad = errors(ref, ref64, train)
    ok = loss <= FP64_MULTIPLIER * eager_loss + tol["loss"] / 10 and (
        grad is None or grad <= FP64_MULTIPLIER * eager_grad + tol["grad"] / 10)
    return dict(ok=ok, loss_err=loss, grad_err=grad, eager_loss_err=eager_loss, eager_grad_err=eager_grad)


def judgement(step: Step, ref: Step, errs: tuple, zm, batch, train: bool, seed: int, dtype,
              fp64_cache: dict) -> dict:
    """Whether ``step``, ``errs`` (loss, gradient) away from eager's ``ref``, is right: ``ok``,
    ``tol`` (the dtype's tolerances) and, where it misses them, ``fp64`` (fp64_judgement
    against a float64 run, which ``fp64_cache`` keeps)."""
    loss_err, grad_err = errs
    tol = TOLERANCES.get(dtype, TOLERANCES[torch.bfloat16])
    verdict = dict(ok=loss_err <= tol["loss"] and (grad_err is None or grad_err <= tol["grad"]), tol=tol)
    if not verdict["ok"] and dtype != torch.float64:
        if "step" not in fp64_cache:
            fp64_cache["step"] = fp64_step(zm, batch, train, seed)
        verdict["fp64"] = fp64_judgement(step, ref, fp64_cache["step"], train, tol)
        verdict["ok"] = verdict["fp64"]["ok"]
    return verdict


def compare(zm, backend: str, train: bool, options: dict | None = None, ref: Step | None = None,
            seed: int = 0, fp64_cache: dict | None = None) -> dict:
    """Compile a copy of ``zm.model`` with ``backend`` and judge one step against eager.

    Returns a dict: ``status`` ("ok" or "wrong"), ``loss_err``, ``grad_err``, ``tol``,
    ``first_call_s``, ``fallbacks`` (messages of NvFuserFallbackWarning), ``compiled`` (the
    compiled model, for timing), ``ref`` (eager's step, reusable) and for dropout models in
    training ``noise`` (eager's seed-to-seed grad_err), ``seed_losses`` and ``dropout_happened``
    (the compiled model's logits differ between two seeds), and ``fp64`` (fp64_judgement) when
    the step was outside the tolerances; ``fp64_cache`` (a dict) keeps the float64 step for the
    next backend.
    """
    batch = zm.make_inputs(seed)
    dtype = next(zm.model.parameters()).dtype
    if ref is None:
        ref = seeded_step(copy.deepcopy(zm.model), zm, batch, train, seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = compile_model(zm.model, backend, options)
        t0 = time.perf_counter()
        step = seeded_step(compiled, zm, batch, train, seed)
        if step.output.is_cuda:
            torch.cuda.synchronize()
        first_call_s = time.perf_counter() - t0
        loss_err, grad_err = errors(step, ref, train)
        result = dict(loss_err=loss_err, grad_err=grad_err, first_call_s=first_call_s, compiled=compiled, ref=ref)
        if zm.dropout and train:
            other = seeded_step(copy.deepcopy(zm.model), zm, batch, train, seed + 1)
            noise = errors(other, ref, train)[1]
            again = seeded_step(compiled, zm, batch, train, seed + 1)
            losses = (step.loss.item(), again.loss.item())
            # The logits, not the losses: a bf16 loss (steps of 0.03 near 6) can round to the same value.
            dropped = not torch.equal(step.output, again.output)
            ok = loss_err <= DROPOUT_LOSS_TOL and grad_err <= DROPOUT_GRAD_FACTOR * noise and dropped
            result.update(noise=noise, seed_losses=losses, dropout_happened=dropped,
                          tol=dict(loss=DROPOUT_LOSS_TOL, grad=DROPOUT_GRAD_FACTOR * noise))
        else:
            verdict = judgement(step, ref, (loss_err, grad_err), zm, batch, train, seed, dtype,
                                {} if fp64_cache is None else fp64_cache)
            ok = verdict.pop("ok")
            result.update(verdict)
    result["fallbacks"] = fallback_warnings(caught)
    result["status"] = "ok" if ok else "wrong"
    return result


def step_parser(description: str):
    """The arguments of the one-model GPU scripts (scripts/gpu_verify_regions.py,
    scripts/gpu_bisect_regions.py): model, mode, size, dtype and backend options."""
    import argparse

    from . import zoo

    p = argparse.ArgumentParser(description=description)
    p.add_argument("model", choices=zoo.NAMES)
    p.add_argument("--mode", default="train", choices=("train", "infer"))
    p.add_argument("--size", default="real", choices=("real", "tiny"))
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--options", default="{}", help="more backend options, as JSON")
    return p

