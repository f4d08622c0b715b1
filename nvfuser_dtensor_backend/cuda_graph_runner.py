"""The backend's own CUDA-graph runner (``options.cuda_graphs``; see cuda_graphs.py).

Note [CUDA graphs of our own]
One ``GraphRunner`` wraps one compiled forward, backward or inference function. A call is
a few C calls and a replay, with no Python bookkeeping per input (cudagraph trees, the
other choice, spend 30-60 us per call on theirs):
- **The key.** Inputs used in place (parameters and buffers of the forward, the values the
  backward gets from its forward) are compared, address by address, with those the graph
  was recorded on, in one call (``torch._C._tensors_data_ptrs_at_indices_equal``). The
  other tensor inputs are copied into the graph's own buffers, except one that is another
  recording's output handed out as it is or lent, so at a fixed address (across a graph
  break: a gradient passed to the previous graph's backward, logits passed to the loss,
  hidden states to the next layer's graph), which is read in place and keyed too (Note
  [Lent outputs read in place] for a lent one saved by its reader). A new set of addresses
  (the same compiled block called for another layer, a parameter replaced) gets its own
  recording, on its second call (Note [Record what repeats]). The first call of a compiled
  graph runs uncaptured, as a warm-up: nvFuser compiles its kernels on a region's first
  call, which should not happen under capture. The warm-up allocates from the graphs'
  memory pool (while it holds no recording), so the recordings reuse what it freed.
- **Outputs a user keeps are never silently overwritten.** The outputs of a forward or an
  inference graph that reach the user (AOTAutograd's ``num_forward_returns``; all of an
  inference graph's) below ``LEND_FROM_BYTES`` are copied out of the graph's memory after
  the replay (a loss kept in a list, a metric). Larger ones (an LM's logits: GPT-2's copy was
  412 MB a step; its training kernels took 5.69 ms a step with the copy and 5.53 ms without
  on the H200; Qwen2's inference logits are 1.2 GB at 8 x 512 tokens in bf16: with
  their copy its inference kernels took 4.19 ms against inductor's 3.11 on an H100) are *lent*: handed out in the graph's memory, through a storage of their own, which
  the next replay of that recording revokes, as cudagraph trees do. A revoked tensor, and
  every view of it, raises an error that says so and how to keep it (``.clone()``) when its
  data is read; reading it before the next call (metrics after ``backward``, the next
  token taken from an inference's logits) is fine, and so is a variable that still holds it
  but is not read (``out = model(x)`` in a loop). Where the forward's saved
  activations are still alive (two forwards before a backward) another recording is used,
  so nothing the backward or the user may still need is revoked (Note [Memory a replay
  writes] for lent outputs that lie where an earlier recording writes).
  The rest are handed out as they are and watched: the activations the forward
  saves for its backward, and the backward's gradients (registered as cached tensors, so
  that autograd's AccumulateGrad takes them into ``.grad`` without a copy, as it does in
  eager mode). Before a replay, the watched outputs of the last replay must be dead (no
  reference beyond the runner's own: Python, tensor and storage use counts); if one is
  alive (two forwards before a backward, ``retain_graph=True``, a ``.grad`` kept by
  ``zero_grad(set_to_none=False)``, gradients from ``torch.autograd.grad`` kept by the user),
  another recording of the same graph is used or made, up to ``MAX_GRAPHS``, and past that
  the call runs uncaptured.
- Outputs that alias an input: a forward's view of a parameter is handed out as it is (it
  is the parameter's memory); a gradient that is an input (a tangent passed through, a
  saved value) is copied out; a forward output that aliases a copied input stops capture
  of that graph (AOTAutograd rebuilds such views from the real input).
- Forward and backward record into one memory pool. Every graph's outputs stay referenced
  by its runner, so no recording ever places its memory over another graph's outputs. A
  recording may place its outputs over what an earlier one freed, though (Note [Memory a
  replay writes]).
- Random ops (in PyTorch regions) draw new numbers on each replay: the CUDA generator
  registers its seed and offset with each captured graph.
- A failure of the capture machinery (a recording) turns capture off for that
  runner and its partner, with one warning, and the call is rerun uncaptured; an error of
  the graph itself propagates as it would without capture.

Note [Record what repeats]
A forward or inference graph records for a key (the addresses of its inputs used in place:
its parameters) only when it is called with that key a second time; the first call with a
key runs uncaptured (the graph's very first call is its warm-up). A graph break in the loop
over layers calls one compiled graph once per layer, and dynamo replaces the layer graphs
of the first step in the second (transformers' wrappers fail guards such as
``len(args) == 2`` then), so the first step's graphs are never called again. Recorded on
their first step's calls, they kept recordings that never replayed, each holding a layer's
saved activations: real-size BART (4 + 4 layers, 8 x 512, float32) on the CPU stand-in held
6.6 GB in 41 recordings after four steps (parameters they read not counted), 1.9 GB of it
in 11 recordings never replayed; now 4.6 GB in 30, all replayed. A
graph called with the same parameters in every step records on its second call, as before;
a layer graph's other layers run uncaptured in their first step and record in the next
(cudagraph trees likewise warm up through the whole first generation). A backward's key is
what its forward saved: it records at once when those are a recording's outputs, and runs
uncaptured when its forward did (Note [Backwards of uncaptured forwards]). ``SEEN_KEPT``
bounds the keys a runner remembers.

Note [Tangents read in place]
A backward's tangents are inputs made anew for every call, so they are copied into the
recording's buffers, like any input that is not a parameter. One of them costs a whole step its
size twice: Hugging Face models that compute their loss in the graph and also return the logits
get, from autograd, a zeros gradient for the logits (AOTAutograd's function materializes the
gradients of outputs nobody differentiates), and the copy read and wrote it again (412 MB each
way for RoBERTa and BART at 8 x 512 tokens in bf16, 250 MB for BERT), while its buffer stayed
reserved beside the pool. So (by default since session 30;
``NVFUSER_DTENSOR_TANGENTS_IN_PLACE=0`` is the A/B switch, read at import) a backward's tensor
inputs of ``TANGENT_IN_PLACE_FROM_BYTES`` or more are read where they lie, keyed by their
address like the saved values (``steady`` in the recording): in a training loop autograd makes
the same allocations in the same order every step, so the caching allocator hands the tangent
the same block and the recording replays. The first steps' allocations differ from the later
ones', though (on the CPU stand-in the tangent of BERT's first recording never came back there,
and that recording held 200 MB for nothing), so a backward records only when its tangents lie
where they lay in its previous slow call (one that the per-call key check did not replay), and
runs uncaptured otherwise, ``TANGENT_WAITS`` times at most. A tangent at another address finds
no recording and gets one more, again read in place (gradient accumulation may alternate two
addresses). Once recordings have read a tangent in place at ``STEADY_ADDRESSES`` addresses, a
tangent at yet another one is copied by the next recording, which then replays for any address:
a loop whose tangents keep moving costs two recordings more, never one per address. Inputs
whose rows lie further apart than their length keep being copied (``_buffer_like`` keeps their
padding).

Note [Waits in the pool]
A backward that waits for its tangents (above) runs while the pool holds its forward's
recording, so, run as it is, its whole working memory came from the allocator's default pool,
reserved beside the graphs' pool until the next capture emptied the cache: GPT-2's step
reserved 3436 MB at most with CUDA graphs against 2644 without (one H100, session 39,
scripts/gpu_memory_probe.py). So a waiting call allocates from the graphs' pool, like a
warm-up, and what it frees there the backward's recording reuses. What it hands out (the
gradients ``.grad`` keeps) may lie where a replay of an earlier recording writes, so its
outputs are copied out of the pool: one copy of a backward's outputs per wait, at most
``TANGENT_WAITS`` times per graph.

Which recordings may replay, given what a replay writes, and the recordings themselves:
cuda_graph_memory.py (Note [Memory a replay writes]).

The recording itself is a ``Capture``: ``CudaCapture`` on the GPU; tests on the CPU use a
capture that replays by running the function again and copying into the same output
tensors, which keeps every rule above (fixed memory, overwritten in place) checkable there.
"""

