"""mpsolve preconditioners inside PETSc, through petsc4py's Python PC.

Each class here follows petsc4py's Python-PC protocol (a plain class; PETSc
calls the methods it finds):

``setUp(pc)``
    reads the operator with ``pc.getOperators()`` and builds the mpsolve
    preconditioner on its *local* CSR block (the whole matrix in serial; on
    ``-pc_type bjacobi`` each rank's sub-PC is handed its diagonal block; an
    MPI matrix given directly is reduced to its local diagonal block with
    ``MatGetDiagonalBlock``; a matrix-free ``P`` -- a shell -- is refused, but by
    ``Jacobi``, which takes its diagonal).  It rebuilds only when the operator changed
    (PETSc's object id and state) or an option did (a later ``KSPSetFromOptions``: then
    at the next apply, PETSc calling no set-up for an unchanged operator);
    ``setup_count`` counts the builds (one context handed to two PCs sets itself up
    for the PC it serves).  Storage is FP32 unless
    a ``dtype`` (or precision) is given; where the values do not fit FP32 it is FP64
    instead, as ``mpsolve.solve`` escalates (``escalated`` says why, and ``view``) --
    unless FP32 was asked for: that set-up fails, as below.
    A BAIJ/SBAIJ/dense ``P`` is read through an AIJ copy (``P`` itself is never
    changed), and its block size (``MatGetBlockSize``) is the block classes' unless
    ``block_size`` is given.  A set-up that fails on the matrix (a zero pivot, NaN
    entries, an M the chosen storage cannot hold) follows
    PETSc's convention: the PC's failed reason is set, the apply returns Inf and the KSP
    stops with ``KSP_DIVERGED_PC_FAILED`` (petsc4py's ``DIVERGED_PCSETUP_FAILED``;
    ``failed`` and ``view`` say why; the reason is positive, ``FACTOR_OTHER`` where
    no pivot is to blame, as PETSc combines the ranks' reasons by their maximum);
    ``Jacobi`` uses 1 where the diagonal is zero, as PCJACOBI.  The constructor refuses
    keywords its class does not take, and a bad option value is refused by
    ``KSPSetFromOptions``, naming the option.
``apply(pc, x, y)``
    ``y = M x`` on the vectors' own arrays (``x.array_r``, ``y.array``): no copies.
    With ``device=`` a device without host arrays (the keyword of the class, or
    ``-[prefix]mpsolve_device``; ``mpsolve.backend.DEVICES`` names them), the
    preconditioner is set up for that device and each apply copies ``x`` to it and
    ``M x`` back into ``y`` (two vectors allocated on the device once per set-up): the
    KSP stays on the host, only the preconditioner runs on the device.
``matApply(pc, X, Y)``
    several right-hand sides: the columns of the dense matrices, in place.
``applySymmetricLeft(pc, x, y)`` / ``applySymmetricRight`` (``Jacobi`` only)
    ``y = D^{-1/2} x``: ``-ksp_pc_side symmetric``, as PCJACOBI.
``setFromOptions(pc)``
    reads ``-[prefix]mpsolve_precision`` (a preset: its preconditioner precision
    is the storage, FP64 where FP32 cannot hold ``M``, as without the option),
    ``-[prefix]mpsolve_dtype`` (``float32``/``float64``, overrides: no escalation),
    ``-[prefix]mpsolve_block_size``, ``-[prefix]mpsolve_sparsity_power``,
    ``-[prefix]mpsolve_variant``, ``-[prefix]mpsolve_accumulate``,
    ``-[prefix]mpsolve_side``, ``-[prefix]mpsolve_device``; an option without the prefix
    is used when the prefixed one is absent; values in any case, as PETSc's.  (Not
    listed by ``-help``.)
``view(pc, viewer)`` / ``reset(pc)``
    ``view`` on several ranks prints each rank's preconditioner (synchronised).

Use from the options database::

    -ksp_type gmres -pc_type python -pc_python_type mpsolve.petsc.BlockISAI
    mpiexec -n 2 ... -pc_type bjacobi -sub_pc_type python \\
        -sub_pc_python_type mpsolve.petsc.BlockISAI -sub_mpsolve_block_size 3

or from Python: ``pc.setType("python"); pc.setPythonContext(mpsolve.petsc.ISAI())``.

Preconditioning side.  A PETSc PC cannot ask its KSP which side it is applied on,
and an approximate inverse should match it (``variant="auto"``: ``M A ~ I`` on
the left, ``A M ~ I`` on the right; symmetric ``A`` gets the SPD form either way).
The side is taken from, in order: ``-mpsolve_side`` (an option overrides what code
set, as PETSc's options do), the ``side=`` keyword of the class
(``mpsolve.petsc.ISAI(side="right")``), ``-ksp_pc_side``, then the KSP type in the
options database (:data:`RIGHT_ONLY_KSP`: ``fgmres``, ``fbcgs``, ``gcr``, ... precondition
on the right only, as do :data:`NORM_SIDE_KSP` under ``-ksp_norm_type unpreconditioned``;
CG, MINRES and their kin (:data:`SYMMETRIC_KSP`) need a symmetric ``M``, also where
``-ksp_pc_side left`` is given: side ``"symmetric"``, PETSc's ``PC_SYMMETRIC``, under which
``variant="auto"`` takes the SPD form even where assembly noise leaves ``A`` a little
nonsymmetric; a block Jacobi sub-PC whose sub-KSP is ``preonly`` takes the outer KSP's);
otherwise PETSc's default, left.  A KSP configured in code
(``ksp.setPCSide(PETSc.PC.Side.RIGHT)``, ``ksp.setType("cg")``) should pass
``side="right"`` (``side="symmetric"``) to the context.

Linearity.  PETSc's Krylov methods other than the flexible ones assume that ``M`` is one
fixed linear operator.  Every class's apply is (FP32 storage, FP64 row sums: the
(Block-)ISAI default ``accumulate="float64"``).  ``accumulate="float32"`` (or
``-mpsolve_accumulate float32``) makes ``M x`` linear only to FP32 rounding: use it with
the flexible KSPs only -- non-flexible BiCGSTAB, BCGSL and TFQMR then stop on a recursive
residual that the true one no longer follows (measured at ``rtol=1e-8``: true relative
residuals of 2e-7 to 2e-3 on 2-D diffusion and convection-diffusion, reported as
converged).

Scalar type.  The plug-in works in the scalar type PETSc was built with
(``PETSc.ScalarType``, :func:`scalar_dtype`): on a real build (float64) the operator and
the vectors are real; on a complex build (``--with-scalar-type=complex``) they are
complex128 and the preconditioner is set up and stored in the complex twin of its
precision (complex64 for ``float32``).  :func:`petsc_mat` and :func:`petsc_vec` turn
SciPy/NumPy data into PETSc objects and refuse complex data on a real build with an
error that says so (petsc4py's own message is a bare casting error).

(The PETSc *baseline* of ``mpsolve bench``, a serial KSP solve of a SciPy matrix, is
:func:`mpsolve.bench.baselines.petsc_solve`, not part of the plug-in.)
"""
from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from ._demote import PrecisionRangeError
from ._params import accepted_params, init_params
from ._sparse import canonical_csr
from .backend import array_module, download, is_host, resolve_device, upload
from .precision import PRESETS, float_name

