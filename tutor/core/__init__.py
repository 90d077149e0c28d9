"""The grading core: one check's pipeline (`engine`), the learner's side of it run in the child
(`execution`, `candidate`), autograd's references (`network`), verdicts and their reasons
(`grading`, `probe`, `diagnosis`, `derived`, `rewrites`, and `smallest`: the smallest change
to the learner's code that makes it right), a function step's cases (`functions`),
each kind of step's check (`kinds`) and `pack check` (`packcheck`).

Imports the pack, the values, the sandbox and the process plumbing below it; never the session
(the progress store), the evaluator's client or a front end.
"""
