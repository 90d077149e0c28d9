"""What every layer says, as types: a check's verdict (`results`), a training run (`runs`), the
value-type base they share (`records`), and seconds as text (`durations`).

No torch and nothing of the tutor above: the engine builds these, the pipe carries them as plain
data, the session stores them and every front end reads them.
"""
