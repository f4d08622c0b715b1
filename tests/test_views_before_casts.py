"""Two A/B switches on Hugging Face GPT-2's loss, read from the nvFuser definition of the loss
graph's forward in the backend's dump; the loss and gradients are right both ways.
NVFUSER_DTENSOR_INPUT_VIEWS_OUT (Note [Views before casts], Note [Views of region inputs stay
out]): the definition reshapes the upcast logits into rows with the switch off and takes them
as rows with it on, and the loss backward neither reshapes its input into rows nor its
gradient back before the bf16 cast. NVFUSER_DTENSOR_CAST_WITHOUT_SET (Note [Casts without a
set]): the upcast reads the fusion input only with the switch on."""

from __future__ import annotations

import re

import pytest

import nvfuser_dtensor_backend as nb

from helpers import assert_gpt2_step_right, compile_fn, tiny_bf16_gpt2


def _loss_region(dump_dir, graph: str = "forward", marker: str = "fd.ops.max(") -> tuple[str, str]:
    """The dumped definition of the loss region of ``graph`` (the one with ``marker``) and its
    nvFuser IR."""
    (loss,) = [t for t in (p.read_text() for p in dump_dir.glob(f"{graph}.*.py")) if marker in t]
    definition, ir = loss.split("# nvFuser IR:")
    return definition, ir


def _row_reshapes(dump_dir, vocab: int) -> int:
    """Reshapes into rows of ``vocab`` (or its padded width) in the loss forward's definition."""
    definition, _ = _loss_region(dump_dir)
    widths = re.findall(r"fd\.ops\.reshape\(tv\d+, new_shape=\[\w+, (\d+)\]\)", definition)
    return sum(int(w) >= vocab for w in widths)


@pytest.mark.parametrize("on", [False, True])
def test_gpt2_loss_reads_its_logits_as_rows(monkeypatch, tmp_path, on):
    from nvfuser_dtensor_backend import partition

    monkeypatch.setattr(partition, "INPUT_VIEWS_OUT", on)
    model, ours, ref, ids = tiny_bf16_gpt2()
    compiled = compile_fn(ours, pad_matmuls=True, dump_dir=str(tmp_path))
    got = compiled(input_ids=ids, labels=ids)
    assert _row_reshapes(tmp_path, 8201) == (0 if on else 1)
    assert_gpt2_step_right(got, model, ours, ref, ids)


@pytest.mark.parametrize("on", [False, True])
def test_gpt2_loss_upcasts_its_logits_where_they_come_in(monkeypatch, tmp_path, on):
    """Note [Casts without a set] (translators/elementwise.py): with
    NVFUSER_DTENSOR_CAST_WITHOUT_SET the loss forward's upcast of the bf16 logits reads the
    fusion input itself, not a set of it, so that nvFuser can recompute it in each segment; the
    loss and gradients are right both ways."""
    from nvfuser_dtensor_backend.translators import elementwise

    monkeypatch.setattr(elementwise, "CAST_WITHOUT_SET", on)
    nb.clear_cache()  # built definitions are cached by region, not by switch
    model, ours, ref, ids = tiny_bf16_gpt2()
    compiled = compile_fn(ours, pad_matmuls=True, dump_dir=str(tmp_path))
    got = compiled(input_ids=ids, labels=ids)
    _, ir = _loss_region(tmp_path)
    upcasts = re.findall(r"__bfloat2float\(T\d+_(\w)_", ir)
    assert ("g" in upcasts) == on, upcasts  # an upcast of a fusion input, not of its set
    assert_gpt2_step_right(got, model, ours, ref, ids)


@pytest.mark.parametrize("on", [False, True])
def test_gpt2_loss_backward_casts_its_gradient_before_the_view(monkeypatch, tmp_path, on):
    """Note [Views before casts]: the loss backward views its float gradient back to [batch,
    seq, vocab] and casts it to bf16; with NVFUSER_DTENSOR_INPUT_VIEWS_OUT the cast comes first
    and the view trails the region, and the saved logits come in as rows: no reshape of vocab
    wide rows is left in the backward's definition (two without the switch). The loss and
    gradients are right both ways."""
    from nvfuser_dtensor_backend import partition

    monkeypatch.setattr(partition, "INPUT_VIEWS_OUT", on)
    nb.clear_cache()  # a definition built by an earlier test is not dumped again
    model, ours, ref, ids = tiny_bf16_gpt2()
    compiled = compile_fn(ours, pad_matmuls=True, dump_dir=str(tmp_path))
    got = compiled(input_ids=ids, labels=ids)
    assert_gpt2_step_right(got, model, ours, ref, ids)  # runs the backward too
    definition, _ = _loss_region(tmp_path, "backward", "fd.ops.exp(")
    reshapes = re.findall(r"fd\.ops\.reshape\(tv\d+, new_shape=\[[^\]]*\b8201\]\)", definition)
    assert len(reshapes) == (0 if on else 2), reshapes
