"""NVFUSER_DTENSOR_INPUT_VIEWS_OUT on Hugging Face GPT-2's loss (Note [Views before casts],
Note [Views of region inputs stay out]): the nvFuser definition nvFuser built for the loss
graph's forward, read from the backend's dump, reshapes the upcast logits into rows with the
switch off and takes them as rows with it on; the loss and gradients are right both ways."""

from __future__ import annotations

import copy
import re

import pytest
import torch

from helpers import DEVICE, assert_no_worse_than_eager


def _row_reshapes(dump_dir, vocab: int) -> int:
    """Reshapes into rows of ``vocab`` (or its padded width) in the loss forward's definition."""
    texts = [p.read_text() for p in dump_dir.glob("forward.*.py")]
    (loss,) = [t for t in texts if "fd.ops.max(" in t]
    definition = loss.split("# nvFuser IR:")[0]
    widths = re.findall(r"fd\.ops\.reshape\(tv\d+, new_shape=\[\w+, (\d+)\]\)", definition)
    return sum(int(w) >= vocab for w in widths)


@pytest.mark.parametrize("on", [False, True])
def test_gpt2_loss_reads_its_logits_as_rows(monkeypatch, tmp_path, on):
    transformers = pytest.importorskip("transformers")
    from nvfuser_dtensor_backend import partition

    monkeypatch.setattr(partition, "INPUT_VIEWS_OUT", on)
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=8201, n_embd=32, n_layer=1, n_head=2, n_positions=32,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(cfg).to(DEVICE, torch.bfloat16)
    ours, ref = copy.deepcopy(model), copy.deepcopy(model).double()
    ids = torch.randint(0, 8201, (2, 16), device=DEVICE)
    torch._dynamo.reset()
    compiled = torch.compile(ours, backend="nvfuser_dtensor", options={"pad_matmuls": True, "dump_dir": str(tmp_path)})
    got = compiled(input_ids=ids, labels=ids)
    assert _row_reshapes(tmp_path, 8201) == (0 if on else 1)
    expected, exact = model(input_ids=ids, labels=ids), ref(input_ids=ids, labels=ids)
    for out in (got, expected, exact):
        out.loss.backward()
    assert_no_worse_than_eager(got.loss.detach(), expected.loss.detach(), exact.loss.detach(), slack=1e-3, msg="loss")
    for (name, p), q, r in zip(model.named_parameters(), ours.parameters(), ref.parameters()):
        assert_no_worse_than_eager(q.grad, p.grad, r.grad, slack=1e-3, msg=name)
