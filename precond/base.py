"""The preconditioner interface.

Cheap parameters in ``__init__`` -> ``setup(A, device=...)`` once (all the
expensive work, in FP64 on the host) -> ``apply(r, out)`` as often as the solver
likes (``out <- M r``, in the storage precision, no allocation).

A preconditioner is device-neutral: it is set up *for* a device and stores its
operators there (:mod:`mpsolve.operator`: each binds the device's kernel once per
pair of vector dtypes); its set-up kernels (factorisations, gathers) are looked up
in the registry for the host device the set-up runs on (:func:`._util.setup_device`).
Nothing here names a device or imports a kernel module.

Every preconditioner is also a SciPy-compatible operator: it has ``shape``,
``dtype`` and ``matvec`` (host NumPy arrays in and out, whatever the device), so it
can be passed as ``M`` to ``scipy.sparse.linalg.cg`` and friends
(``aslinearoperator`` accepts it).
"""
from __future__ import annotations

import time
import zlib

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from mpsolve.backend import array_module, is_host, on_host, resolve_device, to_device, to_host
from mpsolve.kernels.registry import dtype_name
from mpsolve.precision import in_field, real_dtype

from ._util import ThreadBuffers, setup_device, wide_dtype

__all__ = ["Preconditioner", "SIDES"]

#: The sides a solver applies ``M`` on, as :meth:`Preconditioner.setup` takes them (None:
#: left); ``"symmetric"``: a method that needs a symmetric ``M`` (CG, MINRES).
SIDES = (None, "left", "right", "symmetric")


