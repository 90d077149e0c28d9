"""What `torch`, `F` and `math` mean inside the sandbox: the real functions and classes, without
the other modules they carry as attributes (`torch.sys`, `torch.os`, `torch.hub`, ...).

Learner code reaches the outside world only through names it is given; handing it the real
`torch` module would hand it every module torch happens to import. A view is built once per
module and keeps only the submodules a backward pass can use, themselves as views.
"""

from __future__ import annotations

import types

# Submodules worth having (torch.nn.functional, torch.linalg, ...); every other module
# attribute is left out of the view.
ALLOWED_SUBMODULES = {"nn", "functional", "linalg", "special", "fft", "init"}

_views: dict[str, types.ModuleType] = {}


def safe_view(module: types.ModuleType) -> types.ModuleType:
    """A module object with the same public functions, classes and constants as `module`."""
    if module.__name__ in _views:
        return _views[module.__name__]
    view = types.ModuleType(module.__name__, module.__doc__)
    _views[module.__name__] = view  # before recursing: submodules may refer back
    # vars(), not dir(): dir() would trigger torch's lazy imports of heavy submodules.
    for name, value in list(vars(module).items()):
        if name.startswith("_"):
            continue
        if isinstance(value, types.ModuleType):
            if name not in ALLOWED_SUBMODULES or not value.__name__.startswith("torch"):
                continue
            value = safe_view(value)
        setattr(view, name, value)
    return view
