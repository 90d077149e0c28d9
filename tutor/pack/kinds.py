"""The kinds of step a pack may hold, as types: what every layer may ask of a step's kind.

A pack names a step's kind with a word (`kind = "function"`, docs/packs.md); `packs.py` reads
that word once, through `parse`, into one of the classes below, and from there on nothing
compares words. Each layer asks the kind what it needs: the front ends how to describe the
step and what it grades, the lesson's rules whether it is checked or trained, the lesson which
references it has. How the engine plans, grades and holds out a check of each kind is the
engine's own tier of the same idea (`tutor/core/kinds/`). A new kind of step is one subclass here,
one entry in `KINDS`, and its class in `tutor/core/kinds/` (docs/architecture.md).

No torch here: the UI loads packs, and with them this module.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Protocol

from tutor.pack.flow import gradient
from tutor.pack.schema import Field


class Step(Protocol):
    """What a kind reads of a step (`tutor.pack.model.Step` has it): the kinds sit below the
    pack's model, which names its steps' kinds, so they see a step only through this."""

    title: str
    checks: tuple[str, ...]
    replay: bool
    function: Any


class StepKind(ABC):
    """What a step asks of the learner and how the tutor treats it, for every layer.

    Instances hold no state: two steps of one kind share the same answers, and a kind compares
    equal to another instance of its class.
    """

    #: The word a pack writes for this kind, and what `steps --json` prints as `kind`.
    name: ClassVar[str]
    #: Whether a check grades the step (`check`, the run key); a kind that is not checked is
    #: done some other way.
    checked: ClassVar[bool] = True
    #: Whether the step is a training run (`train`) rather than a check.
    trained: ClassVar[bool] = False
    #: The pack fields this kind owns besides every step's (tutor/pack/schema.py): a step of
    #: another kind may not write them.
    fields: ClassVar[tuple[Field, ...]] = ()
    #: Whether the step's graded names are gradients of the lesson's forward tensors
    #: (`d<tensor>`), graded against autograd's references for the step's lines; False for a
    #: kind whose answers are its own (a function's outputs, at sizes of their own).
    of_forward_tensors: ClassVar[bool] = True

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __str__(self) -> str:
        return self.name

    @abstractmethod
    def graded_name(self, tensor: str) -> str:
        """The name under which the learner's answer for `tensor` (one of a step's `checks`
        or `partials`) is graded: `dlogits` for the tensor `logits`, or a function's output
        as the call names it.

        Takes the name as the pack writes it in `checks`; returns the learner's name for the
        answer. Raises nothing.
        """

    def graded_names(self, step: Step) -> tuple[str, ...]:
        """The names a check of `step` grades, as the learner writes them, in the order of its
        rows (empty for a kind that is not checked).

        Takes the step; returns a tuple of names. Raises nothing.
        """
        return tuple(self.graded_name(t) for t in step.checks) if self.checked else ()

    def replays_earlier(self, step: Step) -> bool:
        """Whether the earlier steps of `step`'s exercise are replayed into its namespace before
        the learner's code runs, as the cells of a notebook would be (the pack's `replay`).

        Takes the step; returns a bool. Raises nothing.
        """
        return False

    def how_checked(self, step: Step) -> str:
        """One sentence for the learner on how the tutor runs their code for `step`, where that
        differs from comparing gradients with autograd; "" where it does not.

        Takes the step; returns Markdown (inline code only) or "". Raises nothing.
        """
        return ""

    def describe(self, step: Step) -> str:
        """What the step asks for, in a few words (for lists and headings).

        Takes the step; returns plain text: its title, and the names it grades where the
        title does not name them. Raises nothing.
        """
        grads = self.graded_names(step)
        if all(g in step.title for g in grads):
            return step.title
        return f"{step.title}: {', '.join(grads)}"


class LineGradient(StepKind):
    """The gradient of each input of one forward line, written out line by line (the atomic
    exercise): the rule probe varies the gradient arriving at that line."""

    name = "gradient"

    def graded_name(self, tensor: str) -> str:
        return gradient(tensor)

    def replays_earlier(self, step: Step) -> bool:
        return step.replay


class Fused(LineGradient):
    """Gradients through several forward lines at once, in one expression (the lecture's
    cross-entropy and batchnorm in one go, a whole layernorm): graded as a line's, with the
    gradients arriving at every one of its lines varied together by the rule probe.

    A pack writes such a step as `kind = "gradient"`; it is fused when it differentiates more
    than one forward line, or a line its own exercise adds to the forward pass (a fused
    operation such as `F.cross_entropy`, standing for the lines the lecture spelled out).
    """


class Function(StepKind):
    """A whole function (llm.c's `layernorm_backward`, an optimiser's update), called on the
    lesson's tensors and then on inputs of freshly drawn sizes; its outputs are graded."""

    name = "function"
    of_forward_tensors = False
    fields = (
        Field("call", "string", "how the function is called, e.g. `dx = f(dout, x)`",
              required=True),
        Field("lesson", "string", "builds the call's inputs from the lesson's batch",
              required=True),
        Field("draw", "string", "draws inputs at new sizes from a generator `g`", required=True),
        Field("expect", "string", "computes the expected outputs (autograd or torch.optim)",
              required=True),
        Field("time", "string", "an output with a time axis, written as its slice at step `t` "
              "(`dxs[:, t]`): a wrong one is compared step by step"),
        Field("picture", "table", "[steps.picture]: a carried gradient drawn at every time "
              "step, the learner's beside autograd's"),
        Field("forward", "string", "the forward code the function differentiates, shown by "
              "`list` and `show` in place of its `lines` (a loop through time)"),
    )

    def graded_name(self, tensor: str) -> str:
        return tensor

    def how_checked(self, step: Step) -> str:
        call = step.function.call if step.function else step.title
        return (f"The tutor calls your function as `{call}`: first on the lesson's own "
                "tensors, then on inputs of freshly drawn sizes.")


class Training(StepKind):
    """The training exercise: the learner's accepted steps run in a real training loop; it is
    trained (`train`), never checked."""

    name = "training"
    checked = False
    trained = True
    of_forward_tensors = False

    def graded_name(self, tensor: str) -> str:
        return tensor


#: The words a pack may write for `kind`, and the kind each one reads as. A "gradient" step is
#: refined into `Fused` by `parse` when its lines say so.
KINDS: dict[str, type[StepKind]] = {
    LineGradient.name: LineGradient,
    Function.name: Function,
    Training.name: Training,
}


def parse(word: object, lines: tuple[str, ...] = (), added: frozenset[str] = frozenset()
          ) -> StepKind:
    """The kind a pack's `kind` word names, for a step that differentiates `lines`, in an
    exercise that adds the forward lines `added`.

    Raises ValueError, naming the known kinds, for a word that names none.
    """
    cls = KINDS.get(word) if isinstance(word, str) else None
    if cls is None:
        known = ", ".join(f'"{k}"' for k in KINDS)
        raise ValueError(f"'kind' is {word!r}; the known kinds are {known}")
    if cls is LineGradient and (len(lines) > 1 or added.intersection(lines)):
        return Fused()
    return cls()
