"""A bounded run of the graph fuzzer (tools/fuzz.py) on CPU; longer runs: python -m tools.fuzz."""

import dataclasses

import pytest
import torch

import nvfuser_dtensor_backend as nb
from nvfuser_dtensor_backend.registry import TRANSLATORS
from tools import fuzz

CI_SEEDS = range(0, 60)


@pytest.mark.parametrize("chunk", range(0, len(CI_SEEDS), 20))
def test_fuzzed_programs_match_eager(chunk):
    problems = {s: fuzz.check_seed(s) for s in CI_SEEDS[chunk:chunk + 20]}
    assert not {s: p for s, p in problems.items() if p}


def test_programs_have_fusions_backward_and_half_types():
    programs = [fuzz.make_program(s) for s in CI_SEEDS]
    assert sum(p.backward for p in programs) >= 10
    assert {p.dtype for p in programs} == set(fuzz.FLOATS)
    assert {kind for p in programs for kind, *_ in p.steps} == {"unary", "binary", "reduce", "view", "cast"}


def test_fuzzer_catches_a_wrong_translator(monkeypatch):
    """The fuzzer can fail: a tanh translator that computes sin is found."""
    target = torch.ops.aten.tanh.default
    entry = TRANSLATORS[target]
    monkeypatch.setitem(TRANSLATORS, target, dataclasses.replace(entry, fn=lambda ctx, x: ctx.ops.sin(x)))
    nb.clear_cache()
    try:
        seeds = [s for s in range(200) if any(step[1] == "tanh" for step in fuzz.make_program(s).steps)][:5]
        assert any(fuzz.check_seed(s) for s in seeds), seeds
    finally:
        nb.clear_cache()
