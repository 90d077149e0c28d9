__version__ = "0.1.0"


# `%load_ext tutor`. The notebook front end is imported only when it is loaded, so that
# `import tutor` stays cheap (no IPython, no torch).
def load_ipython_extension(ipython) -> None:
    from tutor.notebook.magics import load

    load(ipython)


def unload_ipython_extension(ipython) -> None:
    from tutor.notebook.magics import unload

    unload()