class Preconditioner:
    """Base class of mpsolve's preconditioners.

    Parameters
    ----------
    dtype : {"float32", "float64"} or None
        Storage and apply precision (its complex twin for a complex ``A``,
        :func:`mpsolve.precision.in_field`).  ``None``: the precision the solver's policy
        asks for (``Precision.precond``), or FP32 when set up on its own.

    Attributes
    ----------
    shape : tuple
        ``(n, n)`` of the matrix set up for (before set-up reading it raises the
        "not set up" error: SciPy's solvers read an ``M``'s shape first).
    dtype : numpy.dtype
        float64 (complex128 once set up for a complex ``A``) for SciPy's benefit:
        ``matvec`` takes any numeric vector and returns ``M r`` in the promotion of its
        dtype with ``storage_dtype`` (FP64 vectors: FP64; FP32 vectors: FP32 from an FP32
        ``M``, FP64 from an FP64 one -- as NumPy promotes).
    storage_dtype : numpy.dtype
        Precision the preconditioner is stored and applied in (complex64 or
        complex128 for a complex ``A``: the set-up runs in complex128).
    device : str
        Device the preconditioner was set up for (its operators live there; ``apply``
        takes and returns that device's arrays).
    nbytes : int
        Memory held by the set-up preconditioner.
    setup_time : float
        Seconds the last ``setup`` took.
    """

    #: True when ``M`` is symmetric positive definite for SPD ``A`` (usable with CG).
    symmetric = True
    name = "preconditioner"
    #: True when the class sets up and applies complex matrices (stored in the complex twin
    #: of its dtype); ``method="auto"`` offers only these for a complex ``A``
    supports_complex = False
    #: False while set up inside :class:`~mpsolve.precond.Reordered` (on the MC64-permuted
    #: matrix): its set-up errors then do not suggest ``reorder='mc64'`` again
    reorder_hint = True

    def __new__(cls, *args, **kwargs):
        # ``ILU0(A)`` reads like SciPy's ``spilu(A)``, but the constructor takes only the
        # cheap parameters: a matrix there would be taken for one of them (``dtype=A``
        # reads as ``A.dtype``) and leave a preconditioner that is not set up.
        for value in (*args, *kwargs.values()):
            if sp.issparse(value) or isinstance(value, spla.LinearOperator) or (
                    isinstance(value, np.ndarray) and value.ndim == 2):
                raise TypeError(
                    f"{cls.__name__}() takes its parameters, not the matrix: set it up "
                    f"with {cls.__name__}(...).setup(A), or pass M={cls.__name__}() "
                    "to a solver, which sets it up on its A"
                )
        return super().__new__(cls)

    def __init__(self, dtype=None):
        self._dtype_request = _storage_name(dtype, ("float32", "float64"))
        self.shape = None
        self.storage_dtype = None
        self.setup_time = 0.0
        self.dtype = np.dtype(np.float64)
        self.device = None
        self._setup_device = None
        self._side = "left"
        self._A_id = None
        self._op = None
        self._top = None
        self._bound = {}
        #: how many times :meth:`setup_canonical` ran: a compiled Krylov loop made from the
        #: arrays of one set-up (:meth:`fusable`) is kept while this count stays the same
        self.setups = 0
        #: :func:`matrix_key` of the matrix a *solve* set this up for (:func:`setup_for_solve`);
        #: ``None`` when the caller set it up (then it is theirs, used as it is)
        self._solve_key = None

    def __getstate__(self):
        # a pickle or copy keeps the stored operators; the bound kernels (compiled
        # closures) and the array module are looked up again where it is used
        state = self.__dict__.copy()
        state["_bound"] = {}
        state["_top"] = None                    # (M^T's operator: made again at its first use)
        if "_xp" in state:
            state["_xp"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        if "_xp" in state:
            self._xp = array_module(self.device)

    # ----------------------------------------------------------------- protocol
    @property
    def shape(self):
        s = self.__dict__.get("_shape")
        if s is None:
            self._check_ready()
        return s

    @shape.setter
    def shape(self, value):
        self._shape = value

    @property
    def is_setup(self) -> bool:
        return self.storage_dtype is not None

    def setup(self, A, dtype=None, device=None, side=None):
        """Build the preconditioner for ``A`` (any SciPy sparse format or dense).

        ``dtype`` is used only when none was given to the constructor; ``device``
        (a name of :data:`mpsolve.backend.DEVICES`) is where the stored operators
        live and ``apply`` runs -- by default the device of ``A`` (the CPU for
        NumPy/SciPy data).  ``side`` (``"left"``, the default, or ``"right"``) is the
        side the solver applies ``M`` on; preconditioners whose natural form depends
        on it (an approximate inverse: ``M A ~ I`` or ``A M ~ I``) choose by it when
        their variant is ``"auto"``.  ``"symmetric"`` (PETSc's ``PC_SYMMETRIC``) says
        that the method needs a symmetric ``M`` (CG, MINRES): such a preconditioner
        then takes its symmetric form.  Returns ``self``.
        """
        from mpsolve._sparse import canonical_csr, check_matrix

        device = resolve_device(device, A)
        if not on_host(A) and hasattr(A, "get"):
            A = A.get()                 # a device sparse matrix: set up from a host copy
        A = check_matrix(A, "A")
        if not sp.issparse(A):
            raise TypeError(
                f"{type(self).__name__} is set up from the entries of A, but A is an operator "
                f"without them ({type(A).__name__}): pass A as a sparse matrix or an ndarray")
        return self.setup_canonical(canonical_csr(A), dtype=dtype, device=device, side=side)

    def setup_canonical(self, C, dtype=None, device=None, side=None):
        """:meth:`setup` for a matrix already checked and in canonical CSR form
        (:func:`mpsolve._sparse.canonical_csr`), as ``make_problem`` hands it over:
        no second check, no copy.  Returns ``self``."""
        if side not in SIDES:
            raise ValueError(f"side={side!r}: use 'left', 'right', 'symmetric' (a method "
                             "that needs a symmetric M: CG) or None (left)")
        self._solve_key = None                  # set up by the caller (setup_for_solve: not)
        self._side = side or "left"
        device = resolve_device(device, C)
        if C.dtype.kind not in "fc" or C.dtype.itemsize > (16 if C.dtype.kind == "c" else 8):
            # integers, booleans, long double: set up in FP64
            from mpsolve._sparse import keep_block_size

            C = keep_block_size(C.astype(wide_dtype(C.dtype)), C)
        want = self._dtype_request or _storage_name(dtype, _STORAGE) or "float32"
        # a complex A is stored in the complex twin of the requested precision
        want = in_field(real_dtype(want), C.dtype.kind == "c")
        self.device = device
        self._setup_device = setup_device(device)
        self.storage_dtype = None               # not set up until this set-up succeeds
        self._op = None
        self._top = None                        # M^T's operator: made at its first use
        self._bound = {}
        t0 = time.perf_counter()
        self._setup(C, want)
        self.setup_time = time.perf_counter() - t0
        self.shape = C.shape
        self.storage_dtype = want
        self.dtype = np.dtype(np.complex128 if C.dtype.kind == "c" else np.float64)
        self.setups = getattr(self, "setups", 0) + 1
        return self

    def _setup(self, C, dtype):  # pragma: no cover - abstract
        """Build the stored operator(s) for canonical CSR ``C`` (FP64 set-up; store in
        ``dtype`` on ``self.device``, set-up kernels from ``self._setup_device``).
        Subclasses with a single operator set ``self._op`` (anything with ``bind``)."""
        raise NotImplementedError

    def apply(self, r, out):
        """``out <- M r``; ``r`` and ``out`` are contiguous 1-D arrays of length ``n`` on
        the device, FP32 or FP64 (complex64/complex128 for a complex ``M``); anything else
        is refused (the kernels would read and write past the arrays).

        The operator's kernel is bound once per pair of dtypes (cached)."""
        r = self._check_vectors(r, out)
        key = (r.dtype, out.dtype)
        f = self._bound.get(key)
        if f is None:
            f = self._bound[key] = self._op.bind(r.dtype, out.dtype)
        f(r, out)  # out = M r

    def apply_transpose(self, r, out):
        """``out <- M^T r``: the plain transpose, also for a complex ``M`` (PETSc's
        ``PCApplyTranspose``; :meth:`rmatvec` gives ``M^H``).  Same vectors as
        :meth:`apply`.

        The transposed operator is made from the stored one at the first call and kept
        (the stored values moved, never rounded again: ``M^T`` is the exact transpose of
        the stored ``M``, to the rounding of the apply's sums; a symmetric form applies
        ``M`` itself).  For ILU-type factors ``(L D U')^{-T} = (U'^T D L^T)^{-1}``: two
        sweeps again, on the transposed factors (as much memory again as the factors)."""
        r = self._check_vectors(r, out)
        key = ("T", r.dtype, out.dtype)
        f = self._bound.get(key)
        if f is None:
            if getattr(self, "_top", None) is None:
                self._top = self._transpose_operator()
            f = self._bound[key] = self._top.bind(r.dtype, out.dtype) \
                if hasattr(self._top, "bind") else self._top
        f(r, out)  # out = M^T r

    def _transpose_operator(self):
        """The stored operator of ``M^T`` (anything with ``bind``, or a callable ``f(r,
        out)``): ``self._op.transposed()`` where ``apply`` is the plain ``out = op r``.  A
        class whose ``apply`` does more overrides this (or :meth:`apply_transpose`)."""
        if type(self).apply is not Preconditioner.apply or self._op is None:
            raise NotImplementedError(f"{type(self).__name__}: no transpose apply")
        return self._op.transposed()

    def _check_vectors(self, r, out):
        """``apply``'s argument check: set up, both ``(n,)`` and C-contiguous, ``out``
        writable (cheap: a few attribute reads per call; the kernels index raw memory).
        Returns ``r``, or a copy of it where it overlaps ``out`` (``apply(r, r)``: a sparse
        product would read entries of ``r`` it has overwritten)."""
        if self.storage_dtype is None:
            self._check_ready()
        n = self.shape[0]
        if not (hasattr(r, "flags") and hasattr(out, "flags")):
            bad = "r" if not hasattr(r, "flags") else "out"
            raise TypeError(f"{type(self).__name__}.apply: {bad} is a "
                            f"{type(r if bad == 'r' else out).__name__}, not an array of the "
                            "device (matvec takes anything array-like and allocates out)")
        # (CuPy's flags have no writeable: its arrays are)
        writeable = getattr(out.flags, "writeable", True)
        if r.shape != (n,) or out.shape != (n,) or not (
                r.flags.c_contiguous and out.flags.c_contiguous and writeable):
            if not writeable:
                raise ValueError(f"{type(self).__name__}.apply: out is read-only; pass a "
                                 "writable array (or use matvec, which allocates it)")
            for name, v in (("r", r), ("out", out)):
                if v.shape != (n,):
                    raise ValueError(f"{type(self).__name__}.apply: {name} has shape "
                                     f"{v.shape}, expected ({n},) (matvec takes (n,) or "
                                     "(n, 1) and allocates out)")
                if not v.flags.c_contiguous:
                    raise ValueError(f"{type(self).__name__}.apply: {name} is not contiguous; "
                                     "pass np.ascontiguousarray(...)")
        if ("ok", r.dtype, out.dtype) not in self._bound:     # (once per pair of dtypes)
            self._check_dtypes(r, out)
            self._bound["ok", r.dtype, out.dtype] = True
        if array_module(self.device).may_share_memory(r, out):
            r = r.copy()
        return r

    def _check_dtypes(self, r, out):
        """The vector dtypes the kernels take: FP32/FP64, complex for a complex ``M``."""
        ok = ("float32", "float64") + (("complex64", "complex128") if self.dtype.kind == "c"
                                       else ())
        for name, v in (("r", r), ("out", out)):
            if v.dtype.name not in ok:
                raise TypeError(f"{type(self).__name__}.apply: {name} has dtype "
                                f"{v.dtype.name}; use one of {list(ok)} (matvec converts)")
            if not v.dtype.isnative:
                raise TypeError(f"{type(self).__name__}.apply: {name} has the non-native "
                                f"byte order {v.dtype.str!r}; pass "
                                f"{name}.astype({v.dtype.name!r}) (matvec converts)")

    def linear_apply(self, rdtype, odtype) -> bool:
        """Is ``apply(r, out)`` linear to the working precision for these vector dtypes?

        True only where ``r`` and ``out`` are FP64 (or complex128) and the apply provably
        carries every sum and product in that precision (FP32 *stored* values widen
        exactly): then ``M (a r + b s) = a M r + b M s`` to FP64 rounding, and
        right-preconditioned GMRES may form ``x += M (V y)`` instead of keeping every
        ``M v_j`` (:mod:`mpsolve.krylov.gmres`).  False (this default) where that is not
        known: FP32 vectors or row sums, an unknown apply, a subclass that overrides
        ``apply`` below the class that vouches for it (:meth:`_linear`)."""
        wide = (np.dtype(np.float64), np.dtype(np.complex128))
        if not self.is_setup or np.dtype(rdtype) not in wide or np.dtype(odtype) not in wide:
            return False
        for cls in type(self).__mro__:
            if "_linear" in vars(cls):
                return bool(self._linear())
            if "apply" in vars(cls):
                return False                # apply changed below the class that vouches
        return False

    def _linear(self) -> bool:
        """:meth:`linear_apply` for FP64 vectors, decided by the class whose ``apply`` this
        is (it must override this together with any change of ``apply``).  Default:
        unknown, False."""
        return False

    def fusable(self):
        """``apply`` as a small fixed program for the compiled Krylov loops, or ``None``.

        A set-up preconditioner whose apply is one of the programs of
        :mod:`mpsolve.kernels.fused` returns its stored arrays: ``("diag", (d,), None)``,
        ``("csr", ((indptr, indices, data), ...), mode)`` (CSR products applied in order,
        row sums ``"acc64"`` or ``"acc32"``) or ``("ilu", (lptr, lind, lval, uptr, uind,
        uval, dinv), None)``.  ``None`` (this default): the solver calls :meth:`apply`.
        The description must compute exactly what :meth:`apply` computes."""
        return None

    def apply_block(self, R, Z):
        """``Z <- M R`` for ``(n, k)`` C-contiguous blocks, one column per right-hand side.

        Where the stored operator has a block kernel (Jacobi's diagonal, ILU(0)'s sweeps
        with ``k`` right-hand sides per row, an ISAI's sparse products: one sweep over the
        stored operator for all ``k`` columns) it is used; otherwise (block operators:
        BlockJacobi, BILU(0), Block-ISAI; ILUT and reordered preconditioners) ``apply`` runs
        on each column in turn through a contiguous scratch column (correct, not faster)."""
        if self.storage_dtype is None:
            self._check_ready()
        n = self.shape[0]
        if R.ndim != 2 or R.shape[0] != n or Z.shape != R.shape or not (
                R.flags.c_contiguous and Z.flags.c_contiguous):
            raise ValueError(f"{type(self).__name__}.apply_block: R and Z must be C-contiguous "
                             f"arrays of the same shape ({n}, k); got {R.shape} and {Z.shape}"
                             + ("" if R.flags.c_contiguous and Z.flags.c_contiguous else
                                ", not both C-contiguous (np.ascontiguousarray)"))
        if (R.dtype, Z.dtype) not in self._bound:
            self._check_dtypes(R, Z)
        if not getattr(Z.flags, "writeable", True):
            raise ValueError(f"{type(self).__name__}.apply_block: Z is read-only; pass a "
                             "writable array")
        if array_module(self.device).may_share_memory(R, Z):
            R = R.copy()                        # (Z = M Z: a product would read overwritten R)
        f = self._block_apply(R.dtype, Z.dtype)
        if f is not None:
            f(R, Z)  # Z = M R, one sweep
            return
        xp = array_module(self.device)
        key = (R.dtype, Z.dtype, R.shape[0])
        local = self.__dict__.get("_columns")
        if local is None:
            local = self.__dict__.setdefault("_columns", ThreadBuffers())
        bufs = local.d.get(key)                 # (per thread: applies run concurrently)
        if bufs is None:
            bufs = local.d[key] = (xp.empty(R.shape[0], R.dtype), xp.empty(R.shape[0], Z.dtype))
        r, z = bufs
        for c in range(R.shape[1]):
            r[:] = R[:, c]
            self.apply(r, z)  # z = M r
            Z[:, c] = z

    def _block_apply(self, rd, zd):
        """The block kernel of :meth:`apply_block` (cached), or ``None``: the stored
        operator's ``bind_block`` where ``apply`` is the plain operator apply."""
        key = ("block", rd, zd)
        if key not in self._bound:
            op = self._block_operator()
            self._bound[key] = None if op is None else op.bind_block(rd, zd)
        return self._bound[key]

    def _block_operator(self):
        """The operator whose block kernel :meth:`apply_block` may use: ``self._op`` when
        ``apply`` is this class's plain ``out = op r`` (a subclass that overrides ``apply``
        -- a permutation, a scaling around the operator -- says so by overriding this)."""
        if type(self).apply is Preconditioner.apply and hasattr(self._op, "bind_block"):
            return self._op
        return None

    @property
    def nbytes(self) -> int:
        return int(self._op.nbytes) if self._op is not None else 0

    def diagnose(self, C):
        """Why this preconditioner may have cost a solve its convergence, for the status of
        a solve that did not converge (``None``: nothing to say).  ``C``: the checked
        canonical CSR of ``A``.  Called only after a failed solve, so it may cost a few
        products with ``A``."""
        return None

    # ------------------------------------------------------------ conveniences
    def _check_ready(self):
        if not self.is_setup:
            raise RuntimeError(
                f"{type(self).__name__} is not set up: call .setup(A) first "
                "(mpsolve's solvers do this for you when you pass it as M; SciPy's do not)"
            )

    def matvec(self, r):
        """``M @ r`` into a new array (SciPy's operator protocol)."""
        return self._product(r, self.apply)

    def rmatvec(self, r):
        """``M^H @ r`` into a new array (SciPy's ``rmatvec``: the conjugate transpose;
        :meth:`apply_transpose` for the plain one)."""
        if self.is_setup and self.dtype.kind == "c":
            xp = np if on_host(r) else array_module(self.device)
            return xp.conj(self._product(xp.conj(r), self.apply_transpose))
        return self._product(r, self.apply_transpose)

    def _product(self, r, apply):
        """``apply`` (``M`` or ``M^T``) on ``r`` into a new array: ``r`` any numeric 1-D or
        ``(n, 1)`` array, host or device; the result in the promotion of its dtype with
        the storage precision."""
        self._check_ready()
        if not on_host(r):                  # a device array: M r on the device, returned there
            return self._product_on_device(r, apply)
        r = np.asarray(r)
        squeeze = r.ndim == 2
        r1 = np.ascontiguousarray(r.reshape(-1))
        if r1.dtype not in (np.float32, np.float64, np.complex64, np.complex128):
            r1 = r1.astype(np.float64)
        if self.dtype.kind == "c" and r1.dtype.kind != "c":
            r1 = r1.astype(self.dtype)      # a complex M applied to a real vector
        elif self.dtype.kind != "c" and r1.dtype.kind == "c":
            # a real M is linear over the complex numbers: M (u + iv) = M u + i M v
            out = self._product(r1.real, apply) + 1j * self._product(r1.imag, apply)
            return out.reshape(-1, 1) if squeeze else out
        if r1.shape[0] != self.shape[0]:
            raise ValueError(f"r has length {r1.shape[0]}, expected {self.shape[0]}")
        want = np.result_type(r1.dtype, self.storage_dtype)
        if r1.dtype != want:
            r1 = r1.astype(want)            # an FP32 r with an FP64 M: M r in FP64
        if is_host(self.device):
            out = np.empty_like(r1)
            apply(r1, out)
        else:  # host in, host out: SciPy interop on any device
            rd = to_device(r1, self.device)
            od = array_module(self.device).empty_like(rd)
            apply(rd, od)
            out = to_host(od)
        return out.reshape(-1, 1) if squeeze else out

    def _product_on_device(self, r, apply):
        if is_host(self.device):
            raise TypeError(f"r is a device array but {type(self).__name__} is set up on "
                            f"device {self.device!r}: set it up with device='gpu', or pass "
                            "a NumPy array")
        xp = array_module(self.device)
        squeeze = r.ndim == 2
        r1 = xp.ascontiguousarray(r.reshape(-1))
        if r1.dtype.kind not in "fc" or r1.dtype.itemsize < 4:
            r1 = r1.astype(np.float64)
        if self.dtype.kind == "c" and r1.dtype.kind != "c":
            r1 = r1.astype(self.dtype)
        elif self.dtype.kind != "c" and r1.dtype.kind == "c":
            out = self._product_on_device(xp.ascontiguousarray(r1.real), apply) \
                + 1j * self._product_on_device(xp.ascontiguousarray(r1.imag), apply)
            return out.reshape(-1, 1) if squeeze else out
        if r1.shape[0] != self.shape[0]:
            raise ValueError(f"r has length {r1.shape[0]}, expected {self.shape[0]}")
        want = np.result_type(r1.dtype, self.storage_dtype)
        if r1.dtype != want:
            r1 = r1.astype(want)
        out = xp.empty_like(r1)
        apply(r1, out)
        return out.reshape(-1, 1) if squeeze else out

    def __matmul__(self, r):
        on_dev = not on_host(r)             # CuPy in, CuPy out (matvec checks the device)
        r = r if on_dev else np.asarray(r)
        if r.ndim == 2 and r.shape[1] > 1:
            cols = [self.matvec(r[:, j]) for j in range(r.shape[1])]
            return array_module(self.device).stack(cols, axis=1) if on_dev \
                else np.column_stack(cols)
        return self.matvec(r)

    def aslinearoperator(self) -> spla.LinearOperator:
        """This preconditioner as a ``scipy.sparse.linalg.LinearOperator``."""
        self._check_ready()
        return spla.LinearOperator(self.shape, matvec=self.matvec, rmatvec=self.rmatvec,
                                   dtype=self.dtype)

    def __repr__(self):
        state = (f"{self.shape[0]}x{self.shape[1]}, {dtype_name(self.storage_dtype)}, "
                 f"{self.nbytes / 2**20:.2f} MiB" if self.is_setup else "not set up")
        return f"<{type(self).__name__} ({state})>"


def matrix_key(C) -> tuple:
    """A fingerprint of the canonical CSR matrix ``C`` (one pass over its arrays, far less
    than any set-up): its shape, pattern size, dtype and the CRC-32 of the bytes of its
    row pointers, column indices and values -- any change of any bit changes it but for
    a 2^-32 chance (sums of the values, as before, missed values moved within a column
    and changes below their rounding).  A preconditioner a solve set up for one matrix is
    set up again when a later solve hands it a matrix with another key."""
    crc = 0
    for arr in (C.indptr, C.indices, C.data):
        crc = zlib.crc32(np.ascontiguousarray(arr).view(np.uint8), crc)
    return (C.shape, C.nnz, C.dtype.str, crc)


#: The storage dtypes ``setup(A, dtype=...)`` takes (a complex one: its real twin's
#: precision, as the complex A decides the field).
_STORAGE = ("float32", "float64", "complex64", "complex128")


def _storage_name(dtype, allowed):
    """``dtype``'s name where it is one of ``allowed`` (None for None), else a ValueError
    naming the argument."""
    if dtype is None:
        return None
    try:
        name = dtype_name(dtype)
    except TypeError:
        name = None
    if name not in allowed:
        raise ValueError(f"dtype={dtype!r}: use 'float32' or 'float64' (the storage "
                         "precision)")
    return name


def setup_for_solve(M, C, **kw):
    """``M.setup_canonical(C, **kw)`` by a solve (not by the caller): recorded with ``C``'s
    :func:`matrix_key`, so that ``M`` passed again with another matrix is set up for it
    (PETSc's rule: a new operator, a new preconditioner) instead of applying the old one."""
    M.setup_canonical(C, **kw)
    M._solve_key = matrix_key(C)
    M._solve_args = (kw.get("side"), str(kw.get("dtype")))
    return M


def needs_setup(M, C, args=None) -> bool:
    """Whether a solve on the canonical CSR ``C`` must set ``M`` up: it is not set up, or a
    solve set it up for another matrix -- or, with ``args`` (``(side, dtype name)``), for
    another side or precision.  One the caller set up is theirs: used as it is."""
    if not M.is_setup:
        return True
    key = getattr(M, "_solve_key", None)
    if key is None or C is None:
        return False
    return key != matrix_key(C) or (args is not None and
                                    getattr(M, "_solve_args", None) != args)
