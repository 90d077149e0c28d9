"""The learner's session: the lesson controller every front end talks to (`controller`), the
progress store (`store`, its error in `errors`), checks and runs as text (`report`), export of
the learner's code (`export`), files of `# %% STEP` cells (`cells`), the notebook's workbook
(`workbook`), which lesson opens (`packchoice`), and what the command line and the notebook's
magics share about input the learner typed (`lookup`).

Above the evaluator's client (which it is handed) and the pack; never the engine or torch.
"""
