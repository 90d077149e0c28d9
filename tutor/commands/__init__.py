"""The subcommands of `backprop-tutor`, in the order `--help` lists them."""

from tutor.commands.check import CHECK
from tutor.commands.steps import LIST, SHOW

COMMANDS = [LIST, SHOW, CHECK]
