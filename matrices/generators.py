"""Generated test problems: Poisson, anisotropic diffusion, convection-diffusion, elasticity,
and two complex ones (a damped Helmholtz operator, a magnetic Laplacian).

Every generator returns a canonical ``scipy.sparse.csr_matrix`` (float64, or complex128 for
the complex problems; sorted indices, no duplicates) built with vectorised Kronecker products, so a million-row problem takes about a
second. Grids are ``n`` points per direction with homogeneous Dirichlet boundary conditions
eliminated; the unknown at grid point ``(i, j, k)`` (``i`` along x, fastest) has index
``i + n*j + n*n*k``. Stencils are *unscaled*: the matrices are ``h**2`` (or ``h`` for the
elasticity stiffness) times the differential operator, with ``h = 1/(n+1)``, so entries stay
O(1) for every ``n``.

``generate("poisson3d:100")`` builds a problem from a text spec, for command lines and
benchmark suites; :data:`GENERATORS` maps the spec names to the functions.
"""

from __future__ import annotations

import inspect
import math

import numpy as np
import scipy.sparse as sp

__all__ = [
    "laplacian_1d", "poisson2d", "poisson3d", "anisotropic2d", "anisotropic3d",
    "convection_diffusion2d", "convection_diffusion3d", "elasticity3d", "jump3d",
    "coupled_convdiff2d", "helmholtz2d", "helmholtz3d", "magnetic2d", "GENERATORS",
    "generate",
]


def _check_n(n, name="n", minimum=1):
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"argument {name} must be an integer grid size, got {n!r}")
    if n < minimum:
        raise ValueError(f"argument {name} must be >= {minimum}, got {n}")
    return int(n)


def _canonical(A, dtype=np.float64):
    A = sp.csr_matrix(A, dtype=dtype)
    A.sum_duplicates()
    A.eliminate_zeros()
    A.sort_indices()
    return A


def _eye(n):
    return sp.identity(n, dtype=np.float64, format="csr")


def _second_difference(n):
    """tridiag(-1, 2, -1): h**2 times -d^2/dx^2 with Dirichlet ends."""
    e = np.ones(n)
    return sp.diags([-e[1:], 2.0 * e, -e[1:]], [-1, 0, 1], format="csr")


def _central_difference(n):
    """tridiag(-1/2, 0, 1/2): h times d/dx (antisymmetric)."""
    e = 0.5 * np.ones(n - 1)
    return sp.diags([-e, e], [-1, 1], shape=(n, n), format="csr")


def _upwind_difference(n, w):
    """h times d/dx, one-sided against the wind: backward for w >= 0, forward for w < 0."""
    e = np.ones(n)
    if w >= 0:
        return sp.diags([e, -e[1:]], [0, -1], format="csr")
    return sp.diags([-e, e[1:]], [0, 1], format="csr")


def _kron3(Az, Ay, Ax):
    """Operator on a 3-D grid with index i + n*j + n*n*k from 1-D factors per direction."""
    return sp.kron(Az, sp.kron(Ay, Ax, format="csr"), format="csr")


def laplacian_1d(n):
    """1-D Laplacian ``tridiag(-1, 2, -1)`` of order ``n`` (Dirichlet ends), SPD.

    Parameters
    ----------
    n : int
        Number of interior grid points (matrix order), ``n >= 1``.

    Returns
    -------
    scipy.sparse.csr_matrix

    Examples
    --------
    >>> from mpsolve.matrices import laplacian_1d
    >>> laplacian_1d(4).toarray()
    array([[ 2., -1.,  0.,  0.],
           [-1.,  2., -1.,  0.],
           [ 0., -1.,  2., -1.],
           [ 0.,  0., -1.,  2.]])
    """
    n = _check_n(n)
    return _canonical(_second_difference(n))


def poisson2d(n):
    """5-point Laplacian on an ``n x n`` grid, Dirichlet boundary, SPD, order ``n**2``.

    Parameters
    ----------
    n : int
        Grid points per direction.

    Returns
    -------
    scipy.sparse.csr_matrix
        Diagonal 4, off-diagonals -1 (``h**2`` times ``-Laplace``).

    Examples
    --------
    >>> from mpsolve.matrices import poisson2d
    >>> A = poisson2d(10)
    >>> A.shape, A.nnz, A.diagonal().max()
    ((100, 100), 460, np.float64(4.0))
    """
    n = _check_n(n)
    T, I = _second_difference(n), _eye(n)
    return _canonical(sp.kron(I, T, format="csr") + sp.kron(T, I, format="csr"))


