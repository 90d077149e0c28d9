__version__ = "0.1.0"

import importlib


# `%load_ext tutor`. The notebook front end is imported only when it is loaded, so that
# `import tutor` stays cheap (no IPython, no torch). By name: the package itself sits in no
# layer, and every module imports it for `__version__` without reaching the notebook.
def load_ipython_extension(ipython) -> None:
    importlib.import_module("tutor.notebook.magics").load(ipython)


def unload_ipython_extension(ipython) -> None:
    importlib.import_module("tutor.notebook.magics").unload()