from __future__ import annotations

import itertools
import logging
import os
import weakref
from typing import Any, Callable

import torch

from .cuda_graph_memory import LENT, MADE, Recording, ledger_of, on_storage, overlaps
from .options import env_flag
from .padded_rows import padded_extent

log = logging.getLogger("nvfuser_dtensor_backend")

# Recordings per compiled graph (new addresses, or outputs still alive). A graph break inside
# a loop over layers calls one compiled graph once per layer, with that layer's weights:
# BART's decoder ran past 4 on the H200 and its step fell back to uncaptured calls.
MAX_GRAPHS = 16

SEEN_KEPT = 4 * MAX_GRAPHS  # keys a runner remembers (Note [Record what repeats])

# Process-wide counts of the slow path (``nvfuser_dtensor_backend.cuda_graph_stats()``):
# recordings, calls run uncaptured (warm-ups, past MAX_GRAPHS, capture off), failures.
STATS = {"recorded": 0, "uncaptured_calls": 0, "failures": 0, "dropped": 0}

# A forward's or an inference graph's user outputs of at least this many bytes are lent, not
# copied out (Note [CUDA graphs of our own]); smaller ones (a loss, a metric) cost one small copy.
LEND_FROM_BYTES = int(os.environ.get("NVFUSER_DTENSOR_LEND_FROM_BYTES", 64 * 1024))  # (for A/B runs)