def poisson3d(n):
    """7-point Laplacian on an ``n x n x n`` grid, Dirichlet boundary, SPD, order ``n**3``.

    Parameters
    ----------
    n : int
        Grid points per direction (``poisson3d(100)`` has 1e6 rows, 6.94e6 nonzeros).

    Returns
    -------
    scipy.sparse.csr_matrix
        Diagonal 6, off-diagonals -1.

    Examples
    --------
    >>> from mpsolve.matrices import poisson3d
    >>> A = poisson3d(10)
    >>> A.shape, A.nnz
    ((1000, 1000), 6400)
    """
    return anisotropic3d(n, eps=(1.0, 1.0, 1.0))


def anisotropic2d(n, epsilon=1e-3, theta=0.0):
    """Rotated anisotropic diffusion ``-div(K grad u)`` on an ``n x n`` grid, SPD.

    ``K = R(theta) diag(1, epsilon) R(theta)^T``: diffusion 1 along the direction at angle
    ``theta`` to the x axis and ``epsilon`` across it. The second derivatives use the 3-point
    stencils, the mixed derivative ``u_xy`` the centred 4-point stencil, giving a 9-point
    stencil when ``theta`` is not a multiple of pi/2 (5-point otherwise). The matrix is
    symmetric positive definite for every ``epsilon > 0``: its symbol
    ``4a s_x^2 + 4b s_y^2 + 2c sin(x) sin(y)`` is positive because ``ab - c^2 = epsilon > 0``.
    It is not an M-matrix when ``theta`` is not axis-aligned.

    Parameters
    ----------
    n : int
        Grid points per direction.
    epsilon : float, optional
        Anisotropy ratio, ``> 0`` (default 1e-3).
    theta : float, optional
        Angle of the strong direction in radians (default 0).

    Returns
    -------
    scipy.sparse.csr_matrix

    Examples
    --------
    >>> import numpy as np
    >>> from mpsolve.matrices import anisotropic2d
    >>> anisotropic2d(3, epsilon=0.01)[4].toarray().round(3)
    array([[ 0.  , -0.01,  0.  , -1.  ,  2.02, -1.  ,  0.  , -0.01,  0.  ]])
    >>> int(anisotropic2d(20, theta=np.pi / 6).getnnz(axis=1).max())   # 9-point
    9
    """
    n = _check_n(n)
    epsilon = float(epsilon)
    if not epsilon > 0 or not math.isfinite(epsilon):
        raise ValueError(f"argument epsilon must be a positive finite number, got {epsilon}")
    c, s = math.cos(theta), math.sin(theta)
    a = c * c + epsilon * s * s          # coefficient of -u_xx
    b = s * s + epsilon * c * c          # coefficient of -u_yy
    cxy = (1.0 - epsilon) * c * s        # -2 cxy u_xy
    T, I = _second_difference(n), _eye(n)
    A = a * sp.kron(I, T, format="csr") + b * sp.kron(T, I, format="csr")
    if abs(cxy) > 4 * np.finfo(np.float64).eps:
        D = _central_difference(n)
        A = A - 2.0 * cxy * sp.kron(D, D, format="csr")
    return _canonical(A)


def anisotropic3d(n, eps=(1.0, 1e-2, 1e-4)):
    """Axis-aligned anisotropic diffusion ``-(ex u_xx + ey u_yy + ez u_zz)``, 7-point, SPD.

    Parameters
    ----------
    n : int
        Grid points per direction.
    eps : tuple of 3 floats, optional
        Diffusion coefficients along x, y, z (all ``> 0``).

    Returns
    -------
    scipy.sparse.csr_matrix
        An M-matrix of order ``n**3``.

    Examples
    --------
    >>> from mpsolve.matrices import anisotropic3d
    >>> A = anisotropic3d(5, eps=(1.0, 0.1, 0.01))
    >>> float(A[62, 62]), float(A[62, 61]), float(A[62, 67]), float(A[62, 87])
    (2.22, -1.0, -0.1, -0.01)
    """
    n = _check_n(n)
    try:
        ex, ey, ez = (float(e) for e in eps)
    except (TypeError, ValueError):
        raise ValueError(f"argument eps must be 3 positive numbers (x, y, z), got {eps!r}") \
            from None
    if not all(e > 0 and math.isfinite(e) for e in (ex, ey, ez)):
        raise ValueError(f"argument eps must be 3 positive finite numbers, got {eps!r}")
    T, I = _second_difference(n), _eye(n)
    A = ex * _kron3(I, I, T) + ey * _kron3(I, T, I) + ez * _kron3(T, I, I)
    return _canonical(A)


