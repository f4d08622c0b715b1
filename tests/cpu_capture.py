"""A CUDA-graph capture for the CPU tests (tests/test_cuda_graph_runner.py, tests/test_zoo.py).

``ReplayByRerun`` replays a recording by running the function again and copying into the
same output tensors, so outputs live at fixed addresses and are overwritten in place, as a
CUDA graph's are. Its recording leaves the inputs as they were, as a capture does (it runs
no kernel): without that, a graph's updates of its inputs (batch norm's statistics) were
applied twice in the step that recorded. It also plays the worst allocator (Note [Memory a replay writes]): a
replay overwrites with garbage every output of a later recording or warm-up of the same
pool. ``captured_on_cpu`` is the fixture that puts it under the backend.
"""

import weakref

import pytest
import torch

from nvfuser_dtensor_backend import cuda_graphs
from nvfuser_dtensor_backend.cuda_graph_runner import _copy_into, expanded_dims


def _on_memory_of(t):
    """A tensor on ``t``'s memory that does not keep it alive, as a CUDA graph reads its inputs."""
    if not isinstance(t, torch.Tensor):
        return t
    s = t.untyped_storage()
    memory = torch._C._construct_storage_from_data_pointer(s.data_ptr(), t.device, s.nbytes())
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(memory, t.storage_offset(), t.size(), t.stride())


def _write(out: torch.Tensor, value: torch.Tensor) -> None:
    """``out.copy_(value)``, also where ``out`` is expanded (stride 0: one element per run)."""
    _copy_into(out, value, expanded_dims(out))


def _clobber(t: torch.Tensor) -> None:
    with torch.no_grad():
        t.fill_(float("nan") if t.is_floating_point() else 7)


class ReplayByRerun:
    """A replay that reruns the function into the recorded outputs. It also plays the worst
    allocator (Note [Memory a replay writes]): every output of a later recording of the same
    pool lies in the earlier recordings' temporaries, so a replay overwrites them all with
    garbage. ``free_memory`` says so: every address is at risk."""

    records = 0
    worst = True  # False: an allocator that never reuses a recording's memory for a later one

    def __init__(self, device_index: int):
        self.made: list[list[torch.Tensor]] = []  # each recording's own outputs, in order

    def free_memory(self):
        return None if ReplayByRerun.worst else []

    def warm_up(self, fn, args):
        """A warm-up allocates from the pool too: its outputs may lie in what earlier
        recordings' replays write."""
        outputs = fn(args)
        # weakly: a reference would keep AccumulateGrad from taking a gradient into .grad
        self.made.append([weakref.ref(o) for o in outputs if isinstance(o, torch.Tensor)])
        return outputs

    def record(self, fn, inputs):
        ReplayByRerun.records += 1
        memory = [_on_memory_of(t) for t in inputs]
        before = [t.clone() if isinstance(t, torch.Tensor) else None for t in inputs]
        rng = torch.get_rng_state()
        outputs = list(fn(list(inputs)))
        # A capture records the kernels, it does not run them: what the function wrote into
        # its inputs (batch norm's running statistics) is undone, to be written by the replay,
        # and the random numbers it drew are drawn again by the replay (dropout's masks in
        # the recording step are those eager draws).
        torch.set_rng_state(rng)
        with torch.no_grad():
            for t, b in zip(inputs, before):
                if b is not None and not torch.equal(t, b):
                    _write(t, b)

        read = {t.untyped_storage().data_ptr() for t in memory if isinstance(t, torch.Tensor)}
        written = [i for i, o in enumerate(outputs)  # the graph's own memory, not an input's
                   if isinstance(o, torch.Tensor) and o.untyped_storage().data_ptr() not in read]
        seq = len(self.made)
        self.made.append([outputs[i] for i in written])

        def replay():
            for later in self.made[seq + 1:] if ReplayByRerun.worst else ():
                for t in later:
                    t = t() if isinstance(t, weakref.ref) else t
                    if t is not None:
                        _clobber(t)
            new = fn(list(memory))
            for i in written:
                _write(outputs[i], new[i])

        return replay, outputs


def stand_in_for_the_gpu(set_attr=setattr) -> None:
    """The backend's capture decisions and runner, with ``ReplayByRerun`` for the GPU (for the
    scripts; tests take the fixture below, which passes ``monkeypatch.setattr``)."""
    set_attr(cuda_graphs, "capture_class", ReplayByRerun)
    set_attr(cuda_graphs, "skip_reason", lambda gm, inputs, static, **kw: None)


def auto_on_cpu(set_attr=setattr) -> None:
    """``cuda_graphs="auto"`` asks for capture of CPU graphs as it does of CUDA ones (its
    other rules, such as the fewest kernel launches, still hold); ``False`` stays off."""
    set_attr(cuda_graphs, "refusal", lambda option, inputs: None if option is not False else "off")


@pytest.fixture
def captured_on_cpu(monkeypatch):
    """The backend's capture decisions and runner, with ``ReplayByRerun`` for the GPU."""
    stand_in_for_the_gpu(monkeypatch.setattr)
    ReplayByRerun.records = 0
    yield ReplayByRerun
    ReplayByRerun.worst = True
