"""mpsolve.matrices: Matrix Market I/O, generated problems, the SuiteSparse collection.

Examples
--------
>>> from mpsolve.matrices import generate, matrix_info
>>> A = generate("elasticity3d:4")
>>> matrix_info(A)["block_size"]
3
"""

from .analysis import detect_block_size, matrix_info
from .collection import (
    DEFAULT_BASE_URL,
    CollectionError,
    MatrixEntry,
    download,
    find,
    get_cache_dir,
    list_collection,
    load,
    search_path,
)
from .generators import (
    GENERATORS,
    anisotropic2d,
    anisotropic3d,
    convection_diffusion2d,
    convection_diffusion3d,
    coupled_convdiff2d,
    elasticity3d,
    generate,
    helmholtz2d,
    helmholtz3d,
    jump3d,
    laplacian_1d,
    magnetic2d,
    poisson2d,
    poisson3d,
)
from .formats import MATRIX_SUFFIXES, read_dense, read_matrix
from .mmio import MatrixMarketError, mtx_header, read_mtx, read_vector, write_mtx

__all__ = [
    # Matrix Market
    "MatrixMarketError", "read_mtx", "read_vector", "write_mtx", "mtx_header",
    # other files
    "read_matrix", "read_dense", "MATRIX_SUFFIXES",
    # generators
    "laplacian_1d", "poisson2d", "poisson3d", "anisotropic2d", "anisotropic3d",
    "convection_diffusion2d", "convection_diffusion3d", "elasticity3d", "jump3d",
    "coupled_convdiff2d", "helmholtz2d", "helmholtz3d", "magnetic2d", "GENERATORS", "generate",
    # collection
    "MatrixEntry", "CollectionError", "load", "find", "list_collection", "download",
    "search_path", "get_cache_dir", "DEFAULT_BASE_URL",
    # analysis
    "matrix_info", "detect_block_size",
]