def _wind(wind, dim):
    try:
        w = [float(x) for x in wind]
    except TypeError:
        raise ValueError(f"argument wind must be a sequence of {dim} numbers, got {wind!r}") \
            from None
    if len(w) != dim or not all(math.isfinite(x) for x in w):
        raise ValueError(f"argument wind must be {dim} finite numbers, got {wind!r}")
    norm = math.sqrt(sum(x * x for x in w))
    if norm == 0:
        raise ValueError("argument wind must not be the zero vector")
    return [x / norm for x in w]


def _convdiff(n, peclet, wind, upwind, dim):
    n = _check_n(n)
    peclet = float(peclet)
    if not math.isfinite(peclet) or peclet < 0:
        raise ValueError(f"argument peclet must be a finite number >= 0, got {peclet}")
    w = _wind(wind, dim)
    h = 1.0 / (n + 1)
    T, I = _second_difference(n), _eye(n)
    ops = []
    for d in range(dim):
        if upwind:
            C = _upwind_difference(n, w[d])
        else:
            C = _central_difference(n)
        # h**2 * (-u_dd + peclet * w_d u_d) = T + h * peclet * w_d * (h u_d)
        op = T + (h * peclet * w[d]) * C
        factors = [I] * dim
        factors[dim - 1 - d] = op          # x is the fastest (last) Kronecker factor
        ops.append(factors)
    if dim == 2:
        A = sum(sp.kron(f[0], f[1], format="csr") for f in ops)
    else:
        A = sum(_kron3(*f) for f in ops)
    return _canonical(A)


def convection_diffusion2d(n, peclet=10.0, upwind=True, wind=(1.0, 1.0)):
    """Convection-diffusion ``-Laplace(u) + peclet * w . grad(u)`` on the unit square.

    ``n x n`` interior grid, ``h = 1/(n+1)``, Dirichlet boundary, matrix scaled by ``h**2``.
    ``w`` is ``wind`` normalised to unit length, so ``peclet`` is the global Peclet number
    (the mesh Peclet number is ``peclet * h / 2`` per unit wind component).

    Parameters
    ----------
    n : int
        Grid points per direction.
    peclet : float, optional
        Global Peclet number ``>= 0`` (default 10).
    upwind : bool, optional
        First-order upwind differences for the convection term (default): the matrix is a
        nonsymmetric M-matrix (positive diagonal, nonpositive off-diagonals, weakly diagonally
        dominant, strictly on boundary rows) for any ``peclet``. ``False``: centred
        differences, second order but no M-matrix once the mesh Peclet number exceeds 1.
    wind : tuple of 2 floats, optional
        Wind direction (x, y), normalised internally (default ``(1, 1)``).

    Returns
    -------
    scipy.sparse.csr_matrix

    Examples
    --------
    >>> from mpsolve.matrices import convection_diffusion2d
    >>> A = convection_diffusion2d(50, peclet=100)
    >>> A.shape, abs(A - A.T).max() > 0, A.diagonal().min() > 0
    ((2500, 2500), np.True_, np.True_)
    """
    return _convdiff(n, peclet, wind, upwind, 2)


def convection_diffusion3d(n, peclet=10.0, upwind=True, wind=(1.0, 1.0, 1.0)):
    """3-D convection-diffusion ``-Laplace(u) + peclet * w . grad(u)`` on the unit cube.

    Same conventions as :func:`convection_diffusion2d` on an ``n x n x n`` grid (7-point).

    Parameters
    ----------
    n : int
        Grid points per direction.
    peclet : float, optional
        Global Peclet number ``>= 0`` (default 10).
    upwind : bool, optional
        Upwind (M-matrix, default) or centred convection differences.
    wind : tuple of 3 floats, optional
        Wind direction (x, y, z), normalised internally.

    Returns
    -------
    scipy.sparse.csr_matrix

    Examples
    --------
    >>> from mpsolve.matrices import convection_diffusion3d
    >>> convection_diffusion3d(10, peclet=50).shape
    (1000, 1000)
    """
    return _convdiff(n, peclet, wind, upwind, 3)


