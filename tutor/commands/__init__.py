"""The subcommands of `backprop-tutor`, in the order `--help` lists them."""

from tutor.commands.check import CHECK
from tutor.commands.export import EXPORT, WATCH
from tutor.commands.progress import PROGRESS, RESET
from tutor.commands.steps import LIST, SHOW
from tutor.commands.train import TRAIN

COMMANDS = [LIST, SHOW, CHECK, PROGRESS, RESET, EXPORT, WATCH, TRAIN]