__all__ = ["ISAI", "BlockISAI", "BlockJacobi", "BlockILU0", "ILU0", "Jacobi", "local_csr",
           "scalar_dtype", "petsc_mat", "petsc_vec"]

#: :meth:`_MpsolvePC._side_from_options`: the side the constructor was given stays
_KEEP = object()

#: KSP types that support right preconditioning only.
RIGHT_ONLY_KSP = ("fgmres", "fbcgs", "fbcgsr", "pipefgmres", "gcr", "pipebcgs", "qmrcgs")
#: KSP types that need a symmetric ``M`` (CG and its relatives, MINRES, SYMMLQ, the trust-
#: region CGs): the side ``"symmetric"``, under which ``variant="auto"`` takes the SPD form
SYMMETRIC_KSP = ("cg", "pipecg", "pipecg2", "pipecgrr", "pipelcg", "pipeprcg", "groppcg",
                 "fcg", "pipefcg", "cr", "pipecr", "minres", "symmlq", "nash", "stcg", "gltr",
                 "qcg")
#: KSP types PETSc runs right-preconditioned under ``-ksp_norm_type unpreconditioned``
#: (their left side supports the preconditioned norm only; PETSc 3.26's ``KSPSetUp`` side)
NORM_SIDE_KSP = ("gmres", "bcgs", "tfqmr", "cgs", "bcgsl", "lgmres", "dgmres", "pgmres",
                 "ibcgs", "idr", "tcqmr", "tsirm")