def _hex8_stiffness(E, nu):
    """24 x 24 stiffness of the unit-cube trilinear (Q1) element, 2x2x2 Gauss quadrature.

    Local nodes are numbered ``a = ax + 2*ay + 4*az`` with corner ``(ax, ay, az)``; unknowns
    ``3*a + c`` (node-major). For a cube of side ``h`` the stiffness is ``h`` times this one.
    """
    lam = E * nu / ((1 + nu) * (1 - 2 * nu))
    mu = E / (2 * (1 + nu))
    D = np.zeros((6, 6))
    D[:3, :3] = lam
    D[np.arange(3), np.arange(3)] += 2 * mu
    D[np.arange(3, 6), np.arange(3, 6)] = mu
    corners = np.array([[a & 1, (a >> 1) & 1, (a >> 2) & 1] for a in range(8)], dtype=float)
    g = 0.5 + np.array([-0.5, 0.5]) / math.sqrt(3.0)   # Gauss points on [0, 1], weights 1/2
    K = np.zeros((24, 24))
    for x in g:
        for y in g:
            for z in g:
                p = np.array([x, y, z])
                # N_a = prod_d (corner ? p_d : 1 - p_d); dN_a/dp_d on the unit cube
                f = np.where(corners == 1, p, 1 - p)          # (8, 3) factors
                s = np.where(corners == 1, 1.0, -1.0)         # their derivatives
                dN = np.empty((8, 3))
                dN[:, 0] = s[:, 0] * f[:, 1] * f[:, 2]
                dN[:, 1] = f[:, 0] * s[:, 1] * f[:, 2]
                dN[:, 2] = f[:, 0] * f[:, 1] * s[:, 2]
                B = np.zeros((6, 24))                          # strain = B u (Voigt order)
                for c in range(3):
                    B[c, c::3] = dN[:, c]
                B[3, 1::3], B[3, 2::3] = dN[:, 2], dN[:, 1]    # gamma_yz
                B[4, 0::3], B[4, 2::3] = dN[:, 2], dN[:, 0]    # gamma_xz
                B[5, 0::3], B[5, 1::3] = dN[:, 1], dN[:, 0]    # gamma_xy
                K += B.T @ D @ B / 8.0
    return K


def elasticity3d(n, E=1.0, nu=0.3):
    """3-D linear elasticity, trilinear hexahedra, 3 unknowns per node (block size 3), SPD.

    The unit cube is cut into ``(n+1)**3`` equal Q1 (8-node brick) elements; the displacement
    is clamped (zero) on all six faces and those nodes are eliminated, leaving the
    ``n x n x n`` interior nodes. Unknowns are node-major: ``3*node + c`` is displacement
    component ``c`` (x, y, z) of node ``node = i + n*j + n*n*k``. Every pair of neighbouring
    nodes (27-point stencil) is coupled by a full, stored 3 x 3 block, so the matrix converts
    exactly to BSR with block size 3 (a few block entries are exact zeros by symmetry and
    stay stored). Because every element is the same, the matrix is assembled as 27 Kronecker
    products ``shift_z x shift_y x shift_x x B_d`` of the per-offset node-coupling blocks
    ``B_d``, in O(nnz).

    Parameters
    ----------
    n : int
        Interior nodes per direction (order ``3 * n**3``).
    E : float, optional
        Young's modulus ``> 0`` (default 1).
    nu : float, optional
        Poisson's ratio, ``-1 < nu < 0.5`` (default 0.3); near 0.5 the problem becomes
        ill-conditioned (locking).

    Returns
    -------
    scipy.sparse.csr_matrix
        Stiffness matrix, ``h`` times the element integrals with ``h = 1/(n+1)``.

    Examples
    --------
    >>> from mpsolve.matrices import elasticity3d, detect_block_size
    >>> A = elasticity3d(4)
    >>> A.shape, A.nnz, detect_block_size(A)
    ((192, 192), 9000, 3)
    """
    n = _check_n(n)
    E, nu = float(E), float(nu)
    if not E > 0 or not math.isfinite(E):
        raise ValueError(f"argument E (Young's modulus) must be positive, got {E}")
    if not -1.0 < nu < 0.5:
        raise ValueError(f"argument nu (Poisson's ratio) must lie in (-1, 0.5), got {nu}")
    h = 1.0 / (n + 1)
    Ke = h * _hex8_stiffness(E, nu)
    loc = [(a & 1, (a >> 1) & 1, (a >> 2) & 1) for a in range(8)]
    blocks = {}
    for a, pa in enumerate(loc):
        for b, pb in enumerate(loc):
            d = (pb[0] - pa[0], pb[1] - pa[1], pb[2] - pa[2])
            blocks[d] = blocks.get(d, 0.0) + Ke[3 * a:3 * a + 3, 3 * b:3 * b + 3]
    # the sums for d and -d ran in other orders (A - A^T up to 3e-17): exactly symmetric
    for d in sorted(blocks):
        m = (-d[0], -d[1], -d[2])
        if d <= m:
            sym = 0.5 * (blocks[d] + blocks[m].T)
            blocks[d], blocks[m] = sym, sym.T.copy()
    # Node-level COO pattern of the 27-point stencil, then expand each node pair to 3x3.
    idx = np.arange(n)
    rows_n, cols_n, offs = [], [], []
    offsets = sorted(blocks)
    for o, (dx, dy, dz) in enumerate(offsets):
        ix = idx[max(0, -dx):n - max(0, dx)]
        iy = idx[max(0, -dy):n - max(0, dy)]
        iz = idx[max(0, -dz):n - max(0, dz)]
        node = (ix[None, None, :] + n * iy[None, :, None] + n * n * iz[:, None, None]).ravel()
        rows_n.append(node)
        cols_n.append(node + dx + n * dy + n * n * dz)
        offs.append(np.full(node.size, o, dtype=np.int64))
    rows_n = np.concatenate(rows_n)
    cols_n = np.concatenate(cols_n)
    offs = np.concatenate(offs)
    Bstack = np.stack([blocks[d] for d in offsets])                  # (27, 3, 3)
    scale = np.abs(Bstack).max()
    Bstack[np.abs(Bstack) < 64 * np.finfo(np.float64).eps * scale] = 0.0   # exact zeros
    N = n ** 3
    # Build BSR directly: node pairs sorted by row, then column.
    order = np.lexsort((cols_n, rows_n))
    indptr = np.zeros(N + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows_n, minlength=N), out=indptr[1:])
    A = sp.bsr_matrix((Bstack[offs[order]], cols_n[order], indptr), shape=(3 * N, 3 * N))
    A = A.tocsr()
    A.sort_indices()
    A.has_canonical_format = True
    return A


