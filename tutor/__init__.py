import importlib

from tutor.version import __version__

__all__ = ["__version__", "load_ipython_extension", "unload_ipython_extension"]


# `%load_ext tutor`. The notebook front end is imported only when it is loaded, so that
# `import tutor` stays cheap (no IPython, no torch). By name: the package itself sits in no
# layer; the version lives below every layer (tutor/version.py).
def load_ipython_extension(ipython) -> None:
    importlib.import_module("tutor.notebook.magics").load(ipython)


def unload_ipython_extension(ipython) -> None:
    importlib.import_module("tutor.notebook.magics").unload()
