"""Two threads in one compiled loop: atomics, a spin barrier and the pairing handshake.

A Krylov iteration of a mid-sized system (a few thousand to a few hundred thousand
unknowns) is a handful of sweeps of tens of microseconds each.  Splitting each sweep in
a Numba parallel region costs a region's opening per sweep -- 55-80 us on a 2-vCPU
virtual machine whose OpenMP workers sleep (:mod:`._calibrate`) -- more than the sweep.
The team loops of :mod:`.team` open no region: two threads (the caller's and one helper)
each run the *whole* iteration on their own half of the rows and meet at a barrier
wherever a sweep needs the other half (a product reads all of ``p``; a dot product's two
halves are added).  A barrier costs the time a cache line takes to cross between cores
(well under a microsecond while both threads are running), so an iteration pays a few
microseconds where the region-per-sweep form paid hundreds: what PETSc's MPI ranks do
with their busy-polling ``MPI_Allreduce``.

Numba's CPU target has no atomics, so they are LLVM instructions here (``@intrinsic``):
an acquire load, a release store, a compare-and-swap, on an element of an int64 array,
and ``pause`` (x86) / ``yield`` (AArch64) in spin loops.  The release store of a thread's
epoch after its plain stores of partial sums, and the acquire load of the other's, are
what make those partial sums visible to the other thread (C++'s release/acquire pairs).

The pairing handshake (:func:`claim`, :func:`await_partner`) makes the loops safe when
the helper does not come: the caller waits a bounded number of spins for the helper to
claim the run and otherwise claims it for itself alone (solo), with one compare-and-swap
deciding, so a late helper finds the run taken and returns.  A solo run computes both
halves in turn with the same arithmetic, so its results are the pair's bit for bit
(``tests/test_team.py``).  A waiting thread spins with ``pause`` and yields its core to
the scheduler every :data:`SPIN_YIELD` spins, so a partner that lost its core (a loaded
machine) gets it back rather than waiting out a time slice behind a spinning thread.

Numba's disk cache of the loops that call these functions (:mod:`.team`) is keyed on
their own file: after editing this module, clear ``kernels/cpu/__pycache__`` (Numba does
not track that dependency, and a cached loop keeps the old barrier and constants).
"""
from __future__ import annotations

import platform

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from ._config import JIT

__all__ = ["load_acquire", "store_release", "cas", "cpu_relax", "sched_yield", "barrier",
           "claim", "await_partner", "SYNC_SIZE", "STATE", "WAITING", "PAIRED", "SOLO"]

#: Layout of a team's int64 ``sync`` array: the pairing state, then the two threads'
#: barrier epochs, each on its own 64-byte cache line (no false sharing between them).
STATE = 0
EPOCH = (8, 16)
SYNC_SIZE = 24
#: Pairing states (:func:`claim`).
WAITING, PAIRED, SOLO = 0, 1, 2
#: Spins between two ``sched_yield`` calls of a waiting thread (a ``pause`` is 10-140
#: cycles: a few to about 50 microseconds a round).
SPIN_YIELD = 1024
#: Yield rounds the caller waits for the helper to claim a run before taking it alone
#: (milliseconds on any machine; a woken thread pool worker comes in 10-100 us).
PARTNER_ROUNDS = 200

_ARCH = platform.machine().lower()


def _element_ptr(context, builder, aryty, ary, idx, idxty):
    arr = context.make_array(aryty)(context, builder, ary)
    idx = context.cast(builder, idx, idxty, types.intp)
    return cgutils.get_item_pointer(context, builder, aryty, arr, [idx])


def _is_int64_array(t):
    return isinstance(t, types.Array) and t.ndim == 1 and t.dtype == types.int64