def jump3d(n, contrast=1e4, seed=0):
    """3-D diffusion ``-div(k grad u)`` whose coefficient jumps between random cells.

    Cell-centred finite volumes on an ``n x n x n`` grid of the unit cube, Dirichlet
    boundary; each cell's ``k`` is 1 or ``contrast``, drawn independently with
    probability 1/2 (so the jumps are everywhere, not along a few interfaces); face
    coefficients are harmonic means of the two cells'.  SPD, 7-point, order ``n**3``;
    its condition number grows with ``contrast`` -- the problem where point smoothers
    and diagonal preconditioners struggle.

    Parameters
    ----------
    n : int
        Cells per direction.
    contrast : float
        Ratio of the two coefficients, in ``[1, 1e300]``.
    seed : int
        Seed of the cell pattern.

    Examples
    --------
    >>> from mpsolve.matrices import jump3d
    >>> A = jump3d(8, contrast=1e4)
    >>> A.shape, bool(abs(A - A.T).max() == 0)
    ((512, 512), True)
    """
    n = _check_n(n)
    contrast = float(contrast)
    if not 1 <= contrast <= 1e300:       # (NaN too; the diagonal sums 12 faces)
        raise ValueError(f"argument contrast must be a number in [1, 1e300], got {contrast}")
    rng = np.random.default_rng(seed)
    k = np.where(rng.random((n, n, n)) < 0.5, 1.0, contrast)     # k[z, y, x]
    N = n ** 3
    idx = np.arange(N).reshape(n, n, n)
    rows, cols, vals = [], [], []
    diag = np.zeros((n, n, n))
    for axis in range(3):
        lo = [slice(None)] * 3
        hi = [slice(None)] * 3
        lo[axis], hi[axis] = slice(0, n - 1), slice(1, n)
        a, c = k[tuple(lo)], k[tuple(hi)]
        face = 2.0 / (1.0 / a + 1.0 / c)         # harmonic mean (2ac/(a+c) overflowed)
        i, j = idx[tuple(lo)].ravel(), idx[tuple(hi)].ravel()
        rows += [i, j]
        cols += [j, i]
        vals += [-face.ravel(), -face.ravel()]
        diag[tuple(lo)] += face
        diag[tuple(hi)] += face
        # Dirichlet faces: the boundary value sits half a cell away (coefficient 2 k)
        first = [slice(None)] * 3
        last = [slice(None)] * 3
        first[axis], last[axis] = slice(0, 1), slice(n - 1, n)
        diag[tuple(first)] += 2.0 * k[tuple(first)]
        diag[tuple(last)] += 2.0 * k[tuple(last)]
    rows.append(idx.ravel())
    cols.append(idx.ravel())
    vals.append(diag.ravel())
    A = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                      shape=(N, N))
    return _canonical(A)


