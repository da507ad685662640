"""The Krylov methods, one file each (nothing else lives here); :mod:`mpsolve.driver` runs them."""
from .bicgstab import bicgstab_body
from .cg import cg_body
from .gmres import gmres_body

BODIES = {"cg": cg_body, "gmres": gmres_body, "bicgstab": bicgstab_body}

__all__ = ["BODIES", "cg_body", "gmres_body", "bicgstab_body"]