REVOKED = ("nvfuser_dtensor: this tensor was returned by a compiled graph replayed as a CUDA graph, "
           "and a later call of that graph has overwritten it, or its graph was freed (outputs of {bytes} "
           "bytes or more are handed out in the graph's memory, not copied). Clone it (.clone()) before calling the model "
           "again, or compile with options={{'cuda_graphs': False}}.")

NOT_CAPTURED: dict[str, int] = {}  # why graphs were left uncaptured (cuda_graphs.note_uncaptured)

# Note [Tangents read in place]. Measured on one H100 (session 30, benchmarks/results/session30):
# Llama's training kernels 4.36 -> 4.21 ms (its logits' tangent, 262 MB, no longer copied on
# every replay: five Memcpy DtoD, 0.18 ms); the zoo's Llama and RoBERTa rows right with it.
TANGENTS_IN_PLACE = env_flag("NVFUSER_DTENSOR_TANGENTS_IN_PLACE", default=True)
TANGENT_IN_PLACE_FROM_BYTES = 1 << 20
STEADY_ADDRESSES = 2  # addresses a tangent is read in place at, at most, before recordings copy it
TANGENT_WAITS = 2  # uncaptured calls a backward spends, at most, waiting for its tangents to stay put
# A/B switch (read at import; Note [Moved outputs of other recordings]): a recording copies an
# input that earlier recordings of its key read in place as another recording's output, now
# lying elsewhere, and a graph with MAX_GRAPHS recordings drops its least recently replayed
# one that nothing holds instead of running the call uncaptured.
LAYER_CHAINS = env_flag("NVFUSER_DTENSOR_LAYER_CHAINS")
_CLOCK = itertools.count()  # orders replays (``Recording.used``)


def note_uncaptured(why: str) -> None:
    """Counts why a graph with CUDA tensors runs uncaptured (``cuda_graph_stats()``)."""
    key = why.splitlines()[0][:200] if why else "unknown"
    NOT_CAPTURED[key] = NOT_CAPTURED.get(key, 0) + 1


