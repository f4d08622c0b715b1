"""Packaging: the dynamo entry point, a missing nvFuser, and option validation.

The first two tests run in a fresh interpreter so that nothing this test session imported
(the package itself, nvfuser_direct) hides a packaging mistake.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

import nvfuser_dtensor_backend as nb
from nvfuser_dtensor_backend._nvfuser import INSTALL_HINT


def _run(code: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"subprocess failed ({proc.returncode})\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def test_backend_registered_by_entry_point():
    """``backend="nvfuser_dtensor"`` works without importing the package first."""
    proc = _run(
        """
        import sys
        import torch

        assert "nvfuser_dtensor_backend" not in sys.modules
        assert "nvfuser_dtensor" in torch._dynamo.list_backends(), torch._dynamo.list_backends()

        def fn(x, y):
            return torch.nn.functional.gelu(x * y + 1.0, approximate="tanh")

        x, y = torch.randn(8, 16), torch.randn(16)
        out = torch.compile(fn, backend="nvfuser_dtensor")(x, y)
        torch.testing.assert_close(out, fn(x, y))
        assert "nvfuser_dtensor_backend" in sys.modules  # dynamo loaded it through the entry point
        print("OK")
        """
    )
    assert proc.stdout.strip().endswith("OK")


def test_importing_the_package_does_not_import_dtensor():
    _run(
        """
        import sys
        import torch
        import nvfuser_dtensor_backend

        assert "torch.distributed.tensor" not in sys.modules, "the package imported DTensor"
        """
    )


@pytest.mark.parametrize("first", ["", "import nvfuser_dtensor_backend"], ids=["dynamo_loads_it", "package_first"])
def test_dtensor_strategies_are_registered_before_dynamo_traces(first):
    """``torch.compile(backend="nvfuser_dtensor")`` registers our DTensor sharding strategies
    (the CPU flash attention's) when dynamo looks the backend up, before it traces a frame;
    they came after dynamo's trace before, which broke the graph at that op. Also when the
    package was imported before DTensor (a script's import order, another test module under
    pytest-xdist): the SP block then broke into four graphs."""
    proc = _run(
        f"""
        {first}
        import torch
        from torch.distributed.tensor import DTensor

        strategies = DTensor._op_dispatcher.sharding_propagator.op_strategy_funcs
        op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
        assert op not in strategies
        torch.compile(lambda x: x + 1, backend="nvfuser_dtensor")  # dynamo looks the backend up here
        assert op in strategies
        print("OK")
        """
    )
    assert proc.stdout.strip().endswith("OK")


def test_missing_nvfuser_gives_install_hint():
    """Import works without nvFuser; compiling raises an error carrying the pip command."""
    proc = _run(
        f"""
        import sys

        class _NoNvFuser:
            def find_spec(self, name, path=None, target=None):
                if name == "nvfuser_direct" or name.startswith("nvfuser_direct."):
                    raise ImportError("nvfuser_direct hidden by test_packaging")
                return None

        sys.modules.pop("nvfuser_direct", None)
        sys.meta_path.insert(0, _NoNvFuser())

        import torch
        import nvfuser_dtensor_backend as nb

        assert not nb.nvfuser_available()
        try:
            torch.compile(lambda x: x.sin() + 1, backend="nvfuser_dtensor")(torch.randn(4))
        except Exception as e:
            msg = str(e)
            assert {INSTALL_HINT.splitlines()[1].strip()!r} in msg, msg
            assert "pip install" in msg, msg
            print("RAISED", type(e).__name__)
        else:
            raise AssertionError("compiling without nvFuser did not raise")
        """
    )
    assert "RAISED" in proc.stdout


def test_unknown_option_lists_valid_ones():
    with pytest.raises(nb.OptionsError) as info:
        nb.Options.from_dict({"fallbak": "eager"})
    msg = str(info.value)
    assert "fallbak" in msg
    for name in ("fallback", "dump_dir", "min_region_size", "cache_size"):
        assert name in msg, msg


def test_unknown_option_through_torch_compile():
    torch._dynamo.reset()
    fn = torch.compile(lambda x: x + 1, backend="nvfuser_dtensor", options={"no_such_option": 1})
    with pytest.raises(Exception) as info:
        fn(torch.randn(4))
    msg = str(info.value)
    assert "no_such_option" in msg and "valid options are" in msg and "fallback" in msg, msg


def test_bad_fallback_value():
    with pytest.raises(nb.OptionsError, match="fallback must be one of"):
        nb.Options.from_dict({"fallback": "nope"})
