"""The learner's session: the lesson controller every front end talks to (`controller`), the
progress store (`store`), checks and runs as text (`report`), export of the learner's code
(`export`), files of `# %% STEP` cells (`cells`), the notebook's workbook (`workbook`) and which
lesson opens (`packchoice`).

Above the evaluator's client (which it is handed) and the pack; never the engine or torch.
"""
