"""The tutor in a Jupyter notebook: `%load_ext tutor`, then `%%check STEP_ID` cells."""
