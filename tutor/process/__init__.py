"""Process plumbing for the confined child that runs learner code: one fork per check
(`isolate`), a started interpreter (`spawn`), the fork server that hands those out on Linux
(`forkserver`), and the framing of every message on the worker's pipe (`protocol`).

Below the grading core (the engine asks these for a child); imports only the sandbox and
`tutor.values`, never the engine, the session or a front end.
"""