def coupled_convdiff2d(n, peclet=10.0, coupling=1.0, components=3):
    """A block-coupled nonsymmetric system: ``components`` convection-diffusion
    equations on an ``n x n`` grid with cross-diffusion, coupled at every node by a
    dense nonsymmetric reaction matrix.

    ``A = kron(L, D) + kron(V, I_c) + 50 h^2 kron(I, R)`` ordered node by node (block
    size ``components``, every block dense for ``coupling > 0``): ``L`` the 5-point
    diffusion operator, ``D`` a cross-diffusion matrix (1 on the diagonal, ``0.2 coupling``
    off it: SPD while ``0.2 coupling (components - 1) < 1``, and for ``coupling < 5`` with
    three components; the eigenvalue ``1 - 0.2 coupling`` turns negative past that),
    ``V`` the upwind convection of :func:`convection_diffusion2d` at ``peclet``, and
    ``R`` a fixed ``c x c`` reaction matrix (nonsymmetric, positive-definite
    symmetric part) -- the structure of multi-species transport and of linearised
    flow/chemistry blocks.

    Examples
    --------
    >>> from mpsolve.matrices import coupled_convdiff2d, detect_block_size
    >>> A = coupled_convdiff2d(10)
    >>> A.shape, detect_block_size(A)
    ((300, 300), 3)
    """
    n = _check_n(n)
    c = _check_n(components, "components")
    coupling = float(coupling)
    if not math.isfinite(coupling) or coupling < 0:
        raise ValueError(f"argument coupling must be a finite number >= 0, got {coupling}")
    L = _convdiff(n, 0.0, (1.0, 1.0), True, 2)
    V = _convdiff(n, peclet, (1.0, 1.0), True, 2) - L
    h = 1.0 / (n + 1)
    # R = 2 I + S + K: S symmetric with small entries, K skew: nonsymmetric, and
    # (R + R^T)/2 = 2 I + S stays positive definite
    i = np.arange(c)
    S = 0.5 / (1.0 + np.abs(i[:, None] - i[None, :]))
    np.fill_diagonal(S, 0.0)
    K = np.sign(i[None, :] - i[:, None]) * 1.5
    R = coupling * (2.0 * np.eye(c) + S + K) + np.eye(c)
    D = np.eye(c) + 0.2 * coupling * (1.0 - np.eye(c))
    A = (sp.kron(L, D) + sp.kron(V, np.eye(c))
         + (h * h * 50.0) * sp.kron(sp.identity(n * n), R))
    return _canonical(A)


def _helmholtz(n, dim, k, eps):
    n = _check_n(n)
    k, eps = float(k), float(eps)
    if not math.isfinite(k) or k < 0:
        raise ValueError(f"argument k must be a finite wavenumber >= 0, got {k}")
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(f"argument eps must be a finite damping >= 0, got {eps}")
    L = poisson2d(n) if dim == 2 else poisson3d(n)
    h = 1.0 / (n + 1)
    shift = (k * h) ** 2 * complex(1.0, eps)
    return _canonical(L - shift * sp.identity(L.shape[0], format="csr"), np.complex128)


