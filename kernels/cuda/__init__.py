"""numba-cuda kernels (GPU backend).  Not yet implemented: the GPU backend has its own issue.

Importing this package registers nothing, so a lookup for ``device="gpu"``
raises a :class:`KeyError` that says so.
"""
