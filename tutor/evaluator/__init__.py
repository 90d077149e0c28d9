"""The evaluator: the front ends' client, and the worker process that holds the lesson warm,
grades with the engine and starts a confined child for every piece of learner code
(docs/architecture.md). Confinement itself lives in `tutor.sandbox`."""