def helmholtz2d(n, k=10.0, eps=0.5):
    """Damped Helmholtz operator ``-Laplace(u) - k**2 (1 + i eps) u`` on the unit square.

    The 5-point Laplacian of :func:`poisson2d` minus the complex shift ``(k h)**2 (1 + i eps)``
    on the diagonal (``h = 1/(n+1)``, Dirichlet boundary; the matrix is ``h**2`` times the
    operator). Complex-symmetric (``A == A.T``) but not Hermitian when ``eps > 0``. Every
    eigenvalue is ``lambda_j - (k h)**2 (1 + i eps)`` with ``lambda_j`` one of the Laplacian's
    (real, in ``(0, 8)``): the real parts turn negative for ``k > ~pi sqrt(2)`` (indefinite;
    harder for Krylov methods as ``k`` grows), the imaginary parts are all ``-(k h)**2 eps``
    (the damping keeps the matrix away from singular; small ``eps`` is harder, ``eps = 0``
    is the real, possibly singular, Helmholtz matrix).

    Parameters
    ----------
    n : int
        Grid points per direction (order ``n**2``).
    k : float, optional
        Wavenumber (default 10: about ``2 pi (n+1) / k`` grid points per wavelength).
    eps : float, optional
        Relative damping ``>= 0`` (default 0.5, the shifted-Laplacian choice; a physical
        absorption is often 0.01--0.1).

    Returns
    -------
    scipy.sparse.csr_matrix
        complex128.

    Examples
    --------
    >>> from mpsolve.matrices import helmholtz2d
    >>> A = helmholtz2d(9, k=10.0, eps=0.5)
    >>> A.shape, A.dtype, abs(A - A.T).max(), A[0, 0]
    ((81, 81), dtype('complex128'), np.float64(0.0), np.complex128(3-0.5j))
    """
    return _helmholtz(n, 2, k, eps)


def helmholtz3d(n, k=10.0, eps=0.5):
    """Damped Helmholtz operator ``-Laplace(u) - k**2 (1 + i eps) u`` on the unit cube.

    The 7-point Laplacian of :func:`poisson3d` minus ``(k h)**2 (1 + i eps)`` on the diagonal;
    see :func:`helmholtz2d` for the parameters and the spectrum (Laplacian eigenvalues in
    ``(0, 12)`` here). Complex-symmetric, non-Hermitian for ``eps > 0``, order ``n**3``.

    Examples
    --------
    >>> from mpsolve.matrices import helmholtz3d
    >>> A = helmholtz3d(4, k=5.0, eps=0.1)
    >>> A.shape, A.nnz, A[0, 0]
    ((64, 64), 352, np.complex128(5-0.1j))
    """
    return _helmholtz(n, 3, k, eps)


def magnetic2d(n, flux=0.1, shift=0.0):
    """Magnetic Laplacian on an ``n x n`` grid: Hermitian positive definite, complex.

    The 5-point Laplacian of a charged particle in a uniform magnetic field, in the Landau
    gauge: the coupling between neighbours ``p`` and ``q`` is ``-exp(i theta_pq)`` with
    ``theta = 0`` along x and ``theta = 2 pi flux * i`` from ``(i, j)`` to ``(i, j+1)``, so
    every grid cell carries the flux ``2 pi flux``; ``A[q, p] = conj(A[p, q])``. Diagonal
    ``4 + shift``. With the Dirichlet boundary the matrix is positive definite for every
    flux (``x^H A x >= |x|^T L |x|`` with ``L`` the ordinary Laplacian), its smallest
    eigenvalue above the Laplacian's, symmetric about ``flux = 1/2`` (``flux`` and ``1 -
    flux`` give conjugate matrices) and largest near it; ``flux = 0`` gives
    :func:`poisson2d`. Integer fluxes give a gauge-equivalent of the Laplacian, so choose
    ``0 < flux < 1``.

    Parameters
    ----------
    n : int
        Grid points per direction (order ``n**2``).
    flux : float, optional
        Flux per cell in units of the flux quantum (default 0.1).
    shift : float, optional
        Added to the diagonal (default 0), ``>= 0``.

    Returns
    -------
    scipy.sparse.csr_matrix
        complex128, Hermitian (``A == A.conj().T``), not complex-symmetric for ``flux`` not
        a multiple of 1/2.

    Examples
    --------
    >>> from mpsolve.matrices import magnetic2d
    >>> A = magnetic2d(6, flux=0.25)
    >>> A.shape, A.dtype, abs(A - A.conj().T).max()
    ((36, 36), dtype('complex128'), np.float64(0.0))
    """
    n = _check_n(n)
    flux, shift = float(flux), float(shift)
    if not math.isfinite(flux):
        raise ValueError(f"argument flux must be a finite number, got {flux}")
    if not math.isfinite(shift) or shift < 0:
        raise ValueError(f"argument shift must be a finite number >= 0, got {shift}")
    idx = np.arange(n * n).reshape(n, n)            # idx[j, i] = i + n j
    i = np.broadcast_to(np.arange(n)[None, :], (n, n))
    # x edges (i, j) -> (i+1, j): phase 0; y edges (i, j) -> (i, j+1): phase 2 pi flux i
    p = np.concatenate([idx[:, :-1].ravel(), idx[:-1, :].ravel()])
    q = np.concatenate([idx[:, 1:].ravel(), idx[1:, :].ravel()])
    theta = np.concatenate([np.zeros(n * (n - 1)), 2.0 * math.pi * flux * i[:-1, :].ravel()])
    w = -np.exp(1j * theta)
    N = n * n
    rows = np.concatenate([p, q, np.arange(N)])
    cols = np.concatenate([q, p, np.arange(N)])
    vals = np.concatenate([w, w.conj(), np.full(N, 4.0 + shift, dtype=np.complex128)])
    return _canonical(sp.csr_matrix((vals, (rows, cols)), shape=(N, N)), np.complex128)


