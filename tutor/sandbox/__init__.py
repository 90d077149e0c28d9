"""Confinement only: the torch and the classes learner code is handed (`modules`, `classes`), the
run-time guard on every attribute read (`guard`), the syntax check before anything runs
(`policy`), the OS limits of a child (`confine`: Landlock, seccomp, memory and CPU), text made
safe for a terminal (`clean`) and what the guard allows (`allowlist`).

Imports nothing of the tutor: the process plumbing, the grading core and everything above build
on it.
"""
