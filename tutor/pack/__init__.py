"""The lesson as data: a pack's steps, exercises and setup code (`model`), the kinds of step as
every layer sees them (`kinds`), the compiled-pack cache (`cache`) and the lesson's rules for
what opens when (`curriculum`).

No torch; imports only `tutor.values` below it.
"""