def scalar_dtype() -> np.dtype:
    """The scalar type of the installed PETSc (``PETSc.ScalarType``): float64 on a real
    build, complex128 on a complex one (float32 / complex64 on single-precision builds)."""
    from petsc4py import PETSc

    return np.dtype(PETSc.ScalarType)


def _check_scalar(dtype, name):
    """Refuse complex ``dtype`` on a real PETSc build, naming the argument."""
    st = scalar_dtype()
    if np.dtype(dtype).kind == "c" and st.kind != "c":
        raise TypeError(
            f"{name} is complex ({np.dtype(dtype).name}) but the installed PETSc is built "
            f"with real scalars (PETSc.ScalarType is {st.name}); use a PETSc configured "
            "with --with-scalar-type=complex (and its petsc4py), or solve the complex "
            "system with mpsolve.solve / mpsolve.gmres directly")
    return st


def _check_serial(comm, name):
    """Refuse a communicator of several ranks: the objects made here are sequential (each
    rank would hold the whole matrix, and petsc4py's errors say only "size(I) is 17")."""
    size = None if comm is None else (
        comm.getSize() if hasattr(comm, "getSize") else comm.Get_size())   # (mpi4py's)
    if size is not None and size > 1:
        raise ValueError(
            f"{name}: comm has {size} ranks, but it makes a sequential (one-rank) "
            "object: pass comm=PETSc.COMM_SELF (the default), or build the distributed Mat "
            "or Vec with PETSc (each rank setting its own rows)")


def petsc_mat(A, comm=None):
    """A sequential AIJ PETSc Mat holding the SciPy sparse (or dense) matrix ``A``, in
    PETSc's scalar type.

    Raises
    ------
    TypeError
        ``A`` is complex and the installed PETSc is real (the message says so).
    """
    from petsc4py import PETSc

    _check_serial(comm, "petsc_mat")
    A = canonical_csr(A if sp.issparse(A) else sp.csr_matrix(np.asarray(A)))
    st = _check_scalar(A.dtype, "A")    # (canonical: duplicates summed, as SciPy reads them)
    P = PETSc.Mat().createAIJ(size=A.shape, csr=(A.indptr.astype(PETSc.IntType),
                                                 A.indices.astype(PETSc.IntType),
                                                 A.data.astype(st)),
                              comm=comm or PETSc.COMM_SELF)
    P.assemble()
    return P


def petsc_vec(x, comm=None):
    """A sequential PETSc Vec holding a copy of the 1-D array ``x``, in PETSc's scalar
    type; a complex ``x`` on a real PETSc is refused as in :func:`petsc_mat`."""
    from petsc4py import PETSc

    _check_serial(comm, "petsc_vec")
    x = np.asarray(x)
    st = _check_scalar(x.dtype, "x")
    v = PETSc.Vec().createSeq(x.size, comm=comm or PETSc.COMM_SELF)
    v.array[:] = x.astype(st)
    return v


#: PETSc Mat types without stored entries: converting one to AIJ (what :func:`local_csr`
#: would do) applies it to every unit vector, n products -- hours for a large operator
MATRIX_FREE = frozenset({"shell", "python", "mffd", "composite", "normal", "normalh",
                         "transpose", "hermitiantranspose", "schurcomplement", "lrc",
                         "submatrix"})


