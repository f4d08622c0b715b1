"""What a CUDA-graph replay writes, and which recordings may replay (cuda_graph_runner.py).

Note [Memory a replay writes]
A replay writes its outputs and its temporaries: the memory its capture allocated and freed
again. A later capture into the same pool may put its own outputs there (the backward's
gradients over the forward's temporaries, a second recording's saved values over the
first's), and the next replay of the earlier graph overwrites them. That is harmless while
those outputs are dead, as they are in a plain training step, and silently wrong where they
are still in use: ``.grad`` taken from the backward's memory and kept over the next
micro-batch of gradient accumulation (``zero_grad`` sets it to None, the first micro-batch's
AccumulateGrad takes the gradient, the second micro-batch's forward replays), or results of
``torch.autograd.grad`` a user keeps. So:
- Each pool has a ``Ledger``: its recordings, numbered in the order they were made. A
  recording's outputs handed out as they are (the watched ones) that lie in memory that was
  free in the pool when its capture began are its outputs *at risk*, found from the
  allocator's snapshot of the pool at record time (``Capture.free_memory``); the first
  recording of a pool has none.
- A replay hands out its outputs at risk, so the ledger lists the recording until a later
  check finds them dead. A recording replays only if no recording made after it has an
  output at risk still alive; otherwise another recording is used or made, as for its own
  live outputs. Made now, it avoids the live memory.
- A warm-up allocates from the pool only while the pool holds no recording. After one, what
  a warm-up hands out could lie where that recording's replays write: the backward warms up
  after the forward recorded when two forwards come before the first backward.
- A lent output (Note [CUDA graphs of our own]) at risk is revoked when an earlier
  recording replays, instead of keeping that recording from replaying: it is the user's
  value of an earlier call, read after a later one, the case a revoked output raises for.
- Of the recordings for the same inputs, the earliest that may replay is used (also by the
  per-call check, which tries that one). A step that calls the graph twice before its
  backward (a siamese loss) then replays the first recording, then the second, step after
  step: the second's replay never writes where the first's outputs lie (they were held when
  it recorded). Trying the last used one first made every step's second call find only
  recordings an alive later one blocks, and record again, up to ``cuda_graph_runner.MAX_GRAPHS`` (21
  recordings in 10 steps on the CPU stand-in under the worst allocator; now 5: two
  forwards, two backwards, and a backward recorded on the warm-up forward's values).
- AccumulateGrad takes gradients at risk into ``.grad`` (registered as cached tensors) as
  long as they are dead by the next replay of an earlier recording, as in a plain training
  step. The first time one is found alive there (gradient accumulation, ``zero_grad`` after
  the forward), the recording's gradients at risk are unregistered, so that AccumulateGrad
  copies them from then on, and the calls run uncaptured until the gradients taken so far
  are released (``Ledger.waiting``). Gradient accumulation then costs one copy of those
  gradients per optimizer step, not a second recording of the forward and its memory.

Note [Recordings of one backward pass]
``stop_lending`` is for gradients kept past the backward pass that made them. A recording
blocked by a later one whose gradients at risk were handed out in the same backward pass
(the same autograd graph task, ``torch._C._current_graph_task_id``) is the order of one
backward, not gradient accumulation: every layer's gradients stay in ``.grad`` till the
optimizer step, so a layer backward recorded anew after the layers below it were recorded
(its tangent moved, Note [Moved outputs of other recordings]) blocked each of them in every
step. Taken for accumulation, that stopped the lending for good and ran one call of each of
BART's two layer backwards uncaptured in every step (CPU stand-in, 4 layers a stack,
``NVFUSER_DTENSOR_LAYER_CHAINS=1``). So such a block only makes the call use or make another
recording, which records after the blocker and avoids its live memory; in the next step the
calls find their recordings in the order they replay.

Note [Backwards of uncaptured forwards]
A backward is keyed on the addresses of what its forward saved (inductor's rule: saved
values are static inputs). A forward call that ran uncaptured (its warm-up, a call that had
to wait) saved values in memory of its own, which the next call of that forward will not
use again. Recorded on them, its backward made a recording no later call matches: a layer
graph called once per layer (a graph break in the loop over layers, BART on the H200)
warmed up on the first layer and recorded on the second in the first step, and the first
layer's backward then recorded on the warm-up's values, one stale recording per such graph,
its outputs kept for good. Worse, where ``.grad`` is never released (gradients accumulated
over every step), the gradients it handed out stayed alive at risk, and the ledger kept 3
calls of every later step uncaptured (``waiting``) on the CPU stand-in. So an uncaptured
forward's saved values are noted in the ledger (``Ledger.note_transient``), and a backward
that reads one not made by a recording since runs uncaptured, as its forward did. That
includes the forward's own inputs saved as they are (a ``Linear``'s input, an embedding's
indices), except its parameters and buffers (inputs used in place, which stay where they
are): a recording copies such an input into a buffer of its own, so a backward recorded on
the user's tensor (BART's shared embedding, called twice before its backward and warmed up
on the encoder's call) was never replayed either.
A forward that ``cuda_graphs="auto"`` leaves uncaptured for good (fewer than 3 kernel
launches, ``too_few_launches``) has no runner to note what it saves, so its backward, if
captured, found new saved values in every step and recorded again: one of BART's backwards
held 16 recordings after 13 steps, none free, with 7.5 GB reserved against inductor's 2.9
(H100, session 33). Such a forward takes its backward with it (``CudaGraphs.captured``, the
rule dynamo's "cudagraphs" backend has for the pair).

Note [Lent outputs read in place]
A forward's large user outputs are lent (Note [CUDA graphs of our own]); passed to the
next compiled graph across a graph break (GPT-2's logits to its loss, BART's hidden states
to the next layer's graph), they were copied into that graph's buffer, 412 MB a step for
GPT-2's logits in bf16 at 8 x 512 tokens, kept twice. They are now read in place, keyed
by their address (``MADE``), as other recordings' outputs are. The graph that reads one
often saves it for its backward (a loss saves its logits), handing it out again:
- It hands out a tensor on the lender's own memory (``LENT``: address -> lender), not the
  lent tensor it was called with, which the lender's next replay revokes: kept in the
  reader's recording, that one raised in the next step (BART's layer graphs).
- The lender watches that tensor as one of its own saved values (``Recording.watch``), so
  it does not replay while the reader's backward still needs it: a forward that saves
  nothing of its own, called twice before the backward, would otherwise have replayed
  over the logits the first call's loss saved.
- Where the lending call ran uncaptured (the later micro-batches of gradient accumulation)
  the input lies elsewhere, and the reader runs uncaptured too, instead of recording a
  copying twin.
"""

