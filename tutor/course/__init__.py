"""Grading a class where classes already grade: a submission (a file of `# %% STEP` cells, the
tutor's workbook, or the lecture's own notebook filled in) read into the pack's steps
(`submission`, `lecture`), scored through the lesson controller by the rules `check` uses
(`scoring`, `session`), written as Gradescope's or PrairieLearn's results file (`platforms`),
summed up for the instructor (`classreport`), and the autograder bundle (`bundle`).

A front end of the session: it imports the controller, the evaluator's client, the pack and the
values; never the engine, the progress store or torch.
"""