def local_csr(P) -> sp.csr_matrix:
    """The local (diagonal-block) CSR matrix of a PETSc Mat, without PETSc-side copies
    where the format allows (AIJ); BAIJ/SBAIJ/dense are converted first -- an AIJ copy,
    destroyed after reading: the caller's Mat (and an MPI matrix's diagonal block) keeps
    its type and storage.  Values in PETSc's scalar type (:func:`scalar_dtype`)."""
    from petsc4py import PETSc

    mtype = P.getType()
    if P.getComm().getSize() > 1 or mtype.startswith("mpi"):
        P = P.getDiagonalBlock()
        mtype = P.getType()
    copy = None
    if mtype not in ("seqaij", "aij", "seqaijperm", "seqaijsell"):
        P = copy = P.convert("seqaij", PETSc.Mat())   # (no out: converted in place)
    try:
        indptr, indices, data = P.getValuesCSR()
        m, n = P.getSize()
        return sp.csr_matrix((np.asarray(data, dtype=scalar_dtype()), np.asarray(indices),
                              np.asarray(indptr)), shape=(m, n))
    finally:
        if copy is not None:
            copy.destroy()


class _MpsolvePC:
    """Shared behaviour of the Python-PC contexts (see the module docstring)."""

    precond_cls = None
    #: option name -> (constructor keyword, parser)
    _int_options = {"block_size": "block_size", "sparsity_power": "sparsity_power"}

    def __init__(self, **params):
        self.params = dict(params)
        unknown = sorted(set(self.params) - self._accepted() - {"dtype", "side", "device"})
        if unknown:
            raise TypeError(
                f"mpsolve.petsc.{type(self).__name__}: unknown keyword(s) {unknown}; it takes "
                f"{sorted(self._accepted() | {'side', 'device'})} (dtype: the storage "
                "precision, 'float32' or 'float64')")
        self.dtype = self.params.pop("dtype", None)   # storage precision (None: FP32)
        #: -mpsolve_precision's storage: the default where no dtype is given (escalated
        #: to FP64 where FP32 cannot hold M, as the default FP32 is)
        self._preset = None
        if self.dtype is not None:                    # checked now, as -mpsolve_dtype is
            name = float_name(self.dtype)
            if name is None:
                raise ValueError(f"mpsolve.petsc.{type(self).__name__}: dtype={self.dtype!r}: "
                                 "use 'float32' or 'float64' (the storage precision; a "
                                 "complex PETSc build stores in their complex twins)")
            self.dtype = name
        self.side = self.params.pop("side", None)     # None: from the options, else left
        self._side_arg = self.side                    # the constructor's (None: none)
        if self.side not in (None, "left", "right", "symmetric"):
            raise ValueError(f"side={self.side!r}: use 'left', 'right', 'symmetric' (a KSP "
                             "that needs a symmetric M: CG) or None")
        # where the preconditioner is set up and applied (None: the host's default)
        self.device = self._check_device(self.params.pop("device", None))
        self._bufs = None                             # (x, y) on a non-host device
        self.M = None
        #: why the last set-up stored the preconditioner in FP64 where FP32 was the
        #: default (its values do not fit FP32), or None
        self.escalated = None
        self.setup_count = 0
        self.setup_time = 0.0
        self._key = None
        #: why the last set-up failed on the matrix (PETSc's convention: the PC's failed
        #: reason is set, the apply returns Inf, KSP_DIVERGED_PC_FAILED), or None
        self.failed = None
        # the constructor checks its keywords' values now, not at the first solve
        self.precond_cls(**accepted_params(self.precond_cls, self.params, drop_none=False))

    # -------------------------------------------------------------- options
    def setFromOptions(self, pc):
        from petsc4py import PETSc

        prefix = pc.getOptionsPrefix() or ""
        scoped, plain = PETSc.Options(prefix), PETSc.Options()

        def get(kind, name):
            for db in (scoped, plain):
                if db.hasName("mpsolve_" + name):
                    try:
                        return getattr(db, kind)("mpsolve_" + name)
                    except KeyError:     # (petsc4py's error for an option without a value)
                        raise ValueError(f"-{prefix}mpsolve_{name} needs a value") from None
            return None

        changed = False
        for opt, kw in self._int_options.items():
            if kw in self._accepted():
                v = get("getInt", opt)
                if v is not None and self.params.get(kw) != v:
                    self._take_option(opt, kw, int(v))
                    changed = True
        for opt in ("variant", "accumulate"):
            if opt in self._accepted():
                v = get("getString", opt)
                v = v.lower() if v else v     # (PETSc's enum options ignore case)
                if v is not None and self.params.get(opt) != v:
                    self._take_option(opt, opt, v)
                    changed = True
        prec = get("getString", "precision")
        if prec is not None:
            prec = prec.lower()
            if prec not in PRESETS:
                raise ValueError(f"-mpsolve_precision {prec}: choose one of {sorted(PRESETS)}")
            # the preset's storage, escalated where FP32 cannot hold M (as mpsolve.solve
            # escalates the preset): a default, not the caller's fixed dtype
            changed = changed or self._preset != PRESETS[prec].precond
            self._preset = PRESETS[prec].precond
        dt = get("getString", "dtype")
        if dt is not None:
            dt = dt.lower()
            if dt not in ("float32", "float64"):
                raise ValueError(f"-mpsolve_dtype {dt}: use float32 or float64")
            changed = changed or self.dtype != dt
            self.dtype = dt
        dev = get("getString", "device")
        dev = dev.lower() if dev else dev
        if dev is not None and dev != self.device:
            self.device = self._check_device(dev, "-mpsolve_device")
            changed = True
        side = self._side_from_options(get, prefix, PETSc.Options())
        if side is not _KEEP and side != self.side:
            self.side = side
            changed = True
        if changed:
            # rebuild at the next setUp -- or, where PETSc calls none (the operator did not
            # change), at the next apply (_ready)
            self._key = None
            self.M = self.failed = self._bufs = None

    def _take_option(self, opt, kw, value):
        """Take ``-mpsolve_<opt> value`` as the keyword ``kw``, checked now as the class's
        constructor checks it (an error names the option, as PETSc's do)."""
        params = dict(self.params, **{kw: value})
        try:
            self.precond_cls(**accepted_params(self.precond_cls, params, drop_none=False))
        except (ValueError, TypeError) as err:
            raise ValueError(f"-mpsolve_{opt} {value}: {err}") from None
        self.params = params

    def _side_from_options(self, get, prefix, plain):
        """The preconditioning side the options database implies (module docstring):
        ``-mpsolve_side``, else -- unless the constructor was given one (:data:`_KEEP`) --
        the one the KSP's type and ``-ksp_pc_side`` imply, ``None`` for PETSc's default
        (left): taken anew at every KSPSetFromOptions, so a KSP changed from fgmres to cg
        no longer keeps fgmres's right side."""
        side = get("getString", "side")
        if side is not None:
            side = side.lower()
            if side not in ("left", "right", "symmetric"):
                raise ValueError(f"-mpsolve_side {side}: use left, right or symmetric")
            return side
        if self._side_arg is not None:  # given to the constructor
            return _KEEP
        # this PC's own KSP, then (a block Jacobi sub-PC, prefix "sub_") the outer one's --
        # never the unprefixed options for a prefixed KSP (PETSc's rule: -ksp_type cg is
        # not foo_'s, whose GMRES got the SPD form of ISAI from it)
        prefixes = [prefix] + ([prefix[:-4]] if prefix.endswith("sub_") else [])
        for p in prefixes:
            kind = plain.getString(p + "ksp_type").lower() if plain.hasName(
                p + "ksp_type") else None
            if kind in ("preonly", "richardson") and p.endswith("sub_"):
                continue             # a block's sub-KSP applying M: the outer KSP decides
            if plain.hasName(p + "ksp_pc_side"):
                given = plain.getString(p + "ksp_pc_side").lower()
                if given == "left" and kind in SYMMETRIC_KSP:
                    return "symmetric"   # (CG applies a left M: it must be symmetric)
                return given if given in ("right", "symmetric") else "left"
            if kind in NORM_SIDE_KSP and plain.hasName(p + "ksp_norm_type") and \
                    plain.getString(p + "ksp_norm_type").lower() == "unpreconditioned":
                return "right"       # (PETSc runs these right-preconditioned for that norm)
            if kind is not None:
                return "right" if kind in RIGHT_ONLY_KSP else \
                    "symmetric" if kind in SYMMETRIC_KSP else None
        return None

    def _accepted(self):
        return init_params(self.precond_cls)

    @staticmethod
    def _check_device(device, what="device"):
        if device is None:
            return None
        try:
            return resolve_device(device)
        except ValueError as err:
            raise ValueError(f"{what}: {err}") from None

    # ------------------------------------------------------------ protocol
    def setUp(self, pc):
        from petsc4py import PETSc

        from ._sparse import MatrixValueError, ZeroDiagonalError
        from .precond import ZeroPivotError
        from .precond._reorder import StructurallySingularError

        A, P = pc.getOperators()
        state = P.stateGet() if hasattr(P, "stateGet") else None
        # PETSc's object id, not the handle: a Mat made after one was freed may get its
        # address (and, assembled alike, its state); and the PC's: one context handed to
        # two PCs serves each with the M of its own operator (apply checks)
        key = (pc.handle, P.getId() if hasattr(P, "getId") else P.handle, state,
               P.getSize())
        if (self.M is not None or self.failed is not None) and key == self._key:
            return
        t0 = time.perf_counter()
        C = self._operator(P)
        kw = accepted_params(self.precond_cls, self.params, drop_none=False)
        bs = P.getBlockSize()
        if "block_size" in self._accepted() and kw.get("block_size") is None and bs > 1 \
                and C.shape[0] % bs == 0:
            kw["block_size"] = bs       # the Mat's own block size (BAIJ, MatSetBlockSize)

        def build(dtype):
            return self.precond_cls(**kw, dtype=dtype).setup(
                C, dtype=dtype, side=self.side or "left", device=self.device)

        self.M, self.failed, self._key = None, None, None
        try:
            try:
                self.M, self.escalated = build(self.dtype or self._preset or "float32"), None
            except PrecisionRangeError as err:
                if self.dtype is not None:   # a storage precision the caller chose: refused
                    raise
                # the default FP32 storage does not hold P's preconditioner: FP64, as
                # mpsolve.solve escalates (said by view)
                self.M, self.escalated = build("float64"), f"FP32 range: stored in FP64 ({err})"
        except (ZeroPivotError, StructurallySingularError, MatrixValueError,
                PrecisionRangeError, ArithmeticError, np.linalg.LinAlgError) as err:
            # (a plain ValueError -- a bad option -- is the caller's error: raised; the
            # matrix's own values -- NaN or Inf, a zero diagonal under point Jacobi, an M
            # the storage precision the caller chose cannot hold -- are not: raised out of
            # KSPSolve on one MPI rank, they hung the other)
            # PETSc's convention for a set-up that fails on the matrix (PCILU's zero pivot):
            # the failed reason is set, applies return Inf, the KSP stops with
            # KSP_DIVERGED_PC_FAILED -- a Newton or time-stepping solver then recovers
            # (a positive reason: PETSc combines the ranks' reasons by MPI_MAX, so
            # SETUP_ERROR, -1, below "no error", was lost where one rank of several failed)
            reason = PETSc.PC.FailedReason
            pc.setFailedReason(
                reason.FACTOR_STRUCT_ZEROPIVOT if isinstance(err, StructurallySingularError)
                else reason.FACTOR_NUMERIC_ZEROPIVOT
                if isinstance(err, (ZeroPivotError, ZeroDiagonalError)) else reason.FACTOR_OTHER)
            self.failed = f"{type(err).__name__}: {err}"
            self._key = key
            return
        self._bufs = None
        if not is_host(self.M.device):   # the KSP's vectors cross to the device and back
            xp = array_module(self.M.device)
            self._bufs = (xp.empty(C.shape[0], dtype=C.dtype),   # PETSc's scalar type
                          xp.empty(C.shape[0], dtype=C.dtype))
        self.setup_time = time.perf_counter() - t0
        self.setup_count += 1
        self._key = key

    def _operator(self, P):
        """The local CSR matrix the preconditioner is set up from; a matrix-free ``P`` is
        refused (PETSc's ILU and ICC refuse it too), Jacobi takes its diagonal."""
        if P.getType() not in MATRIX_FREE:
            return local_csr(P)
        raise TypeError(
            f"mpsolve.petsc.{type(self).__name__} needs the entries of the preconditioning "
            f"matrix, but P is a matrix-free Mat of type {P.getType()!r}: pass an assembled "
            "(AIJ) approximation as P (ksp.setOperators(A, P)), or use "
            "mpsolve.petsc.Jacobi, which needs only P's diagonal (MatGetDiagonal)")

    def _ready(self, pc) -> bool:
        """Set up (where petsc4py made this context anew after the PC's set-up: a second
        ``KSPSetFromOptions``); False where the set-up failed (the caller returns Inf)."""
        if (self.M is None and self.failed is None) or (
                pc is not None and self._key is not None and self._key[0] != pc.handle):
            self.setUp(pc)                   # (one context serving two PCs: this one's M)
        return self.M is not None

    def apply(self, pc, x, y):
        if not self._ready(pc):
            y.set(np.inf)                # a failed set-up: PETSc's factor-failure Inf
            return
        self._apply(x.array_r, y.array)  # y = M x on PETSc's own arrays

    def _apply(self, xa, ya, transpose=False):
        """``ya = M xa`` (``M^T xa`` with ``transpose``) for host arrays: in place, or
        through the device buffers."""
        apply = self.M.apply_transpose if transpose else self.M.apply
        if self._bufs is None:
            apply(xa, ya)                # y = M x
            return
        xd, yd = self._bufs
        upload(xa, xd)                   # host -> device
        apply(xd, yd)                    # y = M x on the device
        download(yd, ya)                 # device -> host

    def matApply(self, pc, X, Y):
        """``Y = M X`` for PETSc's dense blocks (``PCMatApply``, used by ``KSPMatSolve``):
        on the host one :meth:`Preconditioner.apply_block` -- one sweep over the stored
        operators for every column where the preconditioner has a block kernel (PETSc's
        column-major block is copied to mpsolve's row-major one and back); on a device
        column by column."""
        if not self._ready(pc):
            Y.getDenseArray()[...] = np.inf
            return
        Xa = X.getDenseArray(readonly=True)
        Ya = Y.getDenseArray()
        if self._bufs is None:
            R = np.ascontiguousarray(Xa)         # row-major: row i's k values adjacent
            Z = np.empty_like(R)
            self.M.apply_block(R, Z)             # Z = M R, one sweep
            Ya[...] = Z
            return
        for j in range(Xa.shape[1]):
            xj = Xa[:, j]
            yj = Ya[:, j]
            if yj.flags.c_contiguous and xj.flags.c_contiguous:
                self._apply(xj, yj)
            else:  # a strided leading dimension: go through a contiguous column
                out = np.empty(Xa.shape[0], dtype=Xa.dtype)
                self._apply(np.ascontiguousarray(xj), out)
                yj[:] = out

    def applyTranspose(self, pc, x, y):
        """``y = M^T x`` (``PCApplyTranspose``: ``KSPSolveTranspose``, BiCG, ...): the plain
        transpose, also for complex scalars (:meth:`Preconditioner.apply_transpose`; a
        symmetric real form applies ``M`` itself, the others keep transposed copies of their
        stored operators, made at the first call)."""
        if not self._ready(pc):
            y.set(np.inf)
            return
        self._apply(x.array_r, y.array, transpose=True)

    def view(self, pc, viewer):
        from petsc4py import PETSc

        if viewer.getType() != PETSc.Viewer.Type.ASCII:
            return                       # (binary, draw, ...: a text report has no place)
        lines = [f"mpsolve {type(self).__name__} preconditioner"]
        if self.failed is not None:
            lines.append(f"  set-up failed: {self.failed}")
        elif self.M is None:
            lines.append("  (not set up)")
        else:
            lines.append(f"  {self.M!r}")
            extra = {k: getattr(self.M, k) for k in ("variant", "sparsity_power", "block_size")
                     if hasattr(self.M, k)}
            if getattr(self.M, "variant_reason", "").startswith("auto"):
                extra["chosen"] = self.M.variant_reason
            extra["side"] = self.side or "left"
            extra["device"] = self.M.device
            if extra:
                lines.append("  " + ", ".join(f"{k}={v}" for k, v in extra.items()))
            lines.append(f"  storage {self.M.storage_dtype.name}, setups {self.setup_count}, "
                         f"last setup {self.setup_time:.3g} s")
            if self.escalated:
                lines.append(f"  {self.escalated}")
            if getattr(self, "zero_diagonal", 0):
                lines.append(f"  {self.zero_diagonal} zero diagonal entries: 1 used there")
        comm = viewer.getComm()
        if comm.getSize() == 1:
            for ln in lines:
                viewer.printfASCII(ln + "\n")
            return
        # a PC of several ranks: each rank's own M (its diagonal block: block Jacobi across
        # the ranks), set-up failure and escalation -- rank 0's alone hid the others'
        viewer.printfASCII(f"mpsolve {type(self).__name__}: one per rank, on its diagonal "
                           "block (block Jacobi across the ranks)\n")
        viewer.pushASCIISynchronized()
        rank = comm.getRank()
        viewer.printfASCIISynchronized("".join(f"  [{rank}] {ln}\n" for ln in lines[1:]))
        viewer.flush()
        viewer.popASCIISynchronized()

    def reset(self, pc):
        self.M = None
        self._bufs = None
        self._key = None
        self.failed = None