from __future__ import annotations

import logging
import sys
import weakref

import torch

log = logging.getLogger("nvfuser_dtensor_backend")

# Addresses of the outputs recordings hand out as they are or lend (fixed across replays):
# a graph that takes one as an input (a gradient passed from one compiled graph's backward
# to the previous one's, logits passed to a loss, hidden states to the next layer's graph,
# across a graph break) reads it in place instead of copying it.
MADE: dict[int, int] = {}

# The recordings that lend outputs, by the outputs' storage addresses (Note [Lent outputs
# read in place]).
LENT: dict[int, weakref.ref] = {}

TRANSIENT_KEPT = 4096  # addresses a ledger keeps of uncaptured forwards' saved values


class _AnyCount:
    """A holder count that every count equals (``Recording._held_as`` compares with ``!=``)."""

    def __eq__(self, other) -> bool:
        return True

    def __ne__(self, other) -> bool:
        return False

    __hash__ = None


ANY_COUNT = _AnyCount()


def on_storage(storage, like: torch.Tensor) -> torch.Tensor:
    """A tensor with ``like``'s dtype, sizes, strides and offset, on ``storage``."""
    return torch.empty(0, dtype=like.dtype, device=like.device).set_(
        storage, like.storage_offset(), like.size(), like.stride())


def overlaps(t: torch.Tensor, ranges: list[tuple[int, int]] | None) -> bool:
    """Whether ``t``'s storage overlaps one of ``ranges`` (None: every address)."""
    if ranges is None:
        return True
    start = t.untyped_storage().data_ptr()
    end = start + t.untyped_storage().nbytes()
    return any(lo < end and start < hi for lo, hi in ranges)


