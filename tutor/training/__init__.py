"""Exercise 4: the learner's own backward pass trains the network; autograd only checks it.

A run has three phases, as in the lecture's last cell:

1. gradient check: for the first steps every parameter gradient the code produces is compared
   with autograd's on the same batch (the cmp table); a divergence stops the run and says where;
2. training: the remaining steps run the learner's code alone, with autograd switched off
   (torch.inference_mode: no_grad that also skips autograd's version counters);
3. results: the pack's own evaluation (the network calibrated over the training set where the
   pack defines how, the split losses, sampled names), as the run's progress says.

`plan` is the text work (the editor's code, the settings, notes about the code, recording a
run) that the UI and the CLI use; `run` is the computation, in the evaluator process, and
`picture` the picture through time it draws at a few steps (`[training] picture`). Neither
imports torch at module level, so the UI can import this package; `run` is loaded only when
one of its names is first asked for.
"""

from tutor.training.plan import (
    Section,
    TrainingSettings,
    backward_sections,
    forward_for,
    names_read,
    python_loops,
    speed_notes,
    training_code,
    training_exercise,
    training_step,
    with_header,
)

# The computation is imported on first use (PEP 562): the UI and the CLI, which want only the
# text work, then never load it, so the tutor's first frame does not wait for it.
_RUN_NAMES = frozenset({
    "BATCH_CHUNK",
    "COMPILE_OPTIONS",
    "REPORT_INTERVAL",
    "SAMPLE_SEED_OFFSET",
    "Batches",
    "CodeFailure",
    "Gradients",
    "Trainer",
    "eager_step",
    "evaluation_namespace",
    "init_network",
    "learner_update",
    "run_training",
    "sgd",
    "step_function",
    "train_steps",
    "training_namespace",
    "training_sizes",
})


def __getattr__(name: str):
    if name in _RUN_NAMES:
        from tutor.training import run

        return getattr(run, name)
    raise AttributeError(f"module 'tutor.training' has no attribute {name!r}")


__all__ = [
    "BATCH_CHUNK",
    "Batches",
    "COMPILE_OPTIONS",
    "CodeFailure",
    "Gradients",
    "REPORT_INTERVAL",
    "SAMPLE_SEED_OFFSET",
    "Section",
    "Trainer",
    "TrainingSettings",
    "backward_sections",
    "eager_step",
    "forward_for",
    "evaluation_namespace",
    "init_network",
    "learner_update",
    "sgd",
    "names_read",
    "python_loops",
    "run_training",
    "speed_notes",
    "step_function",
    "train_steps",
    "training_code",
    "training_exercise",
    "training_namespace",
    "training_sizes",
    "training_step",
    "with_header",
]