def capturing() -> bool:
    """Whether the current CUDA stream is being captured into a graph."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def marking_graph_errors(compiled: Callable) -> Callable:
    """``compiled`` with the exceptions it raises outside a capture marked as the graph's own,
    so that the code around a capture (``is_graph_error``) lets them through instead of turning
    capture off. One raised while capturing is the capture's: a copy from pageable CPU memory
    (BART's and T5's constants, on the H200), a host sync; the call is rerun uncaptured, where
    an error of the graph itself raises again."""
    def run(args: list) -> Any:
        try:
            return compiled(args)
        except Exception as e:
            if not capturing():
                e._nvfuser_dtensor_graph_error = True
            raise

    return run


def is_graph_error(e: BaseException) -> bool:
    """Whether ``e`` came from the compiled graph itself (``marking_graph_errors``)."""
    return getattr(e, "_nvfuser_dtensor_graph_error", False)


class CudaCapture:
    """Records a function into a CUDA graph in a memory pool shared by a forward and its
    backward; ``record`` returns the replay function and the graph's output tensors
    (filled by the first replay)."""

    def __init__(self, device_index: int):
        self.device_index = device_index
        self.pool = torch.cuda.graph_pool_handle()
        self.stream = torch.cuda.Stream(device=device_index)
        self._keeper: torch.cuda.CUDAGraph | None = None

    def warm_up(self, fn: Callable, args: list) -> Any:
        """``fn(args)`` run as it is, its memory taken from the graphs' pool: what the warm-up
        frees, the recordings reuse, instead of it staying reserved outside the pool (the
        allocator's reserved memory would hold a step's worth twice)."""
        from torch._inductor.cudagraph_trees import _use_cuda_memory_pool_manager

        if self._keeper is None:
            if capturing() or torch._C._get_dispatch_mode(
                    torch._C._TorchDispatchModeKey.FAKE) is not None:
                return fn(args)  # inside someone else's capture or a fake mode: no recording now
            # An empty recording makes the pool and keeps it alive (as cudagraph trees do), so
            # the warm-ups can allocate from it before any real recording. Made here, at run
            # time: begun at compile time (under dynamo's fake mode) it failed on the H200 and
            # left the CUDA generator marked as capturing, so every later random op raised.
            keeper = torch.cuda.CUDAGraph()
            with torch.cuda.device(self.device_index), torch.cuda.graph(
                    keeper, pool=self.pool, stream=self.stream, capture_error_mode="thread_local"):
                pass
            self._keeper = keeper
        with _use_cuda_memory_pool_manager(self.device_index, self.pool, self.stream):
            return fn(args)

    def free_memory(self) -> list[tuple[int, int]] | None:
        """The address ranges free in the pool now: what a capture begun now may allocate from
        (Note [Memory a replay writes]). Called once the pool holds a recording; if the
        allocator's snapshot shows none of the pool's segments (another allocator setting or
        snapshot format), None: every address counts as free, so every output is at risk."""
        ranges, found = [], False
        for segment in torch.cuda.memory_snapshot():
            if segment.get("segment_pool_id") != tuple(self.pool) or segment.get("device", self.device_index) != self.device_index:
                continue
            found = True
            address = segment["address"]
            for block in segment["blocks"]:
                if block["state"] != "active_allocated":
                    ranges.append((address, address + block["size"]))
                address += block["size"]
        return ranges if found else None

    def record(self, fn: Callable, inputs: list) -> tuple[Callable[[], None], list]:
        from torch._dynamo.utils import preserve_rng_state
        from torch._inductor.cudagraph_trees import clear_cublas_manager

        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize(self.device_index)
        with (preserve_rng_state(), torch.cuda.device(self.device_index), clear_cublas_manager(),
              torch.cuda.graph(graph, pool=self.pool, stream=self.stream, capture_error_mode="thread_local")):
            outputs = fn(list(inputs))  # fn empties the list it is handed
        return graph.replay, list(outputs)


def expanded_dims(t: torch.Tensor) -> tuple[int, ...]:
    """The dims along which ``t`` repeats one element (stride 0, more than one element)."""
    return tuple(d for d in range(t.dim()) if t.stride(d) == 0 and t.shape[d] > 1)


def _buffer_like(a: torch.Tensor, row_stride: int | None = None) -> torch.Tensor:
    """An input buffer with ``a``'s sizes and strides. Rows that lie further apart than their
    length (logits in a padded LM head's product) keep the last row's padding too, so that
    ``rows_widened`` can read the buffer as padded rows without a copy (Note [Reductions over
    padded rows]). So does a dense input the graph reads as rows of ``row_stride`` elements
    (Note [Pads computed on padded rows]): its buffer's rows lie that far apart, and the copy
    into it is the only one."""
    if row_stride is not None and a.dim() >= 2 and a.numel() and a.size(-1) < row_stride and not expanded_dims(a):
        return torch.empty((*a.shape[:-1], row_stride), dtype=a.dtype, device=a.device)[..., :a.size(-1)]
    if a.dim() < 2 or a.stride(-1) != 1 or a.stride(-2) <= a.size(-1) or a.numel() == 0:
        return torch.empty_strided(a.size(), a.stride(), dtype=a.dtype, device=a.device)
    return torch.empty(padded_extent(a), dtype=a.dtype, device=a.device).as_strided(a.size(), a.stride())


def _copy_into(buffer: torch.Tensor, value: torch.Tensor, expanded: tuple) -> None:
    """``buffer.copy_(value)``; an expanded buffer (stride 0 along ``expanded``: BART's
    attention mask) is written through one element along those dims, since PyTorch refuses a
    copy into memory that several elements share."""
    for d in expanded:
        buffer, value = buffer.narrow(d, 0, 1), value.narrow(d, 0, 1)
    buffer.copy_(value)


def _storage_key(t: torch.Tensor) -> tuple[int, str, int]:
    return t.untyped_storage().data_ptr(), t.device.type, t.device.index or 0


def _dense(t: torch.Tensor) -> bool:
    """Non-overlapping and dense: its elements fill its extent exactly, in any dim order."""
    if t.is_contiguous():
        return True
    expected = 1
    for stride, size in sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _plain_copy(t: torch.Tensor) -> bool:
    """Whether ``t.clone()`` copies ``t`` with its strides, offset and storage extent."""
    return t.storage_offset() == 0 and t.untyped_storage().nbytes() == t.numel() * t.element_size() and _dense(t)


def _copy_storage(outs: list, indices: list[int]) -> None:
    """Copies the outputs at ``indices`` (views of one storage) into one new storage."""
    storage = outs[indices[0]].untyped_storage()
    fresh = torch.empty(storage.nbytes(), dtype=torch.uint8, device=storage.device)
    fresh.copy_(torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage))
    for i in indices:
        outs[i] = on_storage(fresh.untyped_storage(), outs[i])


# Note [Moved outputs of other recordings]
# A compiled layer graph called once per layer (a graph break in the loop over layers) has a
# backward whose tangent is the gradient the next layer's replay made, read in place as
# another recording's output. When any recording up the chain is made anew (a small backward
# between the layers recording late, a tangent still moving in the first steps), that
# gradient lies elsewhere, so every layer's backward records again, one step after another,
# and the recordings it leaves behind never replay. Tiny BART with 8 layers on the CPU stand-in
# (scripts/cpu_recording_trace.py, lending and in-place tangents from 1 KiB, as real sizes
# do) filled both layer backwards' 16 recordings (MAX_GRAPHS) in step 3 and ran them
# uncaptured from then on; with graphs of one launch captured, so did 6 layers, as BART did
# on an H100 (session 36: 18.44 -> 19.95 ms a step).
# ``NVFUSER_DTENSOR_LAYER_CHAINS=1`` (an A/B switch, off by default) does two things:
# - a recording copies such an input when recordings of its key read it in place elsewhere,
#   so it replays wherever that gradient lies, at the cost of one copy per replay. The
#   recordings of that key that read it in place are dropped then (their memory held
#   41% of what tiny BART's recordings held, 6 layers: never replayed again);
# - a graph with MAX_GRAPHS recordings drops its least recently replayed one that no output
#   handed out holds (``free``, not in the ledger's ``handed``, not ``last``) before it
#   records, instead of running uncaptured. Its memory goes back to the pool; a recording
#   that read its outputs in place replays only when its input lies at that address again,
#   whoever wrote it.
# On the CPU stand-in 6, 8 and 12 layers then settle (no recording after step 6, none full).
# On one H100 (session 38, with Note [Recordings of one backward pass]) it kept BART's
# layer backwards from filling with one-launch pairs captured, but bought no step time (19.91
# against 19.95 ms by default) and reserved 1.6 GB more: it stays off.


def _moved(args: list, recs) -> set[int]:
    """Inputs that earlier recordings of this key (``recs``) read in place, as another
    recording's output, at other addresses than now (Note [Moved outputs of other
    recordings])."""
    read = {i: ptr for rec in recs for i, ptr in rec.extra if i not in rec.steady}
    return {i for i, ptr in read.items() if args[i].data_ptr() != ptr}


class GraphRunner:
    """Replays one compiled (boxed) function as CUDA graphs (Note [CUDA graphs of our own]).

    ``static``: indices of inputs used in place; ``escaping``: how many leading outputs reach
    the user (None: all); ``kind``: "forward", "backward" or "inference"."""

    def __init__(self, kind: str, compiled: Callable, static: list[int], escaping: int | None,
                 capture, on_failure: Callable[[str], None], is_off: Callable[[], bool]):
        self.kind = kind
        self.compiled = compiled
        self.static = list(static)
        self.escaping = escaping
        self.capture = capture
        self.on_failure = on_failure  # turns capture off for this runner and its partner
        self.is_off = is_off
        self.ledger = ledger_of(capture)
        self.recordings: dict[tuple, list[Recording]] = {}
        self.warmed_up = False  # the first call runs as it is (cudagraph trees also warm up once)
        self.seen: set[tuple] = set()  # keys a forward was called with (Note [Record what repeats])
        self.last: Recording | None = None
        self.full_logged = False
        self._boxed_call = True
        self.tangent_ptrs: dict[int, int] = {}  # Note [Tangents read in place]: where they lay last call
        self.tangent_waits = 0
        # Note [Tangents read in place] for every input that is not used in place already, in
        # any kind of graph (the global view's, Note [Inputs of the global view read in place])
        self.inputs_in_place = False
        # inputs the graph reads as padded rows, index -> row stride (Note [Pads computed on padded rows])
        self.padded_inputs: dict[int, int] = getattr(compiled, "padded_inputs", {})

    @property
    def count(self) -> int:
        """Recordings made so far (at most ``MAX_GRAPHS``)."""
        return sum(len(recs) for recs in self.recordings.values())

    def __call__(self, args: list) -> Any:
        last = self.last
        if (last is not None and torch._C._tensors_data_ptrs_at_indices_equal(args, last.key_ptrs, last.key_idx)
                and last.free() and self.ledger.clear_for(last)):
            return self._replay(last, args)
        return self._slow(args)

    def _try_first(self, recs: list[Recording], rec: Recording) -> None:
        """The recording the next call's per-call check tries: the earliest one for the
        inputs ``rec`` was used with (Note [Memory a replay writes])."""
        self.last = recs[0] if recs[0].extra == rec.extra else rec

    def _replay(self, rec: Recording, args: list) -> list:
        rec.used = next(_CLOCK)
        for i, buffer, expanded in rec.copies:
            _copy_into(buffer, args[i], expanded)  # (an input may be what the last replay lent)
        if rec.handed_out:
            rec.revoke()
        rec.replay()
        self.ledger.replayed(rec)
        args.clear()  # after the replay is queued: the inputs read in place are alive till then
        outs = list(rec.outputs)
        for i in rec.cloned:
            outs[i] = outs[i].clone()
        for group in rec.rebuilt:
            _copy_storage(outs, group)
        if rec.lent:
            rec.lend(outs)
        return outs

    def _uncaptured(self, args: list, run: Callable | None = None) -> Any:
        """The call run as it is; a forward's saved values are noted as transient (Note
        [Backwards of uncaptured forwards])."""
        STATS["uncaptured_calls"] += 1
        if self.kind != "forward" or self.escaping is None:
            return (run or self.compiled)(args)
        fixed = {args[i].untyped_storage().data_ptr() for i in self.static}  # parameters, buffers
        outs = (run or self.compiled)(args)
        self.ledger.note_transient(o for o in outs[self.escaping:] if isinstance(o, torch.Tensor)
                                   and o.untyped_storage().data_ptr() not in fixed)
        return outs

    def _slow(self, args: list) -> Any:
        if self.is_off():
            STATS["uncaptured_calls"] += 1
            return self.compiled(args)
        steady = self._steady(args)  # Note [Tangents read in place]
        tangents_moved = self._tangents_moved(args, steady)
        key = tuple(args[i].data_ptr() for i in self.static)
        recs = self.recordings.get(key, ())
        for rec in recs:  # the earliest first (Note [Memory a replay writes])
            if all(args[i].data_ptr() == ptr for i, ptr in rec.extra) and rec.free() and self.ledger.clear_for(rec):
                self._try_first(recs, rec)
                return self._replay(rec, args)
        new_key = self.kind != "backward" and key not in self.seen  # Note [Record what repeats]
        if new_key:
            if len(self.seen) >= SEEN_KEPT:
                self.seen.clear()
            self.seen.add(key)
        if self.ledger.waiting():  # gradients taken into .grad lie where this graph would write
            return self._uncaptured(args)
        if not self.warmed_up:
            self.warmed_up = True
            # the warm-up (nvFuser compiles its kernels here) allocates from the pool, unless the
            # pool already holds a recording whose replays could write over what it hands out
            # (two forwards before the first backward: Note [Memory a replay writes])
            warm_up = getattr(self.capture, "warm_up", None) if not self.ledger.made else None
            return self._uncaptured(args, (lambda a: warm_up(self.compiled, a)) if warm_up is not None else None)
        if new_key:
            return self._uncaptured(args)
        if any(args[i].data_ptr() not in MADE for rec in recs for i, _ in rec.extra if i not in rec.steady):
            # what a recording reads in place (another's output) comes from an uncaptured call
            # this time (gradient accumulation's later micro-batches): run as it ran
            return self._uncaptured(args)
        if self.kind == "backward" and self.ledger.transient_among(args[i] for i in self.static):
            return self._uncaptured(args)  # Note [Backwards of uncaptured forwards]
        if self.count >= MAX_GRAPHS and not (LAYER_CHAINS and self._drop_stale()):
            if not self.full_logged:
                self.full_logged = True
                note_uncaptured(f"{self.kind}: {MAX_GRAPHS} recordings, none free for the inputs")
                log.warning("nvfuser_dtensor: the %s graph has %d CUDA graphs recorded, none free for these inputs; "
                         "calls like this one run uncaptured", self.kind, self.count)
            return self._uncaptured(args)
        if tangents_moved and self.tangent_waits < TANGENT_WAITS:
            self.tangent_waits += 1
            return self._waiting_in_pool(args)  # Note [Tangents read in place]: record where they repeat
        kept = list(args)
        moved = _moved(args, recs) if LAYER_CHAINS else set()
        try:
            rec = self._record(args, steady, moved)
        except Exception as e:  # noqa: BLE001 - any failure of the capture machinery
            if is_graph_error(e):
                raise
            from .region import _first_line

            STATS["failures"] += 1
            self.on_failure(f"recording the {self.kind} raised {type(e).__name__}: {_first_line(e)[:300]}")
            return self.compiled(kept)
        if rec is None:  # not capturable after all (said once)
            return self.compiled(kept)
        rec.set_alone()
        STATS["recorded"] += 1
        if moved:  # those reading in place what ``rec`` copies are superseded (see the Note)
            for old in [r for r in recs if any(i in moved for i, _ in r.extra) and self._droppable(r)]:
                self._drop(key, old)
        recs = self.recordings.setdefault(key, [])
        recs.append(rec)
        self._try_first(recs, rec)
        log.info("nvfuser_dtensor: the %s graph is recorded as CUDA graph %d (%d inputs in place, %d copied)",
                 self.kind, self.count, len(rec.key_idx), len(rec.copies))
        return self._replay(rec, kept)

    def _waiting_in_pool(self, args: list) -> Any:
        """A backward's call that waits for its tangents to stay put, run as it is with its
        memory taken from the graphs' pool and its outputs copied out (Note [Waits in the pool])."""
        warm_up = getattr(self.capture, "warm_up", None)
        if warm_up is None or self.kind != "backward":  # (the local DTensor path's inputs read in place)
            return self._uncaptured(args)

        def run(a: list) -> list:
            return [o.clone() if isinstance(o, torch.Tensor) else o for o in warm_up(self.compiled, a)]

        return self._uncaptured(args, run)

    def _droppable(self, rec: Recording) -> bool:
        """Whether no output ``rec`` handed out is held and no call is about to try it."""
        return rec is not self.last and rec not in self.ledger.handed and rec.free()

    def _drop(self, key: tuple, rec: Recording) -> None:
        recs = self.recordings[key]
        recs.remove(rec)
        if not recs:
            del self.recordings[key]
        STATS["dropped"] += 1

    def _drop_stale(self) -> bool:
        """Drops the least recently replayed recording that no output handed out holds (Note
        [Moved outputs of other recordings]); whether there was one."""
        stale = [(rec.used, key, rec) for key, recs in self.recordings.items() for rec in recs if self._droppable(rec)]
        if not stale:
            return False
        _, key, rec = min(stale, key=lambda entry: entry[0])
        self._drop(key, rec)
        return True

    def _tangents_moved(self, args: list, steady: set[int]) -> bool:
        """Whether a tangent this backward would read in place (``steady``) lies elsewhere than
        in its last slow call (Note [Tangents read in place])."""
        now = {i: args[i].data_ptr() for i in steady}
        before, self.tangent_ptrs = self.tangent_ptrs, now
        return any(before.get(i) != ptr for i, ptr in now.items())

    def _steady(self, args: list) -> set[int]:
        """The indices of ``args`` this recording reads in place as tangents (Note [Tangents
        read in place]): not used in place already (``static``: a backward's saved values, keyed
        as they are), large enough, not in padded rows, and read in place by earlier
        recordings at this address or at fewer than ``STEADY_ADDRESSES`` others. With
        ``inputs_in_place`` the same rule holds for the inputs of any kind of graph."""
        if not (self.inputs_in_place or (TANGENTS_IN_PLACE and self.kind == "backward")):
            return set()
        seen: dict[int, set[int]] = {}  # index -> the addresses recordings read it in place at
        for recs in self.recordings.values():
            for rec in recs:
                for i, ptr in rec.extra:
                    if i in rec.steady:
                        seen.setdefault(i, set()).add(ptr)
        static = set(self.static)
        return {i for i, a in enumerate(args)
                if i not in static and isinstance(a, torch.Tensor) and a.untyped_storage().nbytes() >= TANGENT_IN_PLACE_FROM_BYTES
                and not (a.dim() >= 2 and a.stride(-1) == 1 and a.stride(-2) > a.size(-1))
                and (len(seen.get(i, ())) < STEADY_ADDRESSES or a.data_ptr() in seen[i])}

    def _record(self, args: list, steady: set[int], moved: set[int] = frozenset()) -> Recording | None:
        static = set(self.static)
        copies, inputs, extra = [], list(args), []
        for i, a in enumerate(args):
            if i not in static and isinstance(a, torch.Tensor) and (
                    (a.data_ptr() in MADE and i not in moved) or i in steady):
                extra.append((i, a.data_ptr()))  # another recording's output, or a tangent: read in place
            elif i not in static and isinstance(a, torch.Tensor):
                buffer = _buffer_like(a, self.padded_inputs.get(i))
                expanded = expanded_dims(a)
                _copy_into(buffer, a, expanded)
                copies.append((i, buffer, expanded))
                inputs[i] = buffer
        args.clear()
        # what this capture may allocate from, where an earlier recording's replay writes
        free_memory = getattr(self.capture, "free_memory", None)
        free = free_memory() if self.ledger.made and free_memory is not None else []
        replay, outputs = self.capture.record(marking_graph_errors(self.compiled), inputs)
        in_place = self.static + [i for i, _ in extra]
        static_storages = {_storage_key(inputs[i]) for i in in_place if isinstance(inputs[i], torch.Tensor)}
        extra_storages = {_storage_key(inputs[i]) for i, _ in extra}
        lenders = []  # Note [Lent outputs read in place]
        copied_storages = {_storage_key(b) for _, b, _ in copies}
        # a backward's gradients are watched, not copied (AccumulateGrad takes them)
        escaping = 0 if self.kind == "backward" else len(outputs) if self.escaping is None else self.escaping
        keys = [_storage_key(o) if isinstance(o, torch.Tensor) else None for o in outputs]
        device = next((a.device for a in inputs if isinstance(a, torch.Tensor)), None)  # the graph's
        cloned, by_storage, watched_idx = [], {}, []
        for i, (o, where) in enumerate(zip(outputs, keys)):
            if not isinstance(o, torch.Tensor):
                continue
            if o.untyped_storage().nbytes() == 0 or o.device != device:
                cloned.append(i)  # nothing to alias or keep; a CPU value made from constants
                continue
            if self.kind == "backward" and (where in static_storages or where in copied_storages):
                by_storage.setdefault(where, []).append(i)  # an input passed through: copied out
            elif where in static_storages:  # a view of a parameter: its own memory, handed out as it is
                # saved for the backward, read in place from another recording's lent output
                ref = LENT.get(where[0]) if i >= escaping and where in extra_storages else None
                lender = ref() if ref is not None else None
                if lender is not None:
                    real = lender.outputs[next(g[0] for g, address, _ in lender.lent if address == where[0])]
                    outputs[i] = on_storage(real.untyped_storage(), o)
                    lenders.append((ref, i))
                continue
            elif i >= escaping:  # saved for the backward (a copied input too): the graph's own
                watched_idx.append(i)
            elif where in copied_storages:
                self.on_failure(f"output {i} of the {self.kind} aliases a copied input")
                return None
            else:
                by_storage.setdefault(where, []).append(i)
        rebuilt, lent = [], []
        for where, group in by_storage.items():
            storage = outputs[group[0]].untyped_storage()
            if self.kind != "backward" and storage.nbytes() >= LEND_FROM_BYTES:
                lent.append((group, storage.data_ptr(), storage.nbytes()))
            elif len(group) == 1 and keys.count(where) == 1 and _plain_copy(outputs[group[0]]):
                cloned.append(group[0])
            else:
                rebuilt.append(group)
        watched = [(outputs[i], outputs[i].untyped_storage()._cdata) for i in watched_idx]
        rec = Recording(replay, copies, outputs, cloned, rebuilt, watched)
        rec.lent = lent
        rec.revoked_message = REVOKED.format(bytes=LEND_FROM_BYTES)
        rec.lent_risky = any(overlaps(outputs[group[0]], free) for group, _, _ in lent)
        rec.key_idx, rec.extra = in_place, extra
        rec.steady = {i for i, ptr in extra if i in steady and ptr not in MADE}
        rec.seq, self.ledger.made = self.ledger.made, self.ledger.made + 1
        rec.risky = [j for j, (t, _) in enumerate(watched) if overlaps(t, free)]
        # indexed like the inputs, as _tensors_data_ptrs_at_indices_equal reads it
        keyed = set(in_place)
        rec.key_ptrs = [a.data_ptr() if i in keyed else None for i, a in enumerate(inputs)]
        rec.made = [t.data_ptr() for t, _ in watched] + [outputs[i].data_ptr() for group, _, _ in lent for i in group]
        for ptr in rec.made:
            MADE[ptr] = MADE.get(ptr, 0) + 1
        rec.lenders = lenders
        for _, address, _ in lent:
            LENT[address] = weakref.ref(rec)
        if self.kind == "backward":  # so that AccumulateGrad takes gradients into .grad without a copy
            torch._C._set_cached_tensors_enabled(True)
            rec.cached = list(range(len(watched)))
            for t, _ in watched:
                torch._C._add_cached_tensor(t)
        return rec