class Ledger:
    """The recordings of one memory pool, numbered in the order they were made, and those
    whose last replay handed out outputs at risk not yet seen dead (Note [Memory a replay
    writes])."""

    def __init__(self) -> None:
        self.made = 0
        self.handed: list[Recording] = []
        self.transient: set[int] = set()  # Note [Backwards of uncaptured forwards]

    def note_transient(self, saved) -> None:
        """The addresses of values an uncaptured forward saved for its backward."""
        if len(self.transient) > TRANSIENT_KEPT:  # a bound; a stale recording is the worst outcome
            self.transient.clear()
        self.transient.update(t.data_ptr() for t in saved)

    def transient_among(self, values) -> bool:
        """Whether one of ``values`` lies where an uncaptured forward saved a value, and no
        recording's output has been made there since."""
        return bool(self.transient) and any(
            isinstance(v, torch.Tensor) and v.data_ptr() in self.transient and v.data_ptr() not in MADE
            for v in values)

    def clear_for(self, rec: Recording) -> bool:
        """Whether ``rec`` may replay: no recording made after it has an output at risk alive.
        A backward's gradients at risk found alive are no longer taken into ``.grad``, unless
        it handed them out in the current backward pass (Note [Recordings of one backward
        pass]). If it may, the later recordings' lent outputs at risk are revoked (``rec``'s
        replay may write over them)."""
        later = [r for r in self.handed if r.seq > rec.seq]
        for r in later:
            if not r.risky_free():
                if r.task < 0 or r.task != torch._C._current_graph_task_id():
                    r.stop_lending()  # kept past this backward pass (Note [Recordings of one backward pass])
                return False
        for r in later:
            if r.lent_risky:
                r.revoke()
            self.handed.remove(r)
        return True

    def waiting(self) -> bool:
        """Whether gradients at risk that AccumulateGrad took before ``stop_lending`` are still
        alive: calls that cannot replay then run uncaptured instead of recording again."""
        return any(r.lent_once and not r.risky_free() for r in self.handed)

    def replayed(self, rec: Recording) -> None:
        if rec.risky or rec.lent_risky:
            rec.task = torch._C._current_graph_task_id()  # Note [Recordings of one backward pass]
            if rec not in self.handed:
                self.handed.append(rec)


def ledger_of(capture) -> Ledger:
    """The ledger of ``capture``'s pool (forward and backward share one capture)."""
    ledger = getattr(capture, "ledger", None)
    if ledger is None:
        ledger = capture.ledger = Ledger()
    return ledger


