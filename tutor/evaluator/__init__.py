"""The evaluator: the front ends' client (`client`, no torch), and behind its pipe the worker
process that holds the network warm and grades with the engine (`worker`), `pack check`
(`packcheck`) and a started child's program (`child`). The children themselves come from
`tutor.process`; their confinement from `tutor.sandbox` (docs/architecture.md).

Above the grading core and training; below the session and the front ends.
"""
