"""The subcommands of `backprop-tutor`, in the order `--help` lists them."""

from tutor.commands.autograder import AUTOGRADER
from tutor.commands.check import CHECK
from tutor.commands.export import EXPORT, WATCH
from tutor.commands.grade import GRADE
from tutor.commands.hint import HINT
from tutor.commands.notebook import NOTEBOOK
from tutor.commands.pack import PACK
from tutor.commands.progress import PROGRESS, RESET
from tutor.commands.serve import SERVE
from tutor.commands.steps import LIST, SHOW
from tutor.commands.train import TRAIN

COMMANDS = [LIST, SHOW, HINT, CHECK, PROGRESS, RESET, EXPORT, WATCH, TRAIN, GRADE, AUTOGRADER,
            PACK, NOTEBOOK, SERVE]