class Recording:
    """One recorded graph: its input buffers, its outputs and how each is handed out."""

    __slots__ = ("replay", "copies", "outputs", "cloned", "rebuilt", "watched", "alone", "cached", "key_idx",
                 "key_ptrs", "extra", "seq", "risky", "risky_alone", "lent_once", "lent", "lent_risky",
                 "handed_out", "revoked_message", "made", "lenders", "steady", "used", "task", "__weakref__")

    def __init__(self, replay, copies, outputs, cloned, rebuilt, watched):
        self.replay = replay
        self.copies = copies  # [(input index, buffer, its expanded dims)]
        self.key_idx: list[int] = []  # inputs read in place: the runner's static ones, then ``extra``
        self.key_ptrs: list[int | None] = []  # their addresses when recorded, at their input index
        self.extra: list[tuple[int, int]] = []  # (index, address): other recordings' outputs read in place
        self.steady: set[int] = set()  # indices in ``extra`` of a backward's tangents (Note [Tangents read in place])
        self.outputs = outputs  # the graph's output values
        self.cloned = cloned  # output indices copied out with Tensor.clone
        self.rebuilt = rebuilt  # [[indices sharing one storage]] copied out storage and all
        self.watched = watched  # [(output handed out as it is, its storage's cdata)]
        self.alone: list = []  # their holders when only the runner holds them (set_alone)
        # positions in ``watched`` of the outputs registered as cached tensors, until this
        # recording dies (positions, not tensors: a reference would change the holder counts)
        self.cached: list[int] = []
        self.seq = 0  # its place in its pool's Ledger
        self.risky: list[int] = []  # positions in ``watched`` of the outputs at risk
        self.risky_alone: list = []
        self.lent_once = False  # its gradients at risk were taken into .grad and then found alive
        self.task = -1  # the autograd graph task of its last replay (-1: none, a forward)
        # user outputs lent, not copied: [(output indices on one storage, its address, bytes)]
        self.lent: list[tuple[list[int], int, int]] = []
        self.lent_risky = False  # one of them lies where an earlier recording's replay writes
        self.handed_out: list = []  # the storages the last replay lent them through
        self.revoked_message = ""  # what reading one raises once revoked
        self.made: list[int] = []  # the addresses it registered in MADE
        self.lenders: list = []  # [(lender's weakref, index of an output on its memory)] (Note [Lent outputs read in place])
        self.used = 0  # when it last replayed (GraphRunner._drop_stale)

    def lend(self, outs: list) -> None:
        """Puts in ``outs`` the lent outputs, each group on a storage of its own over the
        graph's memory, which ``revoke`` can make unreadable without touching the graph's."""
        for indices, address, nbytes in self.lent:
            device = self.outputs[indices[0]].device
            storage = torch._C._construct_storage_from_data_pointer(address, device, nbytes)
            self.handed_out.append(storage)
            for i in indices:
                outs[i] = on_storage(storage, self.outputs[i])

    def revoke(self) -> None:
        """Makes what the last replay lent raise, with ``revoked_message``, when its data is read."""
        for storage in self.handed_out:
            if torch._C._storage_Use_Count(storage._cdata) > 1:  # someone still holds it
                torch._C._set_storage_data_ptr_access_error_msg(
                    storage._cdata, self.revoked_message)
        self.handed_out.clear()

    def __del__(self) -> None:
        if self.handed_out:  # their memory goes back to the pool with ``outputs``
            self.revoke()
        for _, address, _ in self.lent:
            if LENT.get(address) is not None and LENT[address]() in (self, None):
                del LENT[address]
        for ref, i in self.lenders:
            lender = ref()
            if lender is not None:
                lender.unwatch(self.outputs[i])
        for ptr in self.made:
            if MADE.get(ptr, 0) > 1:
                MADE[ptr] -= 1
            else:
                MADE.pop(ptr, None)
        if self.cached:
            # cudagraph trees turn the registry off when they reset (torch._dynamo.reset());
            # removing asserts that it is on, and entries left behind would keep their memory
            torch._C._set_cached_tensors_enabled(True)
            for j in self.cached:
                torch._C._remove_cached_tensor(self.watched[j][0])

    def set_alone(self) -> None:
        """Called where no local variable of the recording refers to an output."""
        self.alone = self._holders(range(len(self.watched)))
        self.risky_alone = self._holders(self.risky)
        for ref, i in self.lenders:
            lender = ref()
            if lender is not None:
                lender.watch(self, i)

    def watch(self, reader: Recording, i: int) -> None:
        """Watches output ``i`` of ``reader``, on memory this recording lends, held as it is
        now (Note [Lent outputs read in place]). Taken from ``reader`` here, so that no
        argument or local variable counts among its holders."""
        self.watched.append((reader.outputs[i], reader.outputs[i].untyped_storage()._cdata))
        py, impl, _ = self._holders([len(self.watched) - 1])[0]
        # its storage is this recording's, which every reader's tensor on it holds too
        self.alone.append((py, impl, ANY_COUNT))

    def unwatch(self, alias: torch.Tensor) -> None:
        for j in range(len(self.watched) - 1, -1, -1):  # watched ones added later than its own
            if self.watched[j][0] is alias:
                del self.watched[j], self.alone[j]
                return

    def _holders(self, positions) -> list:
        """Who holds the watched outputs at ``positions``: Python references, TensorImpl
        references, storage references, each output bound as ``_held_as`` binds it."""
        watched, counts = self.watched, []
        for j in positions:
            t, cdata = watched[j]
            counts.append((sys.getrefcount(t), t._use_count(), torch._C._storage_Use_Count(cdata)))
        return counts

    def _held_as(self, positions, alone: list) -> bool:
        """Whether the watched outputs at ``positions`` have the holders ``alone`` (the
        per-call check: one loop, cheapest count first, out at the first difference)."""
        watched, use_count, refcount = self.watched, torch._C._storage_Use_Count, sys.getrefcount
        for j, (py, impl, storage) in zip(positions, alone):
            t, cdata = watched[j]
            if use_count(cdata) != storage or t._use_count() != impl or refcount(t) != py:
                return False
        return True

    def free(self) -> bool:
        """Whether no output handed out as it is by the last replay is still referenced."""
        return not self.watched or self._held_as(range(len(self.watched)), self.alone)

    def risky_free(self) -> bool:
        """Whether no output at risk handed out by the last replay is still referenced."""
        return self._held_as(self.risky, self.risky_alone)

    def stop_lending(self) -> None:
        """Unregisters the gradients at risk (cached tensors), so that AccumulateGrad copies
        them into ``.grad`` from now on (Note [Memory a replay writes])."""
        lent = [j for j in self.cached if j in self.risky]
        if not lent:
            return
        self.lent_once = True
        torch._C._set_cached_tensors_enabled(True)
        for j in lent:
            torch._C._remove_cached_tensor(self.watched[j][0])
        self.cached = [j for j in self.cached if j not in lent]
        log.info("nvfuser_dtensor: gradients kept in .grad past the next forward (gradient accumulation?) lie "
                 "where an earlier CUDA graph writes: .grad gets copies of them from now on, and calls run "
                 "uncaptured until those kept now are released")