class Jacobi(_MpsolvePC):
    """Point Jacobi (:class:`mpsolve.precond.Jacobi`) as a PETSc Python PC; on a
    matrix-free ``P`` (a shell) from its ``MatGetDiagonal``, and with 1 where the diagonal
    is zero (``zero_diagonal`` counts them; ``view`` says so), as PETSc's PCJACOBI."""

    zero_diagonal = 0

    def _operator(self, P):
        if P.getType() not in MATRIX_FREE:
            d = local_csr(P).diagonal()
        else:
            v = P.createVecLeft()
            P.getDiagonal(v)             # the shell's diagonal operation, or PETSc's error
            d = np.array(v.array_r, dtype=scalar_dtype())
        zero = d == 0
        if zero.any():                   # PETSc's PCJACOBI: 1 where the diagonal is zero
            d[zero] = 1.0
        self.zero_diagonal = int(zero.sum())
        # the symmetric side's halves (PETSc's PCJACOBI: 1/sqrt|d_i|), in FP64
        self._half = 1.0 / np.sqrt(np.abs(d))
        return sp.diags_array(d, format="csr")

    def applySymmetricLeft(self, pc, x, y):
        """``y = D^{-1/2} x`` (``-ksp_pc_side symmetric``: ``M = D^{-1/2} D^{-1/2}``, each
        half on one side of ``A``; PETSc's PCJACOBI's form, ``|d_i|``)."""
        if not self._ready(pc):
            y.set(np.inf)
            return
        y.array[:] = x.array_r * self._half

    applySymmetricRight = applySymmetricLeft

    @property
    def precond_cls(self):
        from .precond import Jacobi as C

        return C


class BlockJacobi(_MpsolvePC):
    """Block-Jacobi (:class:`mpsolve.precond.BlockJacobi`) as a PETSc Python PC."""

    @property
    def precond_cls(self):
        from .precond import BlockJacobi as C

        return C


class ISAI(_MpsolvePC):
    """ISAI (:class:`mpsolve.precond.ISAI`) as a PETSc Python PC."""

    @property
    def precond_cls(self):
        from .precond import ISAI as C

        return C


class BlockISAI(_MpsolvePC):
    """Block-ISAI (:class:`mpsolve.precond.BlockISAI`) as a PETSc Python PC."""

    @property
    def precond_cls(self):
        from .precond import BlockISAI as C

        return C


class ILU0(_MpsolvePC):
    """ILU(0) with FP32 factors (:class:`mpsolve.precond.ILU0`) as a PETSc Python PC."""

    @property
    def precond_cls(self):
        from .precond import ILU0 as C

        return C


class BlockILU0(_MpsolvePC):
    """Block ILU(0) (:class:`mpsolve.precond.BlockILU0`) as a PETSc Python PC."""

    @property
    def precond_cls(self):
        from .precond import BlockILU0 as C

        return C