@intrinsic
def load_acquire(typingctx, ary, idx):
    """``ary[idx]`` as an atomic load with acquire ordering (``ary``: 1-D int64)."""
    if not (_is_int64_array(ary) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ptr = _element_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        return builder.load_atomic(ptr, "acquire", 8)

    return types.int64(ary, idx), codegen


@intrinsic
def store_release(typingctx, ary, idx, val):
    """``ary[idx] = val`` as an atomic store with release ordering: every store of this
    thread before it is seen by a thread whose acquire load reads ``val``."""
    if not (_is_int64_array(ary) and isinstance(idx, types.Integer)
            and isinstance(val, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ptr = _element_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        v = context.cast(builder, args[2], sig.args[2], types.int64)
        builder.store_atomic(v, ptr, "release", 8)
        return context.get_dummy_value()

    return types.none(ary, idx, val), codegen


@intrinsic
def cas(typingctx, ary, idx, expected, new):
    """Atomically: ``old = ary[idx]; if old == expected: ary[idx] = new``; returns ``old``
    (sequentially consistent)."""
    if not (_is_int64_array(ary) and isinstance(idx, types.Integer)
            and isinstance(expected, types.Integer) and isinstance(new, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ptr = _element_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        e = context.cast(builder, args[2], sig.args[2], types.int64)
        v = context.cast(builder, args[3], sig.args[3], types.int64)
        pair = builder.cmpxchg(ptr, e, v, "seq_cst", "seq_cst")
        return builder.extract_value(pair, 0)

    return types.int64(ary, idx, expected, new), codegen


@intrinsic
def cpu_relax(typingctx):
    """The spin-wait hint: x86's ``pause``, AArch64's ``yield``, nothing elsewhere."""
    def codegen(context, builder, sig, args):
        # LLVM's intrinsics, not inline assembly (Numba's JIT has no assembly parser)
        if _ARCH in ("x86_64", "amd64", "i386", "i686"):
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause")
            builder.call(fn, [])
        elif _ARCH in ("aarch64", "arm64"):
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [ir.IntType(32)]),
                "llvm.aarch64.hint")
            builder.call(fn, [ir.Constant(ir.IntType(32), 1)])      # hint #1: yield
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def sched_yield(typingctx):
    """POSIX ``sched_yield()``: give the core to another runnable thread, if any.  Declared
    by name (resolved in the process, as libc's), not through a ctypes address, so the
    functions calling it stay in Numba's disk cache."""
    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.IntType(32), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "sched_yield")
        builder.call(fn, [])
        return context.get_dummy_value()

    return types.none(), codegen


@njit(**JIT)
def _wait_for(sync, slot, value):
    """Spin until ``sync[slot] >= value`` (acquire)."""
    spins = 0
    while load_acquire(sync, slot) < value:
        cpu_relax()
        spins += 1
        if spins == SPIN_YIELD:
            sched_yield()
            spins = 0


@njit(**JIT)
def barrier(sync, tid, epoch):
    """Both threads of a pair meet: thread ``tid`` (0 or 1) publishes that it reached
    barrier number ``epoch`` (1, 2, ... in the same order on both threads) and waits until
    the other did.  The stores either thread made before are seen by the other after."""
    store_release(sync, EPOCH[tid], epoch)
    _wait_for(sync, EPOCH[1 - tid], epoch)


@njit(**JIT)
def claim(sync, tid):
    """The helper's (``tid`` 1) first step: True when it joins the run (the caller had not
    yet taken it alone), False when it must return at once."""
    if tid == 0:
        return True
    return cas(sync, STATE, WAITING, PAIRED) == WAITING


@njit(**JIT)
def await_partner(sync, rounds):
    """The caller's first step: wait for the helper's claim up to ``rounds`` yield rounds,
    then take the run alone.  True: paired; False: solo (one compare-and-swap decides, so
    the helper's late claim fails; a run already marked solo -- no helper to ask -- is
    solo at once)."""
    for _ in range(rounds):
        for _ in range(SPIN_YIELD):
            state = load_acquire(sync, STATE)
            if state == PAIRED:
                return True
            if state == SOLO:
                return False
            cpu_relax()
        sched_yield()
    return cas(sync, STATE, WAITING, SOLO) == PAIRED