GENERATORS = {
    "laplacian1d": laplacian_1d,
    "poisson2d": poisson2d,
    "poisson3d": poisson3d,
    "anisotropic2d": anisotropic2d,
    "anisotropic3d": anisotropic3d,
    "convdiff2d": convection_diffusion2d,
    "convdiff3d": convection_diffusion3d,
    "elasticity3d": elasticity3d,
    "jump3d": jump3d,
    "coupled2d": coupled_convdiff2d,
    "helmholtz2d": helmholtz2d,
    "helmholtz3d": helmholtz3d,
    "magnetic2d": magnetic2d,
}
"""Spec names accepted by :func:`generate`, mapped to their generator functions."""


def _parse_value(text):
    t = text.strip()
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if t.startswith("(") and t.endswith(")"):
        return tuple(_parse_value(x) for x in t[1:-1].split(";") if x.strip())
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        pass
    if low == "pi":
        return math.pi
    raise ValueError(f"cannot read value {text!r}: expected a number, true/false, 'pi' or a "
                     "tuple like (1;0.01;1e-4)")


def generate(spec):
    """Build a generated problem from a text spec ``"name:size,key=value,..."``.

    Parameters
    ----------
    spec : str
        Generator name (a key of :data:`GENERATORS`), a colon, the grid size, then optional
        ``key=value`` keyword arguments separated by commas. Values are numbers, ``true`` /
        ``false``, ``pi``, or tuples written ``(a;b;c)``.
        Examples: ``"poisson3d:100"``, ``"elasticity3d:20,nu=0.45"``,
        ``"convdiff2d:200,peclet=50"``, ``"anisotropic3d:30,eps=(1;0.01;0.0001)"``.

    Returns
    -------
    scipy.sparse.csr_matrix

    Raises
    ------
    ValueError
        Unknown generator name, missing or bad size, unknown keyword or bad value; the message
        lists what is accepted.

    Examples
    --------
    >>> from mpsolve.matrices import generate
    >>> generate("poisson2d:30").shape
    (900, 900)
    >>> generate("convdiff2d:20,peclet=50,upwind=false").shape
    (400, 400)
    """
    if not isinstance(spec, str):
        raise TypeError(f"argument spec must be a string like 'poisson3d:100', got {spec!r}")
    name, sep, rest = spec.strip().partition(":")
    name = name.strip().lower()
    if name not in GENERATORS:
        raise ValueError(f"unknown generator {name!r} in spec {spec!r}; known: "
                         f"{', '.join(sorted(GENERATORS))}")
    func = GENERATORS[name]
    params = [p for p in inspect.signature(func).parameters if p != "n"]
    parts = [p.strip() for p in rest.split(",")] if sep else []
    if not parts or not parts[0] or "=" in parts[0]:
        raise ValueError(f"spec {spec!r} lacks the grid size: write '{name}:<n>' "
                         f"e.g. '{name}:32'")
    try:
        n = int(parts[0])
    except ValueError:
        raise ValueError(f"spec {spec!r}: grid size {parts[0]!r} is not an integer") from None
    kwargs = {}
    for p in parts[1:]:
        if not p:
            continue
        key, eq, val = p.partition("=")
        key = key.strip()
        if not eq:
            raise ValueError(f"spec {spec!r}: expected key=value after the size, got {p!r}")
        if key not in params:
            raise ValueError(f"spec {spec!r}: {name} has no parameter {key!r}; accepted: "
                             f"{', '.join(params) or 'none'}")
        try:
            kwargs[key] = _parse_value(val)
        except ValueError as exc:
            raise ValueError(f"spec {spec!r}, parameter {key}: {exc}") from None
    return func(n, **kwargs)
