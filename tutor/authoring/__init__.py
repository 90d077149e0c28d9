"""Making a lesson from a forward pass (`backprop-tutor pack new FORWARD.py --out DIR`).

`forward_file` reads the instructor's file without running it and says in one line why it cannot
make a lesson; `trial` runs it in the confined child the checks use, takes every line's shapes
and autograd's gradients there, derives each line's backward pass (`derivative`, a
source-to-source derivative written as a learner writes it) and holds it to autograd; `steps`
cuts the backward pass into steps, with templates, hints and catalogued mistakes; `writer` puts
the pack on disk; `new` runs the whole of it.

Sits beside the evaluator: below the front ends, above the grading core, the process plumbing
and the sandbox, whose child and rules it reuses. Nothing here is imported by the engine.
"""
