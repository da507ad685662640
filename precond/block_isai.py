"""Block-ISAI: ISAI on the block (BSR) view of ``A``.

The entries of ``A`` and ``M`` are ``b x b`` blocks (``b`` unknowns per mesh
node: 2-6 in multiphysics and structural problems).  The pattern of ``M`` is
the block graph's ``S^k``; block row ``i`` with block columns ``J_i`` solves the
``(|J_i| b) x (|J_i| b)`` local system ``X A[J_i, J_i] = E_i^T`` for its ``b``
rows at once (``b`` right-hand sides), batched by size in FP64
(:mod:`mpsolve.precond._localsolve`).  ``M`` is stored as BSR in FP32 (data of shape
``(nnzb, b, b)``, a :class:`~mpsolve.operator.BSROperator` on the device it is set up
for) and applied by the ``bsrmv`` kernel.  With ``b = 1`` it is
point :class:`~mpsolve.precond.ISAI`.
"""
from __future__ import annotations

import numpy as np

from ._localsolve import DEFAULT_MAX_LOCAL
from ._pattern import block_of
from ._util import check_count
from .block_ilu import bilu_isai_operators
from .isai import _ISAIBase, equilibrated, recorded, replay

__all__ = ["BlockISAI"]


class BlockISAI(_ISAIBase):
    """Block incomplete sparse approximate inverse on the block pattern of ``A^k``.

    Parameters
    ----------
    block_size : int, optional
        ``b``.  Default: a BSR ``A``'s own block size, else detected
        (:func:`~mpsolve.precond.detect_block_size`: the largest of 6, 5, 4, 3, 2 whose
        ``b x b`` blocks tile ``A``'s pattern, a partial last block allowed; 1
        otherwise).  A ``b`` that does not divide ``n`` pads ``A`` with an identity block.
    variant : {"auto", "general", "right", "spd", "bilu"}
        * ``"auto"`` (default) -- ``"spd"`` for symmetric ``A`` (CG-safe) and under CG
          (``side="symmetric"``: a method that needs a symmetric ``M``), otherwise
          ``"general"`` under left and ``"right"`` under right preconditioning (as
          :class:`~mpsolve.precond.ISAI`; the choice is in ``variant`` and
          ``variant_reason`` after set-up).
        * ``"general"`` -- ``M[i, J_i] A[J_i, J_i] = E_i^T`` (``b`` rows at once):
          ``M A ~ I``.
        * ``"right"`` -- ``A M ~ I``: ``general`` on ``A^T``, block-transposed.
        * ``"spd"`` -- block FSAI: ``G`` block lower triangular on ``tril(S^k)``;
          ``A[J_i, J_i] Z = E_last``, ``Z_last = L L^T`` (Cholesky),
          ``G[i, J_i] = L^{-1} Z^T``, so ``blockdiag(G A G^T) = I``; ``M = G^T G``
          (SPD for SPD ``A``), applied as two BSR SpMVs.
        * ``"bilu"`` -- the Block-ISAI of the mixed-precision ISAI papers: BILU(0) of
          ``A`` (FP64, pivot blocks inverted in FP64; :mod:`.block_ilu`), then the block
          ISAI of its factors, ``M = U_isai L_isai`` with ``L_isai ~ L^{-1}`` on
          ``tril(S^k)`` and ``U_isai ~ U^{-1}`` on ``triu(S^k)``; each block row a small
          block triangular system solved by block substitution (``b x b`` GEMMs).
          Symmetric ``A`` with SPD pivot blocks: ``M = G^T G``, ``G = C^T L_isai``,
          ``C C^T = D^{-1}`` (symmetric, for CG; complex data: Hermitian ``A``,
          ``M = G^H G``).  Two BSR SpMVs; ``max_local`` is not used (the substitution
          costs ``O(|J_i| nnz_row b^3)`` per block row).  Nonsymmetric ``A`` whose
          triangular systems fail their condition check (block rows in
          ``fallback_rows``): built again on the equilibrated matrix
          (:func:`~mpsolve.precond.isai.equilibrated`), the scalings folded into the
          stored factors, and kept where fewer rows fall back (``stats["equilibrated"]``).
    sparsity_power : int, optional
        ``k`` (default 1; ``spd`` widened along line-like strong couplings,
        ``general``/``right`` moved to 2 where the pattern of ``A`` is poor: see
        :class:`~mpsolve.precond.ISAI`).
    dtype : {"float32", "float64"} or None
        Storage precision (FP32 when set up on its own).
    accumulate : {"float32", "float64"} or None
        Accumulator of the BSR SpMV (default FP64, a linear ``M``, as
        :class:`~mpsolve.precond.ISAI`).
    max_local : int
        Largest local system in scalar unknowns (``|J_i| b``) of the batched path
        (default 256); larger ones take the excess path.

    Attributes
    ----------
    block_size : int
        ``b`` used by the last setup.
    fallback_rows : ndarray of int
        *Block* rows replaced by the fallback rule (least squares over the
        touched columns, else the block-diagonal inverse; ``spd``: the inverse
        Cholesky factor of the diagonal block, else the scaled diagonal).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from mpsolve.precond import BlockISAI
    >>> T = sp.diags([-1.0, 2.5, -1.0], [-1, 0, 1], shape=(4, 4))
    >>> K = np.array([[2.0, 0.5, 0.0], [0.5, 2.0, 0.5], [0.0, 0.5, 2.0]])
    >>> A = sp.kron(T, K).tocsr()
    >>> M = BlockISAI(variant="spd", dtype="float64").setup(A)
    >>> M.block_size
    3
    >>> x = M.matvec(np.ones(12))
    >>> bool(np.isfinite(x).all())
    True
    """

    name = "block-isai"
    _variants = ("auto", "general", "right", "spd", "bilu")
    _storage = "bsr"

    def __init__(self, block_size=None, variant="auto", sparsity_power=None, dtype=None,
                 accumulate=None, max_local=DEFAULT_MAX_LOCAL):
        super().__init__(variant=variant, sparsity_power=sparsity_power, dtype=dtype,
                         accumulate=accumulate, max_local=max_local)
        block_size = check_count(block_size, "block_size")
        self._block_request = None if block_size is None else int(block_size)
        self.block_size = self._block_request

    def _setup(self, A, dtype):
        b = block_of(self._block_request, A)
        self.block_size = b
        if self._variant_request == "bilu":
            # the ISAI of BILU(0)'s block factors (mpsolve.precond.block_ilu)
            self.variant, self.variant_reason = "bilu", "requested"
            self.accumulate = self._resolve_accumulate(dtype)
            self.sparsity_power = self._power_request or 1

            def build(C, **kw):                 # (its warnings said only if it is kept)
                return recorded(bilu_isai_operators, C, b, self.sparsity_power, dtype,
                                self.accumulate, "BlockISAI(bilu)", device=self.device,
                                **kw)

            (chain, bad, stats), caught = build(A)
            scaled = False
            if bad.size and not stats["symmetric"]:
                # block rows whose triangular systems failed their condition check: where
                # A's rows or columns are badly scaled (the check is not scale-invariant,
                # the ISAI of a scaled matrix is the scaled ISAI), again on the
                # equilibrated matrix, kept where fewer rows fall back -- rows and columns
                # scaled by 1e-6..1e6 sent 239 of 500 block rows of an exactly factored
                # block-tridiagonal matrix to the fallback, and GMRES failed
                S, scale = equilibrated(A)
                try:            # (optional: a failure of its own keeps the first build)
                    second = build(S, symmetric=False, scale=scale) if scale is not None \
                        else None
                except (ArithmeticError, ValueError, np.linalg.LinAlgError):
                    second = None
                if second is not None:
                    (chain2, bad2, stats2), caught2 = second
                    if bad2.size < bad.size:
                        unscaled = sum(stats["stage_times"].values())
                        chain, bad, stats, caught, scaled = chain2, bad2, stats2, caught2, True
                        stats["stage_times"]["unscaled"] = unscaled
            replay(caught)                      # the kept build's warnings only
            stats["equilibrated"] = scaled
            self._chain, self.fallback_rows, self.stats = chain, bad, stats
            self.symmetric = bool(self.stats["symmetric"])
            return
        # b = 1 (a scalar matrix): the CSR kernel; BSR with 1 x 1 blocks reads an index per
        # value as CSR does but runs the block loop (1.5x the apply time, poisson3d:60)
        self._storage = "csr" if b == 1 else "bsr"
        self._build(A, dtype, b)

    def __repr__(self):
        base = super().__repr__()
        return base[:-2] + f", b={self.block_size}, {self.variant})>" if self.is_setup else base
